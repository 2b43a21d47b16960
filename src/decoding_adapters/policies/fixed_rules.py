"""The fixed answer rules people use to spend more samples only where they help: pure functions over
the draws so far, which ``evaluation.rules`` scores from a stored table of samples and the ``rule``
adapter kind (``policies.kind_rule``) runs live, round by round (a rule's decision after draw s
reads only draws <= s).

A rule reads a **sequence** of draws per problem (``Draws``: the order in which it would decode;
e.g. the stopped greedy first, then the samples of one sampled arm), decides after each draw whether
to stop, and returns one answer per problem without a verifier. Every rule is a small pure function
over ``[P, S]`` arrays (``P`` problems, ``S`` draws in sequence order) that returns a ``RuleResult``:
per problem the answer id it picks, the decodes it spent (draws read) and their generated tokens;
``Draws.score`` adds whether the answer is right. Nothing loops over problems: votes are one-hot
tensors ``[P, S, K]`` (``K`` distinct answers) summed along the sequence.

Votes and ties (all rules): an answer id of -1 (no answer) casts no vote; the leader is the answer
with the most votes (or weight), ties broken by the answer drawn first in the sequence; with no vote
at all the answer is -1 (wrong).

The rules (their papers, settings and what they report: ``docs/rules.md``):
- ``self_consistency``: majority over the first ``n`` draws (Wang et al. 2023).
- ``esc``: draws in windows of ``w``; stop after the first window whose answers all agree (and are
  answers), at most ``max_draws``; the answer is the majority over every draw read (Li et al. 2024).
- ``adaptive_consistency``: after each draw, with ``v1 >= v2`` the two largest vote counts, stop
  when ``P(p1 > p2) = P(X > 1/2), X ~ Beta(v1 + 1, v2 + 1)`` exceeds ``threshold`` (Aggarwal et al.
  2023's Beta criterion), at most ``max_draws``.
- ``deepconf_offline``: the first ``n`` draws, keep the ``eta`` % most confident (at least one) and
  take their confidence-weighted vote (eta = 100: the plain weighted vote) (Fu et al. 2025).
- ``deepconf_online``: ``warmup`` draws set the bar ``s`` (the ``100 - eta`` percentile of their
  confidence); a later draw whose confidence falls below ``s`` is dropped (it still costs a decode;
  its tokens are counted in full, an upper bound: the table keeps the trace's lowest group
  confidence, not where it was first crossed); stop when the leader holds ``consensus`` of the kept
  weight, at most ``max_draws`` (Fu et al. 2025's online mode).
- ``reasc``: answer from the first draw when its confidence is at least ``single_threshold``; else
  accumulate confidence-weighted votes and stop when the Beta criterion on the two largest weights
  exceeds ``threshold``, at most ``max_draws`` (Kim et al. 2026).
- ``cges``: a posterior over the answers seen (uniform prior; a draw with answer ``r`` and calibrated
  confidence ``c`` has likelihood ``c`` under "r is right" and ``(1 - c) / (K - 1)`` under any other
  answer, ``K`` the answers seen plus one unseen); stop when an answer's posterior reaches
  ``threshold``, at most ``max_draws`` (Aghazadeh et al. 2025).
- ``confidence_threshold``: keep the first draw (the greedy draft) when its confidence is at least
  ``threshold``; else read the next ``redecodes`` draws and answer their majority (with the draft's
  vote too when ``with_draft``).

**Rules that read the verifier** (``VERIFIER_RULES``): each rule above has a variant that reads the
learned verifier (``policies.verifier``: the probability that a draw's answer is right, a column
named ``VERIFIER`` of the draws) in place of its confidence. The confidence-reading rules
(DeepConf, ReASC, CGES, the threshold) read that column as their ``feature``; the vote rules weight
each vote by it:

- ``weighted_consistency`` (self-consistency's variant): the verifier-weighted vote over the first
  ``n`` draws (CISC-style confidence-weighted self-consistency);
- ``weighted_esc``: ESC's windows and stop, the answer the weighted majority over every draw read;
- ``weighted_adaptive_consistency``: the Beta criterion on the two largest weighted votes;
- ``best_of_k`` (verifier only): the answer of the draw the verifier scores highest among the first
  ``n`` (ties: the draw made first).

Tuning (``evaluation.rules.tune_rules``) and the draws of a stored table (``draws_from_table``,
``greedy_then``) live in ``evaluation.rules``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = [
    "Draws",
    "RuleResult",
    "Scored",
    "LOWER_IS_CONFIDENT",
    "vote",
    "prefix_leaders",
    "beta_exceeds_half",
    "self_consistency",
    "esc",
    "adaptive_consistency",
    "deepconf_offline",
    "deepconf_online",
    "reasc",
    "cges",
    "confidence_threshold",
    "weighted_consistency",
    "weighted_esc",
    "weighted_adaptive_consistency",
    "best_of_k",
    "Calibration",
    "RuleSetting",
    "score_setting",
    "setting_from_dict",
    "RULES",
    "RULE_LABELS",
    "RULE_KNOBS",
    "VERIFIER",
    "VERIFIER_RULES",
    "reads_verifier",
    "draw_correct",
]

LOWER_IS_CONFIDENT = frozenset({"entropy_mean"})
"""Confidence columns where a lower value means more confident (signed away by ``Draws.confidence``)."""


# ---- the draws a rule reads ------------------------------------------------------------------------


@dataclass
class Draws:
    """Per problem, the draws in the order a rule makes them (``[P, S]``)."""

    answers: np.ndarray
    """``[P, S]`` int answer id per draw (-1: no answer)."""
    tokens: np.ndarray
    """``[P, S]`` generated tokens per draw."""
    features: np.ndarray
    """``[P, S, C]`` confidence summary per draw."""
    feature_names: tuple[str, ...]
    answer_correct: np.ndarray
    """``[P, K]`` bool: answer id k of problem p is right."""
    label: str = ""
    """What the sequence is (e.g. 'greedy, then T=0.5')."""

    def __post_init__(self) -> None:
        if self.answers.shape != self.tokens.shape or self.features.shape[:2] != self.answers.shape:
            raise ValueError("answers, tokens and features must share [P, S]")
        if self.features.shape[2] != len(self.feature_names):
            raise ValueError("one feature name per confidence column")
        if self.answer_correct.shape[0] != self.answers.shape[0]:
            raise ValueError("answer_correct must be [P, K]")

    @property
    def problems(self) -> int:
        return self.answers.shape[0]

    @property
    def length(self) -> int:
        return self.answers.shape[1]

    def confidence(self, name: str) -> np.ndarray:
        """``[P, S]`` one confidence column, signed so that higher means more confident; NaN -> the
        column's least value (an unreadable confidence counts as the least confident)."""
        values = self.features[..., self.feature_names.index(name)].astype(np.float64)
        if name in LOWER_IS_CONFIDENT:
            values = -values
        if np.isnan(values).any():
            finite = values[np.isfinite(values)]
            values = np.where(np.isnan(values), finite.min() if finite.size else 0.0, values)
        return values

    def correct(self, answers: np.ndarray) -> np.ndarray:
        """``[P]`` bool: each problem's chosen answer id is right (-1: wrong)."""
        k = self.answer_correct.shape[1]
        padded = np.concatenate([self.answer_correct, np.zeros((self.problems, 1), bool)], axis=1)
        return padded[np.arange(self.problems), np.where(answers >= 0, answers, k)]

    def score(self, result: "RuleResult") -> "Scored":
        correct = self.correct(result.answers)
        return Scored(float(correct.mean()) if self.problems else 0.0, float(result.decodes.mean()),
                      float(result.tokens.mean()), correct)


