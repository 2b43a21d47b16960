"""Pick K complementary decoding actions from a candidate pool evaluated on validation problems.

The paper's appendix "Action Space Selection": every candidate action ``s`` is run on every
validation problem ``x`` (``selection.outcomes.evaluate_pool``); ``R[x, s]`` is its reward (here the
mean reward over ``samples`` samples, so a float in [0, 1]). The action set is chosen to maximise the
coverage (best-of-S accuracy)

    F(S) = mean over problems x of max_{s in S} R[x, s]        (F(empty set) = 0)

greedily: start from the empty set and add the action with the largest marginal gain
``F(S + s) - F(S)`` until ``|S| = K``. F is monotone submodular, so greedy is within (1 - 1/e) of
the best K-set, and its marginal gains never grow: once a pick adds nothing, no later one does.
The greedy order over the *whole* pool gives the coverage curve and the point where it saturates
(``Selection.saturation``: the K at which the pool's coverage is reached). Top-K by mean reward is
the redundant baseline the appendix compares to. The Best static baseline (the best single
strategy at each pass@k, greedy included) is chosen by ``selection.best`` from the same table.

:func:`greedy_coverage`, :func:`top_k_by_mean`, :func:`coverage`, :func:`coverage_curve` are the
selection itself, on a plain ``[problems, actions]`` numpy matrix; :func:`select_from_table` runs it
and the Best choice on an ``OutcomeTable``; :func:`build_pool` reads the candidates. The
``select-actions`` command's files (``actions.json``, ``selection.md``, ``selection.png``) are
written by ``reporting.selection``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..decoding.actions import GREEDY, DecodingAction, load_action_set
from .best import BestStatic, best_static_from_table
from .outcomes import OutcomeTable

__all__ = [
    "greedy_coverage",
    "top_k_by_mean",
    "coverage",
    "coverage_curve",
    "Selection",
    "select_actions",
    "select_from_table",
    "build_pool",
    "TIE_TOLERANCE",
]

TIE_TOLERANCE = 1e-12
"""Marginal gains within this of the best count as tied (sums of equal values taken in another
order may differ in the last bit); ties go to the lowest index."""


def coverage(R: np.ndarray, S: Sequence[int]) -> float:
    """``F(S)``: mean over problems (rows) of the best reward among columns ``S``; ``F([]) = 0``."""
    R = np.asarray(R, dtype=float)
    if len(S) == 0:
        return 0.0
    return float(R[:, list(S)].max(axis=1).mean())


def coverage_curve(R: np.ndarray, order: Sequence[int]) -> list[float]:
    """``F`` of each prefix of ``order``: ``[F(order[:1]), F(order[:2]), ...]``."""
    R = np.asarray(R, dtype=float)
    best = np.zeros(R.shape[0])
    curve = []
    for j in order:
        best = np.maximum(best, R[:, j])
        curve.append(float(best.mean()))
    return curve


def _check_k(R: np.ndarray, k: int) -> np.ndarray:
    R = np.asarray(R, dtype=float)
    if R.ndim != 2 or R.shape[0] == 0:
        raise ValueError(f"R must be a non-empty [problems, actions] matrix, got shape {R.shape}")
    if not 1 <= k <= R.shape[1]:
        raise ValueError(f"k must be in [1, {R.shape[1]}] (the number of actions), got {k}")
    return R


def greedy_coverage(R: np.ndarray, k: int) -> list[int]:
    """Greedy maximisation of ``F``: ``k`` column indices in the order they were added.

    Each step adds the column with the largest marginal gain ``F(S + j) - F(S)``. Ties (gains
    within ``TIE_TOLERANCE`` of the best) go to the **lowest column index**, so the result is
    deterministic; once every problem is covered as well as the pool allows, every gain is 0 and
    the remaining picks simply follow column order. The first pick is the best column by mean.
    """
    R = _check_k(R, k)
    best = np.zeros(R.shape[0])
    chosen: list[int] = []
    for _ in range(k):
        gains = np.maximum(R, best[:, None]).mean(axis=0) - best.mean()  # [actions]
        gains[chosen] = -np.inf
        j = int(np.flatnonzero(gains >= gains.max() - TIE_TOLERANCE)[0])
        chosen.append(j)
        best = np.maximum(best, R[:, j])
    return chosen


def top_k_by_mean(R: np.ndarray, k: int) -> list[int]:
    """The ``k`` columns with the highest mean reward, best first (ties: lowest index first)."""
    R = _check_k(R, k)
    return [int(j) for j in np.argsort(-R.mean(axis=0), kind="stable")[:k]]


@dataclass(frozen=True)
class Selection:
    """Greedy coverage selection and the top-K-by-mean baseline on one reward matrix."""

    order: list[int]
    """Greedily selected column indices, in selection order."""
    coverage: list[float]
    """``F`` of each greedy prefix (``coverage[K-1]`` = best-of-K accuracy)."""
    top_k_order: list[int]
    """Top-K columns by mean reward, best first."""
    top_k_coverage: list[float]
    """``F`` of each top-K prefix."""
    mean_reward: list[float]
    """Mean reward ``Q(s)`` of every column."""
    pool_coverage: float
    """``F`` of the whole pool (the ceiling of any selection)."""
    full_order: list[int]
    """Greedy coverage order over every column (``order`` is its first K)."""
    full_coverage: list[float]
    """``F`` of each prefix of ``full_order``: the coverage curve over the whole pool."""
    best: BestStatic | None = None
    """The best single strategy at each pass@k on the same outcomes (``selection.best``), when the
    per-sample outcomes were given (:func:`select_from_table`)."""

    @property
    def saturation(self) -> int:
        """The K at which greedy coverage reaches the whole pool's: every pick after it adds no
        coverage (0 when no candidate solved any problem)."""
        if self.pool_coverage <= 0:
            return 0
        return next(i + 1 for i, f in enumerate(self.full_coverage) if f >= self.pool_coverage - TIE_TOLERANCE)


def select_actions(R: np.ndarray, k: int, best: BestStatic | None = None) -> Selection:
    """Greedy coverage and top-K by mean on ``R`` (``[problems, actions]``); ``best`` is carried along."""
    greedy, top = greedy_coverage(R, k), top_k_by_mean(R, k)
    R = np.asarray(R, dtype=float)
    full = greedy_coverage(R, R.shape[1])
    return Selection(
        greedy,
        coverage_curve(R, greedy),
        top,
        coverage_curve(R, top),
        [float(q) for q in R.mean(axis=0)],
        coverage(R, range(R.shape[1])),
        full,
        coverage_curve(R, full),
        best,
    )


def select_from_table(table: OutcomeTable, k: int, k_values: Sequence[int] = (1,)) -> Selection:
    """:func:`select_actions` on the table's mean-reward matrix, with the Best static strategy at
    each pass@k in ``k_values`` (``selection.best.best_static_from_table``) on the same outcomes."""
    _, names, R = table.to_matrix()
    return select_actions(R, k, best_static_from_table(table, k_values, names))


def build_pool(spec: str, subsample: int | None = None, add_greedy: bool = True) -> list[DecodingAction]:
    """Candidate actions from ``spec`` (preset / ``pool`` / JSON file), cut to ``subsample`` evenly
    spaced entries (first and last kept; the 180 pool is temperature-major, so every temperature
    stays represented), then greedy appended unless already present or ``add_greedy`` is False:
    greedy is a static strategy a user can always pick, so every selection command keeps it a
    candidate. Actions with the same name are kept once."""
    actions = load_action_set(spec)
    if subsample is not None:
        if subsample < 1:
            raise ValueError(f"--pool-subsample must be >= 1, got {subsample}")
        if subsample < len(actions):
            picks = np.unique(np.round(np.linspace(0, len(actions) - 1, subsample)).astype(int))
            actions = [actions[i] for i in picks]
    if add_greedy:
        actions = [*actions, GREEDY]
    unique = {a.name: a for a in reversed(actions)}  # first occurrence wins
    return [unique[name] for name in dict.fromkeys(a.name for a in actions)]
