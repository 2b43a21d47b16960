"""Can a policy predict where the head-room is? The estimators behind the predictability studies of
``docs/headroom.md`` (sections 4 and 5), pure functions over numpy arrays.

- From the prompt (section 4): a problem's gain from sampling over greedy predicted by ridge
  regression (penalty by exact leave-one-out) or by its nearest training problems (cosine), on
  standardised features; the Spearman correlation of predicted and actual gain; the cross-fitted
  oracle between greedy and one sampler (``headroom.oracle_table``); the one-pass switching policy
  that samples where the LM is unsure (a ``decode`` chooser).
- From greedy's hidden states while it decodes (section 5): the ROC AUC, L2-penalised logistic
  probes on the top principal components folded back into one affine map of the raw features, the
  penalty chosen by inner cross-validation, and the threshold ``tau`` at which a probe fires, chosen
  on training rows.

``benchmarks/headroom_probes.py`` runs both studies on the default model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..decoding.loop import StepFeatures
from .headroom import oracle_table

__all__ = [
    "RIDGE_PENALTIES",
    "standardise",
    "ridge_predict",
    "neighbours_predict",
    "spearman",
    "crossfit_oracle",
    "switching_chooser",
    "LOGISTIC_PENALTIES",
    "TAU_GRID",
    "auc",
    "fit_logistic",
    "LinearProbe",
    "principal_basis",
    "logistic_probes",
    "choose_logistic",
    "fires",
    "choose_tau",
    "first_firing_step",
]


RIDGE_PENALTIES = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5)


def standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centre and scale each feature by the training rows' mean and std (a constant feature stays 0)."""
    mean, std = train.mean(0), train.std(0)
    std[std == 0] = 1.0
    return (train - mean) / std, (test - mean) / std


def ridge_predict(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, float]:
    """Ridge regression with an intercept, its penalty chosen among ``RIDGE_PENALTIES`` by the exact
    leave-one-out error on the training rows (kernel form: features outnumber rows here)."""
    y_mean = y_train.mean()
    y = y_train - y_mean
    kernel = x_train @ x_train.T  # [n, n]
    eigval, eigvec = np.linalg.eigh(kernel)
    best = (np.inf, RIDGE_PENALTIES[0])
    for penalty in RIDGE_PENALTIES:
        # hat matrix H = K (K + penalty I)^-1 = V diag(l / (l + penalty)) V^T
        shrink = eigval / (eigval + penalty)
        fitted = eigvec @ (shrink * (eigvec.T @ y))
        leverage = (eigvec**2) @ shrink
        loo = np.mean(((y - fitted) / (1 - leverage)) ** 2)
        best = min(best, (loo, penalty))
    penalty = best[1]
    alpha = eigvec @ ((eigvec.T @ y) / (eigval + penalty))  # dual weights [n]
    return y_mean + x_test @ (x_train.T @ alpha), penalty


def neighbours_predict(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, k: int) -> np.ndarray:
    """Mean target of the ``k`` training rows most cosine-similar to each test row."""
    a = x_train / np.linalg.norm(x_train, axis=1, keepdims=True).clip(1e-12)
    b = x_test / np.linalg.norm(x_test, axis=1, keepdims=True).clip(1e-12)
    nearest = np.argsort(-(b @ a.T), axis=1)[:, :k]
    return y_train[nearest].mean(1)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of ``a`` and ``b`` (NaN when either is constant)."""
    ranks = [np.argsort(np.argsort(v, kind="stable"), kind="stable").astype(float) for v in (a, b)]
    if ranks[0].std() == 0 or ranks[1].std() == 0:
        return float("nan")
    return float(np.corrcoef(*ranks)[0, 1])


def crossfit_oracle(greedy: np.ndarray, samples: np.ndarray, k: int) -> tuple[float, float, float]:
    """``evaluation.headroom``'s cross-fitted head-room between greedy and the sampler, in points (mean
    and 95% interval over problems): per problem the better of the two chosen on one half of the
    samples and scored on the other, both ways, minus the best static strategy chosen the same way.
    Greedy is deterministic, so its one outcome stands for each of its samples."""
    rewards = np.stack([np.repeat(greedy[:, None], samples.shape[1], axis=1), samples], axis=1)  # [P, 2, n]
    row = oracle_table(rewards, ["greedy", "sampler"], [k])[0]
    low, high = row.crossfit_headroom_ci
    return 100 * row.crossfit_headroom, 100 * low, 100 * high


def switching_chooser(threshold: float, latch: bool, rows: int) -> Callable:
    """A one-pass policy over actions (greedy, the sampler): sample at a step whose base max-probability
    is below ``threshold``; with ``latch``, also at every later step of that row."""
    switched = torch.zeros(rows, dtype=torch.bool)

    def choose(features: StepFeatures) -> torch.Tensor:
        unsure = features.max_prob < threshold
        if not latch:
            return unsure.long()
        switched[features.rows] |= unsure
        return switched[features.rows].long()

    return choose


# ---- probes on the hidden state -------------------------------------------------------------------

LOGISTIC_PENALTIES = (1.0, 10.0, 100.0, 1000.0)
TAU_GRID = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.01)  # 1.01: never fires


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for 0/1 ``labels`` (Mann-Whitney, ties count half)."""
    positive, negative = scores[labels == 1], scores[labels == 0]
    if len(positive) == 0 or len(negative) == 0:
        return float("nan")
    greater = (positive[:, None] > negative[None, :]).sum() + 0.5 * (positive[:, None] == negative[None, :]).sum()
    return float(greater / (len(positive) * len(negative)))