# ---- results ----------------------------------------------------------------------------------------


@dataclass
class RuleResult:
    """Per problem: the answer id a rule picks, the decodes it read and their generated tokens."""

    answers: np.ndarray  # [P] int, -1: none
    decodes: np.ndarray  # [P] int
    tokens: np.ndarray  # [P] float (tokens of every draw read)


@dataclass
class Scored:
    """A rule's result scored against the table: answer accuracy and mean cost per problem."""

    accuracy: float
    decodes: float
    tokens: float
    correct: np.ndarray = field(repr=False)  # [P] bool


# ---- votes ------------------------------------------------------------------------------------------


def _one_hot(answers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[P, S, K]`` one-hot of the answer ids (-1: all zero) and ``[P, K]`` the draw index at which
    each answer first appears (S when never)."""
    p, s = answers.shape
    k = max(1, int(answers.max(initial=-1)) + 1)
    hot = (answers[:, :, None] == np.arange(k)[None, None, :])
    first = np.where(hot.any(1), hot.argmax(1), s)
    return hot, first


def _leader(scores: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Leader per row of ``scores [..., K]`` (ties: the smallest ``first``), -1 where no score is > 0."""
    top = scores.max(-1, keepdims=True)
    tied = scores >= top - 1e-12 * np.maximum(1.0, np.abs(top))
    order = np.where(tied, first, np.iinfo(np.int64).max)
    leader = order.argmin(-1)
    return np.where(top[..., 0] > 0, leader, -1)


def vote(answers: np.ndarray, weights: np.ndarray | None = None, upto: np.ndarray | int | None = None) -> np.ndarray:
    """``[P]`` the (weighted) majority over each problem's first ``upto`` draws (all: None)."""
    p, s = answers.shape
    hot, first = _one_hot(answers)
    w = np.ones((p, s)) if weights is None else np.asarray(weights, dtype=np.float64)
    if upto is not None:
        w = w * (np.arange(s)[None, :] < np.broadcast_to(np.asarray(upto), (p,))[:, None])
    scores = (hot * w[:, :, None]).sum(1)
    return _leader(scores, np.broadcast_to(first, scores.shape))


def prefix_leaders(answers: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """After each draw: the leader ``[P, S]`` and the cumulative (weighted) votes ``[P, S, K]``."""
    p, s = answers.shape
    hot, first = _one_hot(answers)
    w = np.ones((p, s)) if weights is None else np.asarray(weights, dtype=np.float64)
    cum = np.cumsum(hot * w[:, :, None], axis=1)
    return _leader(cum, np.broadcast_to(first[:, None, :], cum.shape)), cum


def _top_two(cum: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest and second largest vote ``[..]`` of ``cum [..., K]``."""
    if cum.shape[-1] == 1:
        return cum[..., 0], np.zeros(cum.shape[:-1])
    part = -np.partition(-cum, 1, axis=-1)
    return part[..., 0], part[..., 1]


def beta_exceeds_half(a: np.ndarray, b: np.ndarray, iterations: int = 200) -> np.ndarray:
    """``P(X > 1/2)`` for ``X ~ Beta(a, b)``, elementwise, real ``a, b > 0`` (weighted counts):
    ``1 - I_{1/2}(a, b)`` by the continued fraction of the regularised incomplete beta (Numerical
    Recipes' ``betacf``, vectorised, in float64; the tests check it against the binomial identity at
    integers)."""
    a_t = torch.as_tensor(np.asarray(a, dtype=np.float64))
    b_t = torch.as_tensor(np.asarray(b, dtype=np.float64))
    a_t, b_t = torch.broadcast_tensors(a_t, b_t)
    # I_x(a, b) converges fast for x < (a + 1) / (a + b + 2); else use I_x(a, b) = 1 - I_{1-x}(b, a)
    flip = 0.5 >= (a_t + 1) / (a_t + b_t + 2)
    p, q = torch.where(flip, b_t, a_t), torch.where(flip, a_t, b_t)
    lower = _betainc_half(p, q, iterations)  # I_{1/2}(p, q)
    below_half = torch.where(flip, 1 - lower, lower)  # I_{1/2}(a, b)
    return (1 - below_half).numpy()


def _betainc_half(a: torch.Tensor, b: torch.Tensor, iterations: int) -> torch.Tensor:
    x = 0.5
    tiny = 1e-300
    log_front = (torch.lgamma(a + b) - torch.lgamma(a) - torch.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    qab, qap, qam = a + b, a + 1, a - 1
    c = torch.ones_like(a)
    d = 1 - qab * x / qap
    d = torch.where(d.abs() < tiny, torch.full_like(d, tiny), d).reciprocal()
    h = d.clone()
    for m in range(1, iterations + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + aa * d
            d = torch.where(d.abs() < tiny, torch.full_like(d, tiny), d).reciprocal()
            c = 1 + aa / c
            c = torch.where(c.abs() < tiny, torch.full_like(c, tiny), c)
            h = h * d * c
            step = d * c
        if bool(((step - 1).abs() < 1e-13).all()):  # every entry converged
            break
    return torch.exp(log_front) * h / a


def _beta_integer_table(size: int) -> np.ndarray:
    """``[size + 1, size + 1]`` exact ``P(Beta(v1 + 1, v2 + 1) > 1/2)`` from the binomial identity
    ``P(X <= x) = P(Bin(a + b - 1, x) >= a)`` for integer ``a, b``."""
    out = np.zeros((size + 1, size + 1))
    for v1 in range(size + 1):
        for v2 in range(size + 1):
            a, b = v1 + 1, v2 + 1
            n = a + b - 1
            out[v1, v2] = sum(math.comb(n, j) for j in range(a)) / 2 ** n
    return out


_INTEGER_BETA = _beta_integer_table(64)


def _beta_criterion(v1: np.ndarray, v2: np.ndarray) -> np.ndarray:
    if np.all(v1 == np.round(v1)) and np.all(v2 == np.round(v2)) and v1.max(initial=0) <= 64:
        return _INTEGER_BETA[v1.astype(np.int64), v2.astype(np.int64)]
    return beta_exceeds_half(v1 + 1, v2 + 1)


def _first_stop(stop: np.ndarray, max_draws: int) -> np.ndarray:
    """``[P]`` draws read: the first draw index (1-based) where ``stop [P, S]`` holds within
    ``max_draws``, else ``max_draws``."""
    s = min(max_draws, stop.shape[1])
    window = stop[:, :s]
    return np.where(window.any(1), window.argmax(1) + 1, s)


def _spent(tokens: np.ndarray, decodes: np.ndarray) -> np.ndarray:
    """``[P]`` tokens of each problem's first ``decodes`` draws."""
    cum = np.cumsum(tokens, axis=1, dtype=np.float64)
    return cum[np.arange(len(decodes)), decodes - 1]


def _at(matrix: np.ndarray, decodes: np.ndarray) -> np.ndarray:
    return matrix[np.arange(len(decodes)), decodes - 1]


# ---- the rules --------------------------------------------------------------------------------------


def self_consistency(answers: np.ndarray, tokens: np.ndarray, n: int) -> RuleResult:
    """Majority over the first ``n`` draws (n = 1: the first draw's answer)."""
    if not 1 <= n <= answers.shape[1]:
        raise ValueError(f"n must be in [1, {answers.shape[1]}]")
    decodes = np.full(answers.shape[0], n)
    return RuleResult(vote(answers[:, :n]), decodes, _spent(tokens, decodes))


def esc(answers: np.ndarray, tokens: np.ndarray, window: int, max_draws: int) -> RuleResult:
    """Early-stopping self-consistency: windows of ``window`` draws; stop after the first window
    whose answers are all the same answer; the majority over all draws read."""
    p, s = answers.shape
    if window < 1 or max_draws < window:
        raise ValueError("window >= 1 and max_draws >= window")
    windows = min(max_draws, s) // window
    blocks = answers[:, : windows * window].reshape(p, windows, window)
    agree = (blocks == blocks[:, :, :1]).all(2) & (blocks[:, :, 0] >= 0)  # [P, windows]
    used = np.where(agree.any(1), agree.argmax(1) + 1, windows) * window
    leaders, _ = prefix_leaders(answers)
    return RuleResult(_at(leaders, used), used, _spent(tokens, used))


def adaptive_consistency(answers: np.ndarray, tokens: np.ndarray, threshold: float, max_draws: int,
                         min_draws: int = 1) -> RuleResult:
    """Adaptive-Consistency's Beta stopping criterion on the two largest vote counts."""
    leaders, cum = prefix_leaders(answers)
    v1, v2 = _top_two(cum)
    stop = (_beta_criterion(v1, v2) > threshold) & (np.arange(answers.shape[1])[None, :] + 1 >= min_draws)
    used = _first_stop(stop, max_draws)
    return RuleResult(_at(leaders, used), used, _spent(tokens, used))


def deepconf_offline(answers: np.ndarray, tokens: np.ndarray, confidence: np.ndarray, n: int,
                     eta: float) -> RuleResult:
    """The first ``n`` draws; keep the ``eta`` % with the highest confidence (at least one, ties by
    draw order) and take the vote weighted by their confidence (shifted to be positive)."""
    p = answers.shape[0]
    a, c = answers[:, :n], confidence[:, :n]
    keep_count = max(1, math.ceil(eta / 100.0 * n - 1e-9))
    order = np.argsort(-c, axis=1, kind="stable")
    rank = np.empty_like(order)
    rank[np.arange(p)[:, None], order] = np.arange(n)[None, :]
    weights = _positive(c) * (rank < keep_count)
    decodes = np.full(p, n)
    return RuleResult(vote(a, weights), decodes, _spent(tokens, decodes))


def _positive(confidence: np.ndarray) -> np.ndarray:
    """Vote weights from confidences: the values when all are positive (DeepConf's token confidence
    is), else shifted so the least is a small positive number (a signed column such as -entropy)."""
    low = confidence.min(initial=0.0)
    return confidence if low > 0 else confidence - low + 1e-6


def deepconf_online(answers: np.ndarray, tokens: np.ndarray, confidence: np.ndarray, warmup: int, eta: float,
                    consensus: float, max_draws: int) -> RuleResult:
    """DeepConf's online mode over the draws (module docstring)."""
    p, s = answers.shape
    max_draws = min(max_draws, s)
    if not 1 <= warmup <= max_draws:
        raise ValueError("1 <= warmup <= max_draws")
    bar = np.percentile(confidence[:, :warmup], 100.0 - eta, axis=1, method="linear")  # [P]
    kept = np.ones((p, s), bool)
    kept[:, warmup:] = confidence[:, warmup:] >= bar[:, None]
    weights = _positive(confidence) * kept
    leaders, cum = prefix_leaders(answers, weights)
    top, _ = _top_two(cum)
    share = top / np.maximum(cum.sum(-1), 1e-12)
    stop = (share >= consensus) & (np.arange(s)[None, :] + 1 >= warmup)
    used = _first_stop(stop, max_draws)
    return RuleResult(_at(leaders, used), used, _spent(tokens, used))


def reasc(answers: np.ndarray, tokens: np.ndarray, confidence: np.ndarray, weights: np.ndarray,
          single_threshold: float, threshold: float, max_draws: int) -> RuleResult:
    """ReASC: the first draw alone when ``confidence[:, 0] >= single_threshold``; else votes weighted
    by ``weights`` (the calibrated confidence in [0, 1]) until the Beta criterion on the two largest
    weighted votes exceeds ``threshold``."""
    leaders, cum = prefix_leaders(answers, weights)
    v1, v2 = _top_two(cum)
    stop = beta_exceeds_half(v1 + 1, v2 + 1) > threshold
    stop[:, 0] = False  # stage 2 starts from a second draw
    used = _first_stop(stop, max_draws)
    single = confidence[:, 0] >= single_threshold
    used = np.where(single, 1, np.maximum(used, min(2, max_draws, answers.shape[1])))
    chosen = np.where(single, answers[:, 0], _at(leaders, used))
    return RuleResult(chosen, used, _spent(tokens, used))


def cges(answers: np.ndarray, tokens: np.ndarray, probability: np.ndarray, threshold: float,
         max_draws: int) -> RuleResult:
    """CGES's posterior over the answers seen (module docstring); ``probability [P, S]`` the
    calibrated confidence that each draw is right, in (0, 1)."""
    p, s = answers.shape
    hot, first = _one_hot(answers)
    c = np.clip(probability, 1e-6, 1 - 1e-6)
    seen = np.cumsum(hot, axis=1) > 0  # [P, S, K] answer k seen by draw t
    distinct = seen.sum(-1)  # [P, S]
    k_all = distinct + 1  # the answers seen and one unseen
    # log-likelihood of "answer k is right" after each draw: sum over draws of
    # log c (the draw says k) or log((1 - c) / (K - 1)) (it says another answer, or none)
    log_right = np.log(c)[:, :, None] * hot
    log_wrong_base = np.log1p(-c)  # [P, S]
    # the (K - 1) divisor uses the K of each prefix: the posterior after draw t recomputes it
    cum_right = np.cumsum(log_right, axis=1)  # [P, S, K]
    cum_hot = np.cumsum(hot, axis=1)
    cum_wrong = np.cumsum(log_wrong_base, axis=1)[:, :, None] - np.cumsum(log_wrong_base[:, :, None] * hot, axis=1)
    t = np.arange(1, s + 1)[None, :, None]
    log_k1 = np.log(np.maximum(k_all - 1, 1))[:, :, None]
    n_other = t - cum_hot  # draws that did not say k
    log_post = cum_right + cum_wrong - n_other * log_k1  # [P, S, K]
    # the unseen candidate: every draw said another answer
    log_unseen = (np.cumsum(log_wrong_base, axis=1) - t[:, :, 0] * log_k1[:, :, 0])[:, :, None]
    log_post = np.where(seen, log_post, -np.inf)
    full = np.concatenate([log_post, log_unseen], axis=-1)
    full = full - full.max(-1, keepdims=True)
    post = np.exp(full)
    post = post / post.sum(-1, keepdims=True)
    best = post[..., :-1].max(-1) if post.shape[-1] > 1 else np.zeros((p, s))
    stop = best >= threshold
    used = _first_stop(stop, max_draws)
    scores = np.where(seen, post[..., :-1], 0.0)
    leaders = _leader(scores, np.broadcast_to(first[:, None, :], scores.shape))
    return RuleResult(_at(leaders, used), used, _spent(tokens, used))


def confidence_threshold(answers: np.ndarray, tokens: np.ndarray, confidence: np.ndarray, threshold: float,
                         redecodes: int = 1, with_draft: bool = False) -> RuleResult:
    """Keep the first draw when its confidence is at least ``threshold``; else read ``redecodes``
    more draws and answer their majority (with the first draw's vote when ``with_draft``)."""
    if not 1 <= redecodes < answers.shape[1]:
        raise ValueError(f"redecodes must be in [1, {answers.shape[1] - 1}]")
    keep = confidence[:, 0] >= threshold
    # with_draft: the draft's vote counts (ties go to it, drawn first); else only the re-decodes vote
    redecoded = vote(answers[:, : 1 + redecodes]) if with_draft else vote(answers[:, 1: 1 + redecodes])
    used = np.where(keep, 1, 1 + redecodes)
    return RuleResult(np.where(keep, answers[:, 0], redecoded), used, _spent(tokens, used))


def weighted_consistency(answers: np.ndarray, tokens: np.ndarray, confidence: np.ndarray, n: int) -> RuleResult:
    """The vote over the first ``n`` draws weighted by their confidence (shifted to be positive)."""
    if not 1 <= n <= answers.shape[1]:
        raise ValueError(f"n must be in [1, {answers.shape[1]}]")
    decodes = np.full(answers.shape[0], n)
    return RuleResult(vote(answers[:, :n], _positive(confidence[:, :n])), decodes, _spent(tokens, decodes))


def weighted_esc(answers: np.ndarray, tokens: np.ndarray, confidence: np.ndarray, window: int,
                 max_draws: int) -> RuleResult:
    """ESC's stop (the first window whose answers all agree); the answer is the confidence-weighted
    majority over every draw read."""
    stopped = esc(answers, tokens, window, max_draws)
    leaders, _ = prefix_leaders(answers, _positive(confidence))
    return RuleResult(_at(leaders, stopped.decodes), stopped.decodes, stopped.tokens)


def weighted_adaptive_consistency(answers: np.ndarray, tokens: np.ndarray, confidence: np.ndarray,
                                  threshold: float, max_draws: int) -> RuleResult:
    """Adaptive-Consistency's Beta criterion on the two largest confidence-weighted votes (a
    probability weight in [0, 1] counts as that share of a vote)."""
    leaders, cum = prefix_leaders(answers, _positive(confidence))
    v1, v2 = _top_two(cum)
    used = _first_stop(beta_exceeds_half(v1 + 1, v2 + 1) > threshold, max_draws)
    return RuleResult(_at(leaders, used), used, _spent(tokens, used))


def best_of_k(answers: np.ndarray, tokens: np.ndarray, confidence: np.ndarray, n: int) -> RuleResult:
    """The answer of the most confident draw that states one among the first ``n`` (ties: the draw
    made first; -1 when none of them states an answer)."""
    if not 1 <= n <= answers.shape[1]:
        raise ValueError(f"n must be in [1, {answers.shape[1]}]")
    a, c = answers[:, :n], np.where(answers[:, :n] >= 0, confidence[:, :n], -np.inf)
    pick = c.argmax(1)  # the first of the highest
    decodes = np.full(answers.shape[0], n)
    return RuleResult(a[np.arange(len(a)), pick], decodes, _spent(tokens, decodes))


# ---- calibration ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """``P(right | confidence)`` as a logistic curve in one confidence column, fitted on validation
    draws (the calibrated confidence CGES's posterior and ReASC's weights read)."""

    slope: float
    intercept: float
    mean: float
    scale: float

    @classmethod
    def fit(cls, confidence: np.ndarray, correct: np.ndarray, steps: int = 50, ridge: float = 1e-3) -> "Calibration":
        x = np.asarray(confidence, dtype=np.float64).reshape(-1)
        y = np.asarray(correct, dtype=np.float64).reshape(-1)
        mean, scale = float(x.mean()) if x.size else 0.0, float(x.std()) if x.size else 1.0
        scale = scale if scale > 1e-12 else 1.0
        z = (x - mean) / scale
        w = np.zeros(2)
        design = np.stack([z, np.ones_like(z)], 1)
        for _ in range(steps):  # Newton steps on the ridge-penalised log-likelihood
            prob = 1 / (1 + np.exp(-(design @ w)))
            grad = design.T @ (prob - y) + ridge * w
            hess = (design * (prob * (1 - prob))[:, None]).T @ design + ridge * np.eye(2)
            w = w - np.linalg.solve(hess, grad)
        return cls(float(w[0]), float(w[1]), mean, scale)

    def __call__(self, confidence: np.ndarray) -> np.ndarray:
        z = (np.asarray(confidence, dtype=np.float64) - self.mean) / self.scale
        return 1 / (1 + np.exp(-(self.slope * z + self.intercept)))


def draw_correct(draws: Draws) -> np.ndarray:
    """``[P, S]`` bool: each draw's answer is right."""
    k = draws.answer_correct.shape[1]
    padded = np.concatenate([draws.answer_correct, np.zeros((draws.problems, 1), bool)], axis=1)
    return np.take_along_axis(padded, np.where(draws.answers >= 0, draws.answers, k), axis=1)


# ---- settings -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleSetting:
    """One rule at one setting of its knobs (``knobs``: name -> value, JSON-able)."""

    rule: str
    knobs: tuple[tuple[str, object], ...]

    def as_dict(self) -> dict:
        return {"rule": self.rule, **dict(self.knobs)}


RULES = ("self_consistency", "esc", "adaptive_consistency", "deepconf_offline", "deepconf_online", "reasc",
         "cges", "confidence_threshold")
"""The rules ``rule_grid`` and ``tune_rules`` cover, in report order."""

VERIFIER = "verifier"
"""The draws' column that holds the verifier's probability that each draw is right (the feature the
verifier-reading rules read)."""

VERIFIER_RULES = tuple(f"verifier_{rule}" for rule in RULES) + ("verifier_best_of_k",)
"""Each rule's variant that reads the verifier in place of its confidence (module docstring), and
best-of-k by the verifier; ``tune_rules`` tunes them like the others when the draws hold ``VERIFIER``."""

_VERIFIER_BASE = {"verifier_self_consistency": "weighted_consistency", "verifier_esc": "weighted_esc",
                  "verifier_adaptive_consistency": "weighted_adaptive_consistency",
                  "verifier_best_of_k": "best_of_k"}
"""What a verifier rule runs where it is not its plain rule reading another column."""

RULE_LABELS = {"self_consistency": "Self-consistency", "esc": "ESC", "adaptive_consistency": "Adaptive-Consistency",
               "deepconf_offline": "DeepConf offline", "deepconf_online": "DeepConf online", "reasc": "ReASC",
               "cges": "CGES", "confidence_threshold": "Confidence threshold (rule)",
               "verifier_self_consistency": "Self-consistency (verifier-weighted)",
               "verifier_esc": "ESC (verifier-weighted)",
               "verifier_adaptive_consistency": "Adaptive-Consistency (verifier-weighted)",
               "verifier_deepconf_offline": "DeepConf offline (verifier)",
               "verifier_deepconf_online": "DeepConf online (verifier)", "verifier_reasc": "ReASC (verifier)",
               "verifier_cges": "CGES (verifier)", "verifier_confidence_threshold": "Confidence threshold (verifier)",
               "verifier_best_of_k": "Best-of-k (verifier)"}
"""Each rule's name in a report (its curve's label)."""


RULE_KNOBS = {"self_consistency": ("n",), "esc": ("window", "max_draws"),
              "adaptive_consistency": ("threshold", "max_draws"), "deepconf_offline": ("feature", "n", "eta"),
              "deepconf_online": ("feature", "warmup", "eta", "consensus", "max_draws"),
              "reasc": ("feature", "single_threshold", "threshold", "max_draws"),
              "cges": ("feature", "threshold", "max_draws"),
              "confidence_threshold": ("feature", "threshold", "redecodes", "with_draft"),
              "verifier_self_consistency": ("feature", "n"), "verifier_esc": ("feature", "window", "max_draws"),
              "verifier_adaptive_consistency": ("feature", "threshold", "max_draws"),
              "verifier_deepconf_offline": ("feature", "n", "eta"),
              "verifier_deepconf_online": ("feature", "warmup", "eta", "consensus", "max_draws"),
              "verifier_reasc": ("feature", "single_threshold", "threshold", "max_draws"),
              "verifier_cges": ("feature", "threshold", "max_draws"),
              "verifier_confidence_threshold": ("feature", "threshold", "redecodes", "with_draft"),
              "verifier_best_of_k": ("feature", "n")}
"""The knobs each rule reads (its ``RuleSetting``), in order (a verifier rule's ``feature`` is ``VERIFIER``)."""


def reads_verifier(rule: str) -> bool:
    """The rule reads the verifier (one of ``VERIFIER_RULES``)."""
    return rule in VERIFIER_RULES


def setting_from_dict(setting: dict) -> RuleSetting:
    """The ``RuleSetting`` of a tuned point's ``setting`` (``RuleSetting.as_dict``)."""
    return RuleSetting(setting["rule"], tuple((k, v) for k, v in setting.items() if k != "rule"))

def score_setting(setting: RuleSetting, draws: Draws, calibrations: dict[str, Calibration] | None = None) -> RuleResult:
    """Run one rule at one setting over ``draws`` (``calibrations``: per confidence column, the
    validation fit CGES and ReASC read; fitted on ``draws`` when missing)."""
    k = dict(setting.knobs)
    a, t = draws.answers, draws.tokens
    rule = setting.rule
    if rule in VERIFIER_RULES:
        if k.get("feature") != VERIFIER:
            raise ValueError(f"{rule} reads the {VERIFIER!r} column, not {k.get('feature')!r}")
        rule = _VERIFIER_BASE.get(rule, rule.removeprefix("verifier_"))
        if rule in ("weighted_consistency", "best_of_k"):
            fn = weighted_consistency if rule == "weighted_consistency" else best_of_k
            return fn(a, t, draws.confidence(VERIFIER), k["n"])
        if rule == "weighted_esc":
            return weighted_esc(a, t, draws.confidence(VERIFIER), k["window"], k["max_draws"])
        if rule == "weighted_adaptive_consistency":
            return weighted_adaptive_consistency(a, t, draws.confidence(VERIFIER), k["threshold"], k["max_draws"])
    if rule == "self_consistency":
        return self_consistency(a, t, k["n"])
    if rule == "esc":
        return esc(a, t, k["window"], k["max_draws"])
    if rule == "adaptive_consistency":
        return adaptive_consistency(a, t, k["threshold"], k["max_draws"])
    conf = draws.confidence(k["feature"])
    if rule == "deepconf_offline":
        return deepconf_offline(a, t, conf, k["n"], k["eta"])
    if rule == "deepconf_online":
        return deepconf_online(a, t, conf, k["warmup"], k["eta"], k["consensus"], k["max_draws"])
    if rule == "confidence_threshold":
        return confidence_threshold(a, t, conf, k["threshold"], k["redecodes"], k["with_draft"])
    calibrations = calibrations if calibrations is not None else {}
    cal = calibrations.get(k["feature"]) or Calibration.fit(conf, draw_correct(draws))
    if rule == "reasc":
        return reasc(a, t, conf, cal(conf), k["single_threshold"], k["threshold"], k["max_draws"])
    if rule == "cges":
        return cges(a, t, cal(conf), k["threshold"], k["max_draws"])
    raise ValueError(f"no rule {rule!r}")
