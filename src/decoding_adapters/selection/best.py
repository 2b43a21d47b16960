"""The strongest static baseline: for each reported pass@k, the single strategy with the highest
validation pass@k among every static candidate (the pool and greedy).

A user who compares an adapter with static decoding picks the best fixed strategy they could, for
the metric they care about: greedy can be best at pass@1 and a sampler at pass@8. :func:`best_static`
is the one place that choice is made; selection writes it into ``actions.json`` (``best_per_k``),
the evaluation turns it into the ``Best`` row (``evaluation.best_static_method``) and the
experiments pass it along. Greedy stopped at its first complete answer is a static candidate too
where it was scored on the same validation problems (``evaluation.STOP_CANDIDATE``: the studies
compare its validation pass@1 with the choice here, ``select_best_action`` scores it beside the rest).

Estimates, per (problem, action) cell with ``c`` correct of ``n`` samples (a sample is correct when
its reward is >= 0.5, as in the evaluation):

- ``k <= n``: the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` (``core.stats.pass_at_k``);
- ``k > n``: extrapolated as ``1 - (1 - c/n)^k``: exact for a deterministic action (greedy, whose
  one decode stands for all its samples, so ``c`` is 0 or ``n``), biased low for a sampler (by
  Jensen's inequality), so a table with fewer samples than the largest k favours greedy there;
  a candidate's mean is floored at its measured pass@n, since pass@k cannot fall as k grows. The
  result records which k were extrapolated.

Validation pass@k of an action is the mean of its cells over the problems; the best action is the
one with the highest mean (scores within ``TIE_TOLERANCE`` of the best count as tied and go to the
lowest candidate index, so the choice is deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..core.stats import pass_at_k

__all__ = [
    "BestStatic",
    "best_static",
    "best_static_from_counts",
    "best_static_from_table",
    "pass_at_k_cells",
    "CORRECT_THRESHOLD",
]

CORRECT_THRESHOLD = 0.5
"""A sample counts as correct for pass@k when its reward is at least this (the evaluation's rule)."""
TIE_TOLERANCE = 1e-12
"""Validation scores within this of the best count as tied (sums taken in another order may differ
in the last bit); ties go to the lowest candidate index."""


@dataclass(frozen=True)
class BestStatic:
    """The best single static strategy for each pass@k, chosen on validation outcomes."""

    k_values: tuple[int, ...]
    """The k of each pass@k, ascending."""
    names: tuple[str, ...]
    """Candidate action names, in candidate order."""
    scores: tuple[tuple[float, ...], ...]
    """``scores[i][a]``: validation pass@``k_values[i]`` of candidate ``a`` (a fraction)."""
    choice: tuple[int, ...]
    """``choice[i]``: index into ``names`` of the best candidate at ``k_values[i]``."""
    samples: int
    """Fewest samples in any (problem, candidate) cell: pass@k for k above it is extrapolated."""
    problems: int
    """Validation problems the scores are means over."""

    def __post_init__(self) -> None:
        if not self.k_values or list(self.k_values) != sorted(set(self.k_values)) or self.k_values[0] < 1:
            raise ValueError(f"k_values must be distinct positive integers in ascending order, got {self.k_values}")
        if len(self.scores) != len(self.k_values) or len(self.choice) != len(self.k_values):
            raise ValueError("scores and choice need one entry per k")
        if any(len(row) != len(self.names) for row in self.scores):
            raise ValueError("every score row needs one value per candidate")
        if not all(0 <= c < len(self.names) for c in self.choice):
            raise ValueError(f"choice indices must be in [0, {len(self.names)})")
        if self.samples < 1 or self.problems < 1:
            raise ValueError("samples and problems must be >= 1")

    def _index(self, k: int) -> int:
        try:
            return self.k_values.index(k)
        except ValueError:
            chosen = ", ".join(map(str, self.k_values))
            raise KeyError(f"no best static strategy was chosen for pass@{k} (chosen for k in {chosen})") from None

    def name_for(self, k: int) -> str:
        """Name of the best candidate at pass@k."""
        return self.names[self.choice[self._index(k)]]

    def score_for(self, k: int, name: str | None = None) -> float:
        """Validation pass@k of ``name`` (default: the best candidate at that k)."""
        i = self._index(k)
        return self.scores[i][self.choice[i] if name is None else self.names.index(name)]

    def extrapolated(self, k: int) -> bool:
        """Whether pass@k was extrapolated (k above the samples of some cell)."""
        return k > self.samples

    def to_dict(self) -> dict:
        """JSON-friendly: ``{"k_values", "best": {k: name}, "scores": {name: [per k]}, ...}``."""
        return {
            "k_values": list(self.k_values),
            "best": {str(k): self.name_for(k) for k in self.k_values},
            "best_score": {str(k): self.score_for(k) for k in self.k_values},
            "scores": {n: [self.scores[i][a] for i in range(len(self.k_values))] for a, n in enumerate(self.names)},
            "samples": self.samples,
            "problems": self.problems,
            "extrapolated": [k for k in self.k_values if self.extrapolated(k)],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "BestStatic":
        ks = tuple(int(k) for k in data["k_values"])
        names = tuple(data["scores"])
        scores = tuple(tuple(float(data["scores"][n][i]) for n in names) for i in range(len(ks)))
        choice = tuple(names.index(data["best"][str(k)]) for k in ks)
        return cls(ks, names, scores, choice, int(data["samples"]), int(data["problems"]))


def pass_at_k_cells(correct: np.ndarray, samples: np.ndarray, k: int) -> np.ndarray:
    """pass@k of every cell (float64, the shape of ``correct``) from ``correct`` of ``samples``
    samples: unbiased where ``k <= samples``, extrapolated ``1 - (1 - c/n)^k`` elsewhere."""
    correct, samples = np.asarray(correct, dtype=np.int64), np.broadcast_to(np.asarray(samples, dtype=np.int64),
                                                                            np.shape(correct))
    if np.any(samples < 1) or np.any(correct < 0) or np.any(correct > samples):
        raise ValueError("every cell needs >= 1 sample and 0 <= correct <= samples")
    out = np.empty(correct.shape, dtype=np.float64)
    for index in np.ndindex(correct.shape):
        n, c = int(samples[index]), int(correct[index])
        out[index] = pass_at_k(n, c, k) if k <= n else 1.0 - (1.0 - c / n) ** k
    return out


def best_static(scores: Mapping[int, Sequence[float]], names: Sequence[str], *, samples: int,
                problems: int) -> BestStatic:
    """The best candidate at each pass@k: the one choice of the Best static baseline.

    Args:
        scores: ``{k: validation pass@k of every candidate}`` (one value per name, in name order).
        names: candidate names (greedy among them: it is a static strategy too).
        samples: fewest samples behind any score (pass@k above it was extrapolated).
        problems: validation problems the scores are means over.
    """
    if len(set(names)) != len(names) or not names:
        raise ValueError("names must be distinct and non-empty")
    ks = tuple(sorted(int(k) for k in scores))
    rows, choice = [], []
    for k in ks:
        mean = np.asarray(scores[k], dtype=np.float64)
        if mean.shape != (len(names),):
            raise ValueError(f"pass@{k} needs one score per candidate ({len(names)}), got shape {mean.shape}")
        choice.append(int(np.flatnonzero(mean >= mean.max() - TIE_TOLERANCE)[0]))
        rows.append(tuple(float(v) for v in mean))
    return BestStatic(ks, tuple(names), tuple(rows), tuple(choice), int(samples), int(problems))


def best_static_from_counts(correct: np.ndarray, samples: np.ndarray | int, k_values: Sequence[int],
                            names: Sequence[str]) -> BestStatic:
    """:func:`best_static` on per-cell counts: ``correct`` ``[problems, candidates]`` correct samples
    of ``samples`` (an int or an array of that shape); scores are the means over problems of
    :func:`pass_at_k_cells`."""
    correct = np.asarray(correct)
    if correct.ndim != 2 or correct.shape[0] == 0 or correct.shape[1] == 0:
        raise ValueError(f"correct must be a non-empty [problems, candidates] matrix, got shape {correct.shape}")
    if len(names) != correct.shape[1]:
        raise ValueError("names need one entry per candidate column")
    ks = sorted({int(k) for k in k_values})
    if not ks or ks[0] < 1:
        raise ValueError(f"k_values must be positive integers, got {k_values}")
    samples_arr = np.broadcast_to(np.asarray(samples, dtype=np.int64), correct.shape)
    scores = {k: pass_at_k_cells(correct, samples_arr, k).mean(axis=0) for k in ks}
    # An extrapolated pass@k is biased low and can fall below the measured pass@n of the same candidate;
    # pass@k never falls as k grows, so it is floored there (n: the fewest samples of any cell).
    n = int(samples_arr.min())
    measured = pass_at_k_cells(correct, samples_arr, n).mean(axis=0)
    scores = {k: np.maximum(v, measured) if k > n else v for k, v in scores.items()}
    return best_static(scores, names, samples=int(samples_arr.min()), problems=correct.shape[0])


def best_static_from_table(table, k_values: Sequence[int], names: Sequence[str] | None = None) -> BestStatic:
    """:func:`best_static` on an ``OutcomeTable``'s stored samples (``names``: the candidates, in
    this order; default every action of the table). Every (problem, candidate) cell needs a sample."""
    names = list(table.action_names if names is None else names)
    pids = table.problem_ids
    correct = np.zeros((len(pids), len(names)), dtype=np.int64)
    samples = np.zeros_like(correct)
    for i, pid in enumerate(pids):
        for a, name in enumerate(names):
            cell = table.outcomes(pid, name)
            if not cell:
                raise ValueError(f"the outcome table has no sample of {name!r} on problem {pid!r}")
            correct[i, a] = sum(o.reward >= CORRECT_THRESHOLD for o in cell)
            samples[i, a] = len(cell)
    return best_static_from_counts(correct, samples, k_values, names)
