"""How a task's ``data=`` becomes splits, disjoint by content (the rules are in ``tasks.base``'s
module docstring, "Splits"): :func:`plan_splits` says which file and hash band each split is read
from, :func:`load_planned_split` reads one split's problems (each content once), and
:func:`check_disjoint` verifies that a task's splits share no problem."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from .base import (
    SINGLE_FILE_FRACTIONS,
    SPLITS,
    VALIDATION_FRACTION,
    DataSpec,
    Problem,
    SplitSource,
    Task,
    content_hash,
    content_hashes,
    normalise_data_spec,
)

log = logging.getLogger(__name__)

__all__ = ["plan_splits", "load_planned_split", "check_disjoint", "SHOWN_SHARED"]


def _bands(fractions: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """Consecutive bands of [0, 1) in ``fractions``' order, scaled to sum to 1 (last ends at 1.0)."""
    total = sum(fractions.values())
    bands, low = {}, 0.0
    for i, (split, share) in enumerate(fractions.items()):
        high = 1.0 if i == len(fractions) - 1 else low + share / total
        bands[split] = (low, high)
        low = high
    return bands


def plan_splits(
    data: DataSpec, default: Mapping[str, str | Path], task: str, splits: Sequence[str] = SPLITS
) -> dict[str, SplitSource]:
    """Which file and hash band each split is read from (the rules are in the module docstring).

    Args:
        data: the task's ``data=`` option (None: ``default``).
        default: the task's default files, split -> path.
        task: the task name, for messages.
        splits: the splits the task can offer; the result holds those it offers with this ``data``,
            in :data:`SPLITS` order.
    """
    data = normalise_data_spec(data)
    allowed = [s for s in SPLITS if s in splits]
    if data is not None and not isinstance(data, Mapping):  # one path: divided, never reused whole
        path = Path(data)
        if len(allowed) == 1:
            return {allowed[0]: SplitSource(path)}
        fractions = {s: share for s, share in SINGLE_FILE_FRACTIONS.items() if s in allowed}
        bands = _bands(fractions)
        return {s: SplitSource(path, bands[s]) for s in allowed}
    files = {s: Path(p) for s, p in (default if data is None else data).items()}
    unknown = sorted(set(files) - set(allowed))
    if unknown:
        raise ValueError(f"task {task!r}: data names unknown split(s) {unknown}; valid splits: {allowed}")
    plan = {s: SplitSource(p) for s, p in files.items()}
    if "train" in files and "validation" in allowed and "validation" not in files:
        plan["validation"] = SplitSource(files["train"], (0.0, VALIDATION_FRACTION))
        plan["train"] = SplitSource(files["train"], (VALIDATION_FRACTION, 1.0))
    return {s: plan[s] for s in allowed if s in plan}


_REPEATS_TOLD: set[tuple] = set()
"""The repeated-problem warnings already given (task, split, source, count)."""


def load_planned_split(
    plan: Mapping[str, SplitSource],
    split: str,
    read: Callable[[Path], Sequence[Problem]],
    task: str,
    id_prefix: str | None = None,
) -> list[Problem]:
    """The problems of ``split`` under ``plan``: ``read(path)`` filtered to the split's hash band,
    in file order, each content kept once. With ``id_prefix``, ids become ``<id_prefix>/<content
    hash>`` (the same question has the same id in every split and file)."""
    if split not in plan:
        raise ValueError(f"task {task!r} has no split {split!r} with this data; choose one of {list(plan)}")
    source = plan[split]
    kept, seen, repeated = [], set(), 0
    for problem in read(source.path):
        digest = content_hash(problem)
        if not source.holds(digest):
            continue
        if digest in seen:
            repeated += 1
            continue
        seen.add(digest)
        kept.append(replace(problem, id=f"{id_prefix}/{digest}") if id_prefix else problem)
    if repeated and (task, split, source.describe(), repeated) not in _REPEATS_TOLD:
        _REPEATS_TOLD.add((task, split, source.describe(), repeated))  # once per process: a split is loaded often
        log.warning(
            "task %s, split %s: dropped %d repeated problem(s) (same normalised question) from %s",
            task,
            split,
            repeated,
            source.describe(),
        )
    return kept


SHOWN_SHARED = 3
"""How many shared problems an overlap error quotes (file:line and text)."""


def check_disjoint(task: Task, splits: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Check that ``splits`` of ``task`` (default: all it offers) share no problem by content.

    Returns split -> content hashes of its problems (in load order), for recording. Raises a
    ValueError naming each overlapping pair of splits, their files and how many problems they
    share, and quoting the first few shared problems (where each was read and its text). Costs
    one read of each split's file (well under a second for MATH or GSM8K).
    """
    names = list(task.splits if splits is None else splits)
    for split in names:
        task.check_split(split)
    loaded = {split: task.load(split) for split in names}
    hashes = {split: content_hashes(problems) for split, problems in loaded.items()}
    sources = task.split_sources()

    def where(split: str) -> str:
        return f"{split} ({sources[split].describe()})" if split in sources else split

    clashes, overlapping, quoted = [], set(), []
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            shared = set(hashes[first]) & set(hashes[second])
            overlapping |= shared
            if shared:
                clashes.append(f"{len(shared)} problem(s) are in both {where(first)} and {where(second)}")
            for problem in loaded[second]:
                if len(quoted) < SHOWN_SHARED and content_hash(problem) in shared:
                    twin = next(p for p in loaded[first] if content_hash(p) == content_hash(problem))
                    text = " ".join(problem.question.split())
                    text = text if len(text) <= 80 else text[:77] + "..."
                    locate = getattr(task, "locate", lambda p: p.id)  # a task need not subclass Task
                    quoted.append(f"{locate(twin)} = {locate(problem)}: {text!r}")
    if clashes:
        drop = " or pass --drop-overlap (drop_overlap=True) to drop them from train and validation," \
            if "drop_overlap" in getattr(task, "__dataclass_fields__", {}) else ""
        raise ValueError(
            f"task {task.name!r}: splits overlap in {len(overlapping)} problem(s) (same normalised question): "
            + "; ".join(clashes)
            + ". First shared: "
            + "; ".join(quoted)
            + ". Train, validation and test must not share problems: remove the shared problems from one "
            f"file,{drop} or pass one file as data=<path> to have it divided by content hash."
        )
    return hashes
