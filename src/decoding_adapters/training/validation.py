"""What a validation says and what it decides: ``Validation`` (per-problem scores, their paired gain
over the step-0 start and its standard error, per group) and ``EarlyStopping`` (the best validated
weights so far, the patience count, and keep-best's comparison with the start)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

__all__ = ["Validation", "paired_se", "EarlyStopping"]


@dataclass
class Validation:
    """One validation: the mean reward of each validation problem (over its samples) under the
    policy mode that validated better, and the mean of every mode tried."""

    scores: torch.Tensor | None
    """``[P]`` mean reward per validation problem; None when there is nothing to validate on."""
    mode: str | None = None
    """The policy mode these scores are of (None: the trainer has one mode)."""
    by_mode: dict[str, float] = field(default_factory=dict)
    groups: torch.Tensor | None = None
    """``[P]`` a label per score (e.g. the parallel budget it was scored at): keep-best then takes a
    new policy only if it gains in every group where it changed (see ``significantly_above``)."""
    problems: torch.Tensor | None = None
    """``[P]`` the validation problem of each score, where a problem has several (one per parallel
    budget): its rows are not independent, so a paired standard error counts each problem once
    (the mean of its rows' gains). None: one score per problem."""

    @classmethod
    def of(cls, value) -> "Validation":
        """A trainer's ``validate()`` result as a Validation (a bare float: one score, no spread)."""
        if isinstance(value, Validation):
            return value
        return cls(None if value != value else torch.tensor([float(value)], dtype=torch.float64))  # value != value: NaN

    @property
    def mean(self) -> float:
        return float("nan") if self.scores is None else float(self.scores.double().mean())

    @property
    def se(self) -> float:
        """Standard error of the mean over problems (NaN with fewer than two)."""
        if self.scores is None or len(self.scores) < 2:
            return float("nan")
        return float(self.scores.float().std() / math.sqrt(len(self.scores)))

    def group_means(self) -> dict[int, float]:
        """Mean score per group label (empty without groups)."""
        if self.scores is None or self.groups is None:
            return {}
        return {int(g): float(self.scores[self.groups == g].double().mean()) for g in self.groups.unique()}

    def significantly_above(self, start: "Validation", z: float, min_gain: float = 0.0) -> bool:
        """True when these scores beat ``start``'s on the same rows: the paired gain (per row, this
        score minus the start's) has a mean above ``min_gain`` and above ``z`` standard errors of
        that mean. With groups (e.g. the parallel budget a row was scored at: the adapter serves
        each budget by itself), each group is its own decision: a group where no row changed is
        neutral, every other group must show such a gain by itself, and at least one must change.
        Scores not on the same rows (other length or groups) never count as above."""
        if self.scores is None or start.scores is None or self.scores.shape != start.scores.shape:
            return False
        diff = self.scores.double() - start.scores.double()  # [N] paired gain per row
        if self.groups is None and start.groups is None:
            return _gain_is_significant(_per_problem(diff, self.problems), z, min_gain)
        if self.groups is None or start.groups is None or not torch.equal(self.groups, start.groups):
            return False
        per_group = [(diff[rows], None if self.problems is None else self.problems[rows])
                     for rows in (self.groups == g for g in self.groups.unique())]
        changed = [(d, units) for d, units in per_group if bool(d.ne(0).any())]
        return bool(changed) and all(_gain_is_significant(_per_problem(d, units), z, min_gain) for d, units in changed)

    def gain_over(self, start: "Validation") -> tuple[float, float]:
        """(mean paired gain over ``start`` on the same rows, its standard error with each problem
        counted once); NaNs when the rows do not pair."""
        if self.scores is None or start.scores is None or self.scores.shape != start.scores.shape:
            return float("nan"), float("nan")
        diff = self.scores.double() - start.scores.double()
        units = _per_problem(diff, self.problems)
        return float(diff.mean()), float(units.std() / math.sqrt(len(units))) if len(units) >= 2 else 0.0

    def loses_a_group_to(self, best: "Validation | None") -> bool:
        """True when some group's mean is below ``best``'s mean for that group."""
        if best is None or best.groups is None or self.groups is None or not torch.equal(self.groups, best.groups):
            return False
        theirs = best.group_means()
        return any(mean < theirs[g] - 1e-12 for g, mean in self.group_means().items())

    def record(self) -> dict:
        out = {"val_reward": self.mean, "val_se": self.se}
        if self.groups is not None:
            out["val_by_group"] = {str(g): m for g, m in self.group_means().items()}
        if self.mode is not None:
            out["val_mode"] = self.mode
        if self.by_mode:
            out["val_by_mode"] = self.by_mode
        return out


def _per_problem(diff: torch.Tensor, problems: torch.Tensor | None) -> torch.Tensor:
    """``diff [N]`` averaged over the rows of each problem (``problems [N]``; None: as it is)."""
    if problems is None:
        return diff
    _, inverse = problems.unique(return_inverse=True)
    count = torch.bincount(inverse).to(diff.dtype)
    return torch.zeros(len(count), dtype=diff.dtype).index_add_(0, inverse, diff) / count


def _gain_is_significant(diff: torch.Tensor, z: float, min_gain: float) -> bool:
    """mean(diff) > max(min_gain, z * its standard error) (no spread with fewer than two rows)."""
    mean = float(diff.mean())
    se = float(diff.std() / math.sqrt(len(diff))) if len(diff) >= 2 else 0.0
    return mean > max(min_gain, z * se)


def paired_se(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    """Standard error of mean(a - b) over paired per-problem scores (0 when not paired)."""
    if a is None or b is None or len(a) != len(b) or len(a) < 2:
        return 0.0
    return float((a.float() - b.float()).std() / math.sqrt(len(a)))


class EarlyStopping:
    """Best validation reward so far, the weights (and policy mode) at that point and validations
    since (see ``TrainingLoop``); the step-0 validation, which every later one must beat (keep-best).
    A NaN validation reward (no validation problems) never counts as better."""

    def __init__(self):
        self.best = float("-inf")
        self.best_step = 0
        self.since_best = 0
        self.stopped = False
        self.best_policy: dict | None = None
        self.best_scores: torch.Tensor | None = None
        self.best_groups: torch.Tensor | None = None
        self.best_mode: str | None = None
        self.last_mode: str | None = None
        self.start_scores: torch.Tensor | None = None
        self.start_groups: torch.Tensor | None = None

    def observe(self, value, step: int, policy: torch.nn.Module, patience: int, min_improvement: float,
                min_improvement_se: float = 0.0) -> bool:
        """Record a validation (a ``Validation`` or a bare reward); True when this one ends training
        (never with ``patience`` 0). A step-0 validation (keep-best) is the start. After a start,
        better: significantly above the start (``Validation.significantly_above`` with
        ``min_improvement_se`` standard errors and ``min_improvement``) and above the best by more
        than ``min_improvement``. Without one (early stopping alone): above the best by more than
        ``min_improvement`` and ``min_improvement_se`` paired standard errors, and, for grouped
        scores (``Validation.groups``), no group's mean below the best's."""
        validation = Validation.of(value)
        mean = validation.mean
        self.last_mode = validation.mode
        if step == 0 and self.start_scores is None and validation.scores is not None:
            self.start_scores, self.start_groups = validation.scores, validation.groups
            better = mean == mean  # mean == mean: not NaN
        elif self.start_scores is not None:  # a later step against the start, on the same rows
            start = Validation(self.start_scores, groups=self.start_groups)
            better = (mean > self.best + min_improvement
                      and validation.significantly_above(start, min_improvement_se, min_improvement))
        else:
            margin = max(min_improvement, min_improvement_se * paired_se(validation.scores, self.best_scores))
            loses_a_group = validation.loses_a_group_to(Validation(self.best_scores, groups=self.best_groups))
            better = mean == mean and mean > self.best + margin and not loses_a_group
        if better:
            self.best, self.best_step, self.since_best = mean, step, 0
            self.best_policy = {k: v.detach().clone() for k, v in policy.state_dict().items()}
            self.best_scores, self.best_groups, self.best_mode = validation.scores, validation.groups, validation.mode
        else:
            self.since_best += 1
        self.stopped = patience > 0 and self.since_best >= patience
        return self.stopped

    def state(self) -> dict:
        return {
            "best": self.best,
            "best_step": self.best_step,
            "since_best": self.since_best,
            "stopped": self.stopped,
            "best_policy": self.best_policy,
            "best_scores": self.best_scores,
            "best_groups": self.best_groups,
            "best_mode": self.best_mode,
            "last_mode": self.last_mode,
            "start_scores": self.start_scores,
            "start_groups": self.start_groups,
        }

    @classmethod
    def from_state(cls, state: dict | None) -> "EarlyStopping":
        early = cls()
        for key, value in (state or {}).items():
            setattr(early, key, value)
        return early