def fit_logistic(z: np.ndarray, y: np.ndarray, penalty: float, iterations: int = 25) -> tuple[np.ndarray, float]:
    """L2-penalised logistic regression by Newton's method: weights ``[r]`` and intercept for features
    ``z [n, r]`` and 0/1 labels ``y [n]`` (the intercept is not penalised)."""
    n, r = z.shape
    x = np.hstack([z, np.ones((n, 1))])  # [n, r + 1]
    theta = np.zeros(r + 1)
    theta[-1] = np.log((y.mean() + 1e-3) / (1 - y.mean() + 1e-3))
    ridge = np.full(r + 1, penalty)
    ridge[-1] = 0.0
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-(x @ theta)))
        gradient = x.T @ (p - y) + ridge * theta
        hessian = (x * (p * (1 - p))[:, None]).T @ x + np.diag(ridge + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-6:
            break
    return theta[:-1], float(theta[-1])


@dataclass(frozen=True)
class LinearProbe:
    """``logit = x @ weight + bias`` on raw (unstandardised) features ``x [..., d]``."""

    weight: np.ndarray
    bias: float

    def logit(self, x: np.ndarray) -> np.ndarray:
        return x @ self.weight + self.bias


def principal_basis(x: np.ndarray, components: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean ``[d]``, std ``[d]`` and the top ``components`` principal directions ``[d, r]`` of the
    standardised rows of ``x [n, d]``."""
    mean, std = x.mean(0), x.std(0)
    std[std == 0] = 1.0
    _, _, vt = np.linalg.svd((x - mean) / std, full_matrices=False)
    return mean, std, vt[: min(components, len(x) - 1)].T


def logistic_probes(x: np.ndarray, y: np.ndarray, penalties, components: int) -> list[LinearProbe]:
    """For each penalty: standardise ``x [n, d]``, project on its top ``components`` principal
    directions, fit a logistic regression, and fold all three into one affine map of the raw
    features (the basis is computed once for all penalties)."""
    mean, std, basis = principal_basis(x, components)
    z = ((x - mean) / std) @ basis
    probes = []
    for penalty in penalties:
        w, b = fit_logistic(z, y, penalty)
        weight = basis @ w / std  # [d]
        probes.append(LinearProbe(weight, b - float(mean @ weight)))
    return probes


def choose_logistic(x: np.ndarray, y: np.ndarray, components: int, seed: int) -> tuple[LinearProbe, np.ndarray]:
    """The logistic probe with the penalty of the best inner 3-fold log-loss, and the inner held-out
    logits ``[n]`` of every row at that penalty (for choosing a threshold without the outer fold)."""
    inner = np.random.default_rng(seed).permutation(len(x)) % 3
    logits = np.empty((len(LOGISTIC_PENALTIES), len(x)))
    for fold in range(3):
        train, test = inner != fold, inner == fold
        for i, probe in enumerate(logistic_probes(x[train], y[train], LOGISTIC_PENALTIES, components)):
            logits[i, test] = probe.logit(x[test])
    losses = np.mean(np.logaddexp(0, logits) - y * logits, axis=1)
    best = int(np.argmin(losses))
    return logistic_probes(x, y, [LOGISTIC_PENALTIES[best]], components)[0], logits[best]


def fires(prob: np.ndarray, lengths: np.ndarray, tau: float, at_end: bool) -> np.ndarray:
    """``[P]`` bool: the probe exceeds tau at some step of greedy's row (one pass), or at its last step
    (restart). ``prob [P, T]`` is NaN where no probe was fitted."""
    filled = np.nan_to_num(prob, nan=0.0)
    if at_end:
        return filled[np.arange(len(lengths)), lengths - 1] > tau
    steps = np.arange(prob.shape[1])
    return ((filled > tau) & (steps[None, :] < lengths[:, None])).any(1)


def choose_tau(prob, lengths, greedy, sampled, rows, at_end) -> float:
    """The tau of ``TAU_GRID`` with the best value on ``rows`` when fired rows take the sampler's mean
    reward and the others greedy's (ties to the larger tau: fewer switches)."""
    best = (-np.inf, TAU_GRID[-1])
    for tau in TAU_GRID:
        fired = fires(prob[rows], lengths[rows], tau, at_end)
        value = np.where(fired, sampled[rows], greedy[rows]).mean()
        if value > best[0] + 1e-12 or (abs(value - best[0]) <= 1e-12 and tau > best[1]):
            best = (value, tau)
    return best[1]


def first_firing_step(prob: np.ndarray, lengths: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """``[P]`` the first step of greedy's row where the probe's P(wrong) exceeds the row's tau, -1 where
    it never does. Until that step a one-pass policy is greedy, so its row is greedy's up to there."""
    filled = np.nan_to_num(prob, nan=0.0)
    steps = np.arange(prob.shape[1])
    fired = (filled > tau[:, None]) & (steps[None, :] < lengths[:, None])  # [P, T]
    return np.where(fired.any(1), fired.argmax(1), -1)
