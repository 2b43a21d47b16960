"""Head-room measures: how much any decoding adapter could gain on a task, measured before training.

- **Sequence level** (:func:`oracle_table`): from a reward array ``[problems, actions, samples]``
  of static actions, pass@k of every action, the best single action, and the per-problem oracle
  (each problem scored under its own best action). The in-sample oracle takes, per problem, the
  maximum of noisy estimates and so is biased upward; the *cross-fitted* oracle chooses each
  problem's action on one half of the samples and scores it on the other half (then the halves
  swap), which no longer rewards luck, at the price of fewer samples per half (k <= samples / 2).
- **Token level** (:func:`bucket_summary`): mean reward change of one-step deviations from greedy,
  grouped into buckets of a step feature, with a t interval over problems (each problem's
  deviations in a bucket are averaged first, since deviations of one trajectory are not independent).
- **Greedy failures** (:func:`classify_failure`): why a greedy row is wrong at a token budget.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np

from ..core.stats import mean_ci, pass_at_k

__all__ = [
    "FAILURE_CLASSES",
    "OracleRow",
    "oracle_table",
    "pass_at_k_matrix",
    "BucketStats",
    "bucket_summary",
    "repetition_period",
    "answer_prefixes",
    "classify_failure",
]


def pass_at_k_matrix(rewards: np.ndarray, k: int) -> np.ndarray:
    """``[problems, actions]`` unbiased pass@k of a 0/1 reward array ``[problems, actions, samples]``
    (a sample counts as correct when its reward is >= 0.5)."""
    if rewards.ndim != 3:
        raise ValueError(f"rewards must be [problems, actions, samples], got shape {rewards.shape}")
    n = rewards.shape[2]
    correct = (rewards >= 0.5).sum(axis=2)
    return np.vectorize(lambda c: pass_at_k(n, int(c), k), otypes=[float])(correct)


@dataclass(frozen=True)
class OracleRow:
    """The sequence-level figures at one k (all in [0, 1], means over problems)."""

    k: int
    """The k of pass@k."""
    best_action: str
    """The single static action with the highest mean pass@k on these problems."""
    best_static: float
    """Its mean pass@k."""
    oracle: float
    """Mean over problems of the largest per-action pass@k estimate (in-sample; biased upward)."""
    headroom: float
    """``oracle - best_static``."""
    headroom_ci: tuple[float, float]
    """95% t interval of the head-room over problems (per-problem oracle minus best static)."""
    crossfit_best_static: float | None
    """Best static action chosen on one half of the samples, scored on the other (both ways, averaged);
    None when k > samples / 2."""
    crossfit_oracle: float | None
    """Per-problem action chosen on one half (ties go to the half's best static action), scored on the other."""
    crossfit_headroom: float | None
    """``crossfit_oracle - crossfit_best_static``."""
    crossfit_headroom_ci: tuple[float, float] | None
    """95% t interval of the cross-fitted head-room over problems (both halves averaged per problem)."""

    def to_dict(self) -> dict:
        return asdict(self)


def _interval(values: np.ndarray) -> tuple[float, float]:
    _, low, high = mean_ci(values.tolist())
    return (float(low), float(high))


def _choose_and_score(choose: np.ndarray, score: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-problem pass@k ``[P]`` of (the best static action, each problem's own action), both
    chosen on reward array ``choose`` and scored on ``score``."""
    pick_table = pass_at_k_matrix(choose, k)  # [P, A]
    score_table = pass_at_k_matrix(score, k)
    best = int(np.argmax(pick_table.mean(axis=0)))
    # Per problem: the highest estimate, ties to the overall best action (a policy with no signal
    # for a problem falls back to the best static choice, not to the first action in the list).
    bonus = np.zeros(pick_table.shape[1])
    bonus[best] = 1e-9
    per_problem = np.argmax(pick_table + bonus, axis=1)
    rows = np.arange(score_table.shape[0])
    return score_table[:, best], score_table[rows, per_problem]


def oracle_table(rewards: np.ndarray, action_names: Sequence[str], ks: Sequence[int]) -> list[OracleRow]:
    """Best static action vs per-problem oracle at each k (see the module docstring)."""
    if rewards.shape[1] != len(action_names):
        raise ValueError(f"{rewards.shape[1]} actions in rewards but {len(action_names)} names")
    n = rewards.shape[2]
    half = n // 2
    out = []
    for k in ks:
        table = pass_at_k_matrix(rewards, k)
        means = table.mean(axis=0)
        best = int(np.argmax(means))
        oracle = float(table.max(axis=1).mean())
        cf_best = cf_oracle = cf_ci = None
        if half >= 1 and k <= half:
            a, b = rewards[:, :, :half], rewards[:, :, half : 2 * half]
            s1, o1 = _choose_and_score(a, b, k)
            s2, o2 = _choose_and_score(b, a, k)
            cf_best, cf_oracle = float((s1 + s2).mean() / 2), float((o1 + o2).mean() / 2)
            cf_ci = _interval((o1 + o2 - s1 - s2) / 2)
        out.append(
            OracleRow(
                k=int(k),
                best_action=str(action_names[best]),
                best_static=float(means[best]),
                oracle=oracle,
                headroom=oracle - float(means[best]),
                headroom_ci=_interval(table.max(axis=1) - table[:, best]),
                crossfit_best_static=cf_best,
                crossfit_oracle=cf_oracle,
                crossfit_headroom=None if cf_best is None else cf_oracle - cf_best,
                crossfit_headroom_ci=cf_ci,
            )
        )
    return out


@dataclass(frozen=True)
class BucketStats:
    """Mean reward change of the deviations whose step feature falls in one bucket."""

    bucket: str
    """The bucket's range, ``[low, high)``."""
    deviations: int
    """Deviation draws in the bucket."""
    problems: int
    """Problems contributing (the unit of the interval)."""
    changed: float
    """Fraction of draws whose token differs from greedy's."""
    mean: float
    """Mean over problems of the per-problem mean reward change."""
    low: float
    """Lower end of the 95% t interval over problems (NaN with one problem)."""
    high: float
    """Upper end."""

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def bucket_summary(
    records: Sequence[dict], feature: str, edges: Sequence[float], value: str = "delta"
) -> list[BucketStats]:
    """Group deviation ``records`` (dicts with ``problem``, ``feature``, ``value`` and ``changed``)
    into ``[edges[i], edges[i + 1])`` buckets of ``feature`` and summarise each non-empty bucket."""
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges must be increasing with at least two entries, got {list(edges)}")
    out = []
    for low, high in zip(edges, edges[1:]):
        inside = [r for r in records if low <= r[feature] < high]
        if not inside:
            continue
        per_problem: dict[str, list[float]] = {}
        for r in inside:
            per_problem.setdefault(str(r["problem"]), []).append(float(r[value]))
        mean, lo, hi = mean_ci([sum(v) / len(v) for v in per_problem.values()])
        out.append(
            BucketStats(
                bucket=f"[{low:g}, {high:g})",
                deviations=len(inside),
                problems=len(per_problem),
                changed=sum(bool(r["changed"]) for r in inside) / len(inside),
                mean=mean,
                low=lo,
                high=hi,
            )
        )
    return out


FAILURE_CLASSES = ("right_then_overwritten", "repetition_loop", "cut_by_budget", "wrong_computation")
"""Why a greedy row fails, in the order the classes are tested (the first that applies wins)."""


def repetition_period(tokens: Sequence[int], min_span: int = 16, repeats: int = 3) -> int | None:
    """The smallest period ``p`` such that the last ``max(repeats * p, min_span)`` tokens repeat with
    period ``p`` (a decode stuck in a loop), or None."""
    n = len(tokens)
    for p in range(1, n // repeats + 1):
        span = max(repeats * p, min_span)
        if span > n:
            break
        tail = tokens[n - span :]
        if all(tail[i] == tail[i - p] for i in range(p, span)):
            return p
    return None


_NUMBER_END = re.compile(r"\d(?!\d|[.,]\d)")


def answer_prefixes(text: str) -> list[str]:
    """The prefixes of ``text`` that end right after a complete number (``"... = 12"``), the places
    where a reader could have taken a right answer before the text went on."""
    return [text[: m.end()] for m in _NUMBER_END.finditer(text)]


def classify_failure(
    tokens: Sequence[int], ended_at_eos: bool, text: str, is_right: Callable[[str], bool]
) -> str:
    """Why a wrong greedy row (its ``tokens`` and decoded ``text`` cut at the budget) failed. The
    tokens only serve the loop test: pass them with numbers masked to count loops that count.

    - ``right_then_overwritten``: a prefix ending at a number scores right (``is_right``), the whole text does not;
    - ``repetition_loop``: cut by the budget while repeating itself (:func:`repetition_period`);
    - ``cut_by_budget``: cut by the budget otherwise;
    - ``wrong_computation``: ended on its own (EOS) with a wrong answer.
    """
    if any(is_right(prefix) for prefix in answer_prefixes(text)):
        return "right_then_overwritten"
    if not ended_at_eos:
        return "repetition_loop" if repetition_period(list(tokens)) is not None else "cut_by_budget"
    return "wrong_computation"
