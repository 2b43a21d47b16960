"""Evaluate a candidate pool of decoding actions on validation problems and pick K complementary ones.

The paper's appendix "Action Space Selection": every candidate action ``s`` is run on every
validation problem ``x``; ``R[x, s]`` is its reward (here the mean reward over ``samples`` samples,
so a float in [0, 1]). The action set is chosen to maximise the coverage (best-of-S accuracy)

    F(S) = mean over problems x of max_{s in S} R[x, s]        (F(empty set) = 0)

greedily: start from the empty set and add the action with the largest marginal gain
``F(S + s) - F(S)`` until ``|S| = K``. F is monotone submodular, so greedy is within (1 - 1/e) of
the best K-set, and its marginal gains never grow: once a pick adds nothing, no later one does.
The greedy order over the *whole* pool gives the coverage curve and the point where it saturates
(``Selection.saturation``: the K at which the pool's coverage is reached). Top-K by mean reward is
the redundant baseline the appendix compares to. The Best static baseline (the best single
strategy at each pass@k, greedy included) is chosen by ``selection.best`` from the same table.

Pieces:

- :func:`evaluate_pool` fills an :class:`OutcomeTable` through the rollout interface, one
  ``RolloutRequest`` per chunk of problems so that all actions x samples of a problem share its
  prompt's prefill. The table lives in a JSONL file, appended and fsync'ed per chunk: a killed run
  continues where it stopped and never recomputes a stored outcome (a torn last line is dropped).
- :func:`greedy_coverage`, :func:`top_k_by_mean`, :func:`coverage`, :func:`coverage_curve`: the
  selection itself, on a plain ``[problems, actions]`` numpy matrix; :func:`select_from_table` runs
  it and the Best choice on an :class:`OutcomeTable`.
- :class:`ReplayEnvironment`: **offline replay** of the stored outcomes (rewards are resampled
  from the table, nothing is decoded) for cheap sequence-level trainer experiments.
- :func:`write_outputs` (the ``select-actions`` command, ``cli.select_actions``): ``outcomes.jsonl``,
  ``actions.json`` (loadable by ``load_action_set``), ``selection.md`` and ``selection.png``.

Table file format (``outcomes.jsonl``), one JSON object per line:

- line 1, the header (:func:`table_header`): ``{"header": {"format": "decoding-adapters/outcomes",
  "version": 2, "task": ..., "model": {...}, "data": {"split"?, "count", "digest"}, "system_prompt":
  ..., "prompts": digest of a probe problem's rendered prompts, "cot_ratio": ..., "token_budget":
  ..., "seed": ..., "samples": ...}}``: everything that determines an outcome (problem ids are
  positional in some tasks, so the data and prompt settings must be part of it). Resuming with
  other settings is refused (a one-line ValueError naming the fields that differ): their outcomes
  would not mix. Offline replay checks the header against the trainer's settings the same way
  (:func:`check_replay_header`).
- every other line, one sample: ``{"problem": id, "action": action name, "sample": i,
  "reward": r, "length": generated tokens (EOS included)}``.

Seeds: sample ``i`` of action ``s`` on problem ``x`` is decoded with
``row_seed(seed, x.id, s.name, i)``, so an outcome does not depend on the pool's order, on which
other actions are in the pool, or on how the run was chunked or resumed. Greedy actions are
deterministic: one decode is stored for all their samples.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..core.files import write_json, write_text
from ..decoding.actions import GREEDY, ActionSet, DecodingAction, load_action_set
from ..decoding.loop import row_seed
from ..decoding.rollouts import HFRollouts, RolloutRequest, Rollouts, answer_stops, encode_problems
from ..tasks.base import problems_digest
from .best import BestStatic, best_static, best_static_from_table

log = logging.getLogger(__name__)

__all__ = [
    "Outcome",
    "OutcomeTable",
    "evaluate_pool",
    "greedy_coverage",
    "top_k_by_mean",
    "coverage",
    "coverage_curve",
    "Selection",
    "select_actions",
    "select_from_table",
    "build_pool",
    "ReplayEnvironment",
    "write_outputs",
    "table_header",
    "check_table",
    "header_differences",
    "check_replay_header",
]

TABLE_FORMAT = "decoding-adapters/outcomes"
TABLE_VERSION = 2
TIE_TOLERANCE = 1e-12
"""Marginal gains within this of the best count as tied (sums of equal values taken in another
order may differ in the last bit); ties go to the lowest index."""


# ============================================================================ outcome table


@dataclass(frozen=True)
class Outcome:
    """One decoded sample of one (problem, action) cell."""

    reward: float
    """Verifier reward of the completion, in [0, 1] (0/1 for the built-in tasks)."""
    length: int
    """Generated tokens, the EOS token included when one ended the row."""


class OutcomeTable:
    """Outcomes per (problem id, action name, sample index), in memory; see the module docstring
    for the file format. Problems and actions keep the order in which they were first added."""

    def __init__(self, header: dict | None = None, path: str | Path | None = None):
        self.header = dict(header or {})
        self.path = None if path is None else Path(path)
        self._cells: dict[tuple[str, str], dict[int, Outcome]] = {}
        self._problems: dict[str, None] = {}  # ordered sets
        self._actions: dict[str, None] = {}

    # ---- building --------------------------------------------------------------------------
    def add(self, problem_id: str, action_name: str, sample: int, reward: float, length: int) -> None:
        self._problems.setdefault(problem_id)
        self._actions.setdefault(action_name)
        self._cells.setdefault((problem_id, action_name), {})[int(sample)] = Outcome(float(reward), int(length))

    def add_record(self, record: dict) -> None:
        self.add(record["problem"], record["action"], record["sample"], record["reward"], record["length"])

    @classmethod
    def load(cls, path: str | Path) -> "OutcomeTable":
        """Read a table file. A torn last line (a kill mid-write) is dropped; an unreadable line
        elsewhere is skipped with a warning."""
        path = Path(path)
        table = cls(path=path)
        lines, _ = _read_complete_lines(path)
        bad = 0
        for number, line in enumerate(lines, start=1):
            try:
                row = json.loads(line)
                if "header" in row:
                    table.header = row["header"]
                else:
                    table.add_record(row)
            except (ValueError, KeyError, TypeError):
                bad += 1
                log.warning("%s:%d: skipping an unreadable line", path, number)
        return table

    # ---- reading ---------------------------------------------------------------------------
    @property
    def problem_ids(self) -> list[str]:
        return list(self._problems)

    @property
    def action_names(self) -> list[str]:
        return list(self._actions)

    def __len__(self) -> int:
        """Number of stored samples."""
        return sum(len(c) for c in self._cells.values())

    def has(self, problem_id: str, action_name: str, sample: int) -> bool:
        return sample in self._cells.get((problem_id, action_name), {})

    def outcomes(self, problem_id: str, action_name: str) -> list[Outcome]:
        """The stored samples of a cell, by sample index (empty if none)."""
        cell = self._cells.get((problem_id, action_name), {})
        return [cell[s] for s in sorted(cell)]

    def subset(
        self, problem_ids: Sequence[str], action_names: Sequence[str], samples: int | None = None
    ) -> "OutcomeTable":
        """A copy holding only these problems and actions (in this order) and samples ``< samples``."""
        out = OutcomeTable(self.header, self.path)
        for pid in problem_ids:
            for name in action_names:
                for s, o in sorted(self._cells.get((pid, name), {}).items()):
                    if samples is None or s < samples:
                        out.add(pid, name, s, o.reward, o.length)
        return out

    def to_matrix(self) -> tuple[list[str], list[str], np.ndarray]:
        """``(problem_ids, action_names, R)`` with ``R[i, j]`` the mean reward over the stored
        samples of problem ``i`` under action ``j`` (float64 ``[problems, actions]``)."""
        return self._matrix(lambda cell: np.mean([o.reward for o in cell]))

    def length_matrix(self) -> tuple[list[str], list[str], np.ndarray]:
        """Like :meth:`to_matrix` with the mean generated length of each cell."""
        return self._matrix(lambda cell: np.mean([o.length for o in cell]))

    def _matrix(self, reduce: Callable[[list[Outcome]], float]) -> tuple[list[str], list[str], np.ndarray]:
        pids, names = self.problem_ids, self.action_names
        out = np.zeros((len(pids), len(names)))
        missing = 0
        for i, pid in enumerate(pids):
            for j, name in enumerate(names):
                cell = self.outcomes(pid, name)
                missing += not cell
                out[i, j] = reduce(cell) if cell else np.nan
        if missing:
            raise ValueError(f"the outcome table lacks {missing} of {out.size} (problem, action) cells")
        return pids, names, out


def _read_complete_lines(path: Path) -> tuple[list[str], int]:
    """Non-blank complete lines of ``path`` and the byte length of that complete part (a last
    line without a newline is torn: written by a run killed mid-write)."""
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    lines = [ln for ln in data[:end].decode("utf-8", errors="replace").split("\n") if ln.strip()]
    return lines, end


class _TableWriter:
    """Appends records to a table file, one flushed and fsync'ed batch per call."""

    def __init__(self, path: Path, header: dict, write_header: bool):
        path.parent.mkdir(parents=True, exist_ok=True)
        _, complete = _read_complete_lines(path)
        self._file = open(path, "ab")
        self._file.truncate(complete)  # drop a torn last line before appending after it
        self._file.seek(complete)
        if write_header or complete == 0:
            self.append([{"header": header}])

    def append(self, records: Sequence[dict]) -> None:
        self._file.write("".join(json.dumps(r) + "\n" for r in records).encode())
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def header_differences(stored: dict, now: dict, keys=None) -> str:
    """``"key: stored X vs now Y, ..."`` for the ``keys`` (default: all) on which two headers differ."""
    keys = sorted(set(stored) | set(now)) if keys is None else list(keys)
    differ = [k for k in keys if stored.get(k) != now.get(k)]

    def show(value) -> str:
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."

    return ", ".join(f"{k}: stored {show(stored.get(k))} vs now {show(now.get(k))}" for k in differ)


def check_table(path: str | Path, header: dict, ignore: Sequence[str] = ()) -> OutcomeTable | None:
    """The stored table at ``path`` (None if there is none), refusing one written with other
    settings than ``header`` (fields in ``ignore`` aside: a pre-flight before the model loads
    cannot know its fingerprint yet)."""
    path = Path(path)
    if not path.exists():
        return None
    table = OutcomeTable.load(path)
    keys = [k for k in sorted(set(header) | set(table.header)) if k not in ignore]
    diff = header_differences(table.header, header, keys) if table.header else ""
    if diff:
        raise ValueError(f"{path} holds outcomes for other settings ({diff}); use another output folder or delete it")
    return table


def _open_table(path: Path, header: dict) -> OutcomeTable:
    """The stored table at ``path`` (empty if none), refusing one written with other settings."""
    table = check_table(path, header) or OutcomeTable(header, path)
    table.header = header
    return table


def _prompts_digest(task, problem) -> str:
    """SHA-256 of the chat messages ``task`` renders for ``problem`` with and without chain of
    thought: changes when the system prompt, the prompt template or the CoT instruction do."""
    messages = [task.prompt(problem, cot=False), task.prompt(problem, cot=True)]
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


def table_header(task, lm, problems, *, token_budget: int, seed: int, cot_ratio: float, samples: int,
                 data: dict | None = None, stop_at_answer: bool = False) -> dict:
    """The header of an outcome table: everything that determines its outcomes (module docstring).
    ``data`` describes where ``problems`` come from (``{"split", "count", "digest"}`` of the whole
    split, so that a run over more of the split resumes); default: the problems themselves.
    ``stop_at_answer`` (every sample ended at its first complete answer) is recorded only when
    True, so a table decoded to the budget reads as before."""
    if data is None:
        data = {"count": len(problems), "digest": problems_digest(problems)}
    stop = {"stop_at_answer": True} if stop_at_answer else {}
    return {**stop,
        "format": TABLE_FORMAT,
        "version": TABLE_VERSION,
        "task": getattr(task, "name", str(task)),
        "model": lm.fingerprint() if lm is not None else None,
        "data": dict(data),
        "system_prompt": getattr(task, "system_prompt", None),
        "prompts": _prompts_digest(task, problems[0]) if problems else None,
        "cot_ratio": cot_ratio,
        "token_budget": token_budget,
        "seed": seed,
        "samples": samples,
    }


def check_replay_header(table: OutcomeTable, *, task, lm=None, token_budget: int, seed: int,
                        cot_ratio: float, stop_at_answer: bool = False) -> None:
    """Refuse to replay a table whose outcomes were decoded under other settings than the
    trainer's (task, model, data, prompts, token budget, seed, CoT ratio, the stop at the first
    answer): its rewards would describe another experiment. One-line ValueError naming the fields
    that differ."""
    header, path = table.header, table.path
    if bool(header.get("stop_at_answer", False)) != bool(stop_at_answer):
        raise ValueError(f"{path} was decoded with stop_at_answer={bool(header.get('stop_at_answer', False))}, this "
                         f"run has {bool(stop_at_answer)}: offline replay refused (decode the table again)")
    # The seed: in replay the trainer's seed draws the policy's weights, batches and stored samples,
    # never a decode, so training several seeds on one table is the intended use. It must match
    # only when chain of thought is on: which prompts get CoT is drawn from the seed.
    if header.get("version") != TABLE_VERSION:
        raise ValueError(
            f"{path}: outcome table version {header.get('version')!r} records too little to check it against this "
            f"run (version {TABLE_VERSION} does): re-run select-actions into a new folder"
        )
    now = {"task": getattr(task, "name", str(task)), "token_budget": token_budget, "cot_ratio": cot_ratio}
    if cot_ratio > 0 or header.get("cot_ratio"):
        now["seed"] = seed
    if lm is not None:
        now["model"] = lm.fingerprint()
    data = header.get("data") or {}
    if data.get("split"):  # the header describes the whole split
        problems = task.load(data["split"])
    else:  # the header describes the table's own problems: find them in the task's splits by id
        wanted, found = set(table.problem_ids), {}
        for split in getattr(task, "splits", ()):
            try:
                found.update((p.id, p) for p in task.load(split) if p.id in wanted and p.id not in found)
            except (ValueError, FileNotFoundError):  # a split this data does not provide
                continue
        problems = [found[i] for i in table.problem_ids if i in found]
    now["data"] = {**data, "count": len(problems), "digest": problems_digest(problems)}
    if problems:
        now["prompts"] = _prompts_digest(task, problems[0])
    diff = header_differences(header, now, keys=now)
    if diff:
        raise ValueError(f"{path} was decoded under other settings than this run ({diff}): offline replay refused")


# ============================================================================ pool evaluation

Job = tuple[int, int, tuple[int, ...]]
"""(action index, sample index to decode, sample indices its outcome is stored under)."""


def _pending_jobs(table: OutcomeTable, problem_id: str, actions: Sequence[DecodingAction], samples: int) -> list[Job]:
    """The decodes still missing for one problem; a greedy action decodes once for all samples."""
    jobs: list[Job] = []
    for a, action in enumerate(actions):
        missing = tuple(s for s in range(samples) if not table.has(problem_id, action.name, s))
        if missing and action.is_greedy:
            jobs.append((a, missing[0], missing))
        else:
            jobs.extend((a, s, (s,)) for s in missing)
    return jobs


def _chunks(pending: list[tuple[int, list[Job]]], batch_rows: int) -> list[list[tuple[int, list[Job]]]]:
    """Group whole problems into chunks of at most ``batch_rows`` rows (one problem may exceed it:
    the rollouts then split its rows, still prefilling the prompt once per sub-chunk)."""
    chunks, current, rows = [], [], 0
    for item in pending:
        if current and rows + len(item[1]) > batch_rows:
            chunks.append(current)
            current, rows = [], 0
        current.append(item)
        rows += len(item[1])
    return chunks + ([current] if current else [])


def _chunk_request(chunk, prompts, problems, actions, seed: int, token_budget: int, share_prefill: bool,
                   task=None, stop_at_answer: bool = False):
    """One ``RolloutRequest`` for a chunk and its rows as (problem index, action, sample, stored as);
    with ``stop_at_answer`` every row ends at its first complete answer (``task.answer_complete``)."""
    rows = [(pi, a, s, stored) for pi, jobs in chunk for a, s, stored in jobs]
    if share_prefill:  # one prompt per problem, fanned out to all of its rows
        local = {pi: i for i, (pi, _) in enumerate(chunk)}
        request_prompts, prompt_of_row = [prompts[pi] for pi, _ in chunk], [local[r[0]] for r in rows]
    else:  # a private copy of the prompt per row: nothing is shared (for measuring the saving)
        request_prompts, prompt_of_row = [prompts[r[0]] for r in rows], list(range(len(rows)))
    seeds = [row_seed(seed, problems[pi].id, actions[a].name, s) for pi, a, s, _ in rows]
    stops = answer_stops(task, problems, [r[0] for r in rows], stop_at_answer)
    return RolloutRequest(request_prompts, prompt_of_row, seeds, token_budget, [r[1] for r in rows], stops), rows


def _check_inputs(problems, actions, samples: int, token_budget: int, rollouts) -> None:
    if samples < 1 or token_budget < 1:
        raise ValueError(f"samples and token_budget must be >= 1, got {samples} and {token_budget}")
    if not problems or not actions:
        raise ValueError("evaluate_pool needs at least one problem and one action")
    names = [a.name for a in actions]
    if len(set(names)) != len(names):
        raise ValueError("action names must be unique in a pool (outcomes are stored by name)")
    if len({p.id for p in problems}) != len(problems):
        raise ValueError("problem ids must be unique (outcomes are stored by id)")
    if rollouts is not None and rollouts.action_set.names != names:
        raise ValueError("the rollouts' action set must be the pool, in the same order")


def evaluate_pool(
    lm,
    task,
    problems,
    actions: Sequence[DecodingAction],
    *,
    samples: int,
    token_budget: int,
    seed: int,
    table_path: str | Path,
    rollouts: Rollouts | None = None,
    batch_rows: int = 64,
    progress: bool | str = True,
    cot_ratio: float = 0.0,
    share_prefill: bool = True,
    on_chunk: Callable[[int, int], None] | None = None,
    data: dict | None = None,
    stop_at_answer: bool = False,
) -> OutcomeTable:
    """Decode ``samples`` samples of every action on every problem and store reward and length.

    Resumable: outcomes already in ``table_path`` are loaded and never recomputed; new ones are
    appended and fsync'ed after each chunk of problems (see the module docstring). Returns the
    table restricted to ``problems`` x ``actions`` x ``samples`` (in that order), so ``to_matrix``
    is exactly that grid.

    Args:
        rollouts: backend whose ``action_set`` is ``actions`` (default: ``HFRollouts`` on ``lm``).
        batch_rows: rows per request; whole problems are grouped up to this many rows.
        share_prefill: False gives every row its own copy of the prompt (benchmarks only).
        on_chunk: called as ``on_chunk(chunks_done, chunks_total)`` after each chunk is on disk.
        data: where ``problems`` come from, recorded in the header (see :func:`table_header`).
        stop_at_answer: every sample ends at its first complete answer (``Task.answer_complete``;
            the studies pass their protocol's stop), recorded in the header.
    """
    _check_inputs(problems, actions, samples, token_budget, rollouts)
    rollouts = rollouts or HFRollouts(lm, ActionSet(actions), batch_rows)
    header = table_header(task, lm, problems, token_budget=token_budget, seed=seed, cot_ratio=cot_ratio,
                          samples=samples, data=data, stop_at_answer=stop_at_answer)
    path = Path(table_path)
    table = _open_table(path, header)
    pending = [(i, jobs) for i, p in enumerate(problems) if (jobs := _pending_jobs(table, p.id, actions, samples))]
    chunks = _chunks(pending, batch_rows)
    prompts, _ = encode_problems(lm, task, problems, cot_ratio, seed) if pending else ([], [])
    total = len(problems) * len(actions) * samples
    writer = _TableWriter(path, header, write_header=not path.exists())
    log.info(
        "pool evaluation: %d problems x %d actions x %d samples, %d chunks to run (%d problems already done)",
        len(problems),
        len(actions),
        samples,
        len(chunks),
        len(problems) - len(pending),
    )
    try:
        with tqdm(
            total=total,
            initial=total - _pending_count(pending),
            desc=progress if isinstance(progress, str) else "pool",
            unit="sample",
            disable=not progress,
            dynamic_ncols=True,
        ) as bar:
            for done, chunk in enumerate(chunks, start=1):
                records = _run_chunk(
                    rollouts, task, chunk, prompts, problems, actions, seed, token_budget, share_prefill,
                    stop_at_answer,
                )
                writer.append(records)
                for r in records:
                    table.add_record(r)
                bar.update(len(records))
                if on_chunk is not None:
                    on_chunk(done, len(chunks))
    finally:
        writer.close()
    return table.subset([p.id for p in problems], [a.name for a in actions], samples)


def _pending_count(pending: list[tuple[int, list[Job]]]) -> int:
    return sum(len(stored) for _, jobs in pending for _, _, stored in jobs)


def _run_chunk(rollouts, task, chunk, prompts, problems, actions, seed, token_budget, share_prefill,
               stop_at_answer: bool = False) -> list[dict]:
    """Decode one chunk and return its table records (a greedy decode yields one per stored sample)."""
    request, rows = _chunk_request(chunk, prompts, problems, actions, seed, token_budget, share_prefill, task,
                                   stop_at_answer)
    result = rollouts.run(request)
    records = []
    rewards = task.reward_batch([problems[pi] for pi, _, _, _ in rows], result.texts)
    for i, (pi, a, _, stored) in enumerate(rows):
        reward, length = float(rewards[i]), int(result.lengths[i])
        records += [
            {"problem": problems[pi].id, "action": actions[a].name, "sample": s, "reward": reward, "length": length}
            for s in stored
        ]
    return records


# ============================================================================ selection


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


# ============================================================================ offline replay


class ReplayEnvironment:
    """**Offline replay** of a pool evaluation: rewards are drawn from the outcomes stored in an
    :class:`OutcomeTable`; no model runs. Use it for fast sequence-level (contextual-bandit)
    trainer experiments; numbers obtained with it must be labelled offline replay.

    A draw for (problem, action) picks stored samples of that cell uniformly at random: without
    replacement while ``count`` <= the samples stored, with replacement beyond that.
    """

    def __init__(self, table: OutcomeTable):
        self.table = table
        self._rewards: dict[tuple[str, str], torch.Tensor] = {}
        for pid in table.problem_ids:
            for name in table.action_names:
                cell = table.outcomes(pid, name)
                if cell:
                    self._rewards[(pid, name)] = torch.tensor([o.reward for o in cell], dtype=torch.float32)

    @property
    def problem_ids(self) -> list[str]:
        return self.table.problem_ids

    @property
    def action_names(self) -> list[str]:
        return self.table.action_names

    def _cell(self, problem_id: str, action_name: str) -> torch.Tensor:
        try:
            return self._rewards[(problem_id, action_name)]
        except KeyError:
            raise KeyError(
                f"offline replay has no outcome for problem {problem_id!r} under action {action_name!r}"
            ) from None

    def num_samples(self, problem_id: str, action_name: str) -> int:
        return len(self._cell(problem_id, action_name))

    def mean_reward(self, problem_id: str, action_name: str) -> float:
        return float(self._cell(problem_id, action_name).mean())

    def sample_rewards(
        self, problem_id: str, action_name: str, count: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``count`` rewards (float32 ``[count]``) drawn from the stored samples of the cell."""
        stored = self._cell(problem_id, action_name)
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if count <= len(stored):
            index = torch.randperm(len(stored), generator=generator)[:count]
        else:
            index = torch.randint(len(stored), (count,), generator=generator)
        return stored[index]

    def sample_batch(
        self, problem_ids: Sequence[str], action_names: Sequence[str], generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """One reward per (problem, action) pair, float32 ``[B]``, each an independent uniform draw."""
        if len(problem_ids) != len(action_names):
            raise ValueError("problem_ids and action_names need one entry per row")
        return torch.stack([self.sample_rewards(p, a, 1, generator)[0] for p, a in zip(problem_ids, action_names)])


# ============================================================================ CLI


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


def _best_of(pool: Sequence[DecodingAction], selection: Selection, meta: dict) -> BestStatic:
    """The selection's Best; without per-sample outcomes, pass@1 alone from the mean rewards."""
    if selection.best is not None:
        return selection.best
    return best_static({1: selection.mean_reward}, [a.name for a in pool], samples=int(meta.get("samples", 1)),
                       problems=int(meta.get("problems", 1)))


def write_outputs(out: Path, pool: Sequence[DecodingAction], selection: Selection, meta: dict) -> str:
    """Write ``actions.json``, ``selection.md`` and ``selection.png``; return the markdown.

    ``actions.json`` holds the selected set, ``best_single`` (the Best strategy at the smallest k,
    pass@1) and ``best_per_k`` (``BestStatic.to_dict()`` plus ``actions``: the chosen actions as
    dicts), the coverage curve over the whole pool and its saturation point."""
    best_static_ = _best_of(pool, selection, meta)
    by_name = {a.name: a for a in pool}
    best = [a.name for a in pool].index(best_static_.name_for(best_static_.k_values[0]))
    best_per_k = {**best_static_.to_dict(),
                  "actions": {n: by_name[n].to_dict() for n in dict.fromkeys(best_static_.to_dict()["best"].values())}}
    write_json(
        out / "actions.json",
        {
            "actions": [pool[j].to_dict() for j in selection.order],
            "names": [pool[j].name for j in selection.order],
            "method": "greedy-coverage",
            "coverage": selection.coverage,
            "pool": len(pool),
            "task": meta["task"],
            "best_single": pool[best].to_dict(),
            "best_single_name": pool[best].name,
            "best_single_mean_reward": selection.mean_reward[best],
            "top_k_by_mean": {
                "names": [pool[j].name for j in selection.top_k_order],
                "coverage": selection.top_k_coverage,
            },
            "pool_coverage": selection.pool_coverage,
            "coverage_curve": {"names": [pool[j].name for j in selection.full_order],
                               "coverage": selection.full_coverage},
            "saturation": selection.saturation,
            "best_per_k": best_per_k,
            "selection_data": meta,
        },
    )
    markdown = selection_markdown(pool, selection, meta, best_static_)
    write_text(out / "selection.md", markdown)
    plot_selection(out / "selection.png", selection, meta)
    return markdown


def selection_markdown(pool: Sequence[DecodingAction], sel: Selection, meta: dict,
                       best: BestStatic | None = None) -> str:
    lines = [
        f"# Action selection: {meta['task']} ({meta['split']})",
        "",
        f"{meta['problems']} problems x {len(pool)} candidate actions x {meta['samples']} samples, "
        f"token budget {meta['token_budget']}, seed {meta['seed']}. R[x, s] = mean reward over the samples; "
        "F(S) = mean over problems of max over s in S of R[x, s] (best-of-S accuracy).",
        "",
        "| K | greedy F | top-K F | action added (greedy) | its mean reward |",
        "|---:|---:|---:|---|---:|",
    ]
    for i, j in enumerate(sel.order):
        lines.append(
            f"| {i + 1} | {sel.coverage[i]:.3f} | {sel.top_k_coverage[i]:.3f} | `{pool[j].name}` "
            f"| {sel.mean_reward[j]:.3f} |"
        )
    best = best or _best_of(pool, sel, meta)
    stalled = [i + 1 for i in range(1, len(sel.order)) if sel.coverage[i] <= sel.coverage[i - 1] + TIE_TOLERANCE]
    if sel.pool_coverage == 0:
        lines += [
            "",
            "**No candidate solved any problem**: the selection is arbitrary (pool order). "
            "Raise the token budget, the samples or the number of problems.",
        ]
    elif stalled:
        lines += [
            "",
            f"At K = {', '.join(map(str, stalled))} no candidate added coverage; "
            "those picks follow pool order (ties go to the lowest index).",
        ]
    lines += [
        "",
        f"Whole pool ({len(pool)} actions): F = {sel.pool_coverage:.3f}; " + saturation_text(sel),
        "",
        *best_lines(best),
        "",
    ]
    return "\n".join(lines)


def saturation_text(sel: Selection) -> str:
    """One sentence: where greedy coverage over the whole pool saturates."""
    if sel.pool_coverage <= 0:
        return "no candidate solved any problem, so the coverage curve is flat at 0."
    s = sel.saturation
    after = (f"from K = {s + 1} on, no candidate adds coverage" if s < len(sel.full_order)
             else "it takes every candidate")
    return f"greedy coverage reaches it at K = {s} of {len(sel.full_order)}: {after}."


def best_lines(best: BestStatic) -> list[str]:
    """Markdown: the Best static strategy at each pass@k with its validation score (and greedy's)."""
    greedy = GREEDY.name if GREEDY.name in best.names else None
    lines = [
        f"Best static strategy per metric (every candidate, greedy included; {best.problems} validation problems, "
        f"{best.samples} samples per cell):",
        "",
        "| metric | Best | its validation pass@k | greedy's |",
        "|---|---|---:|---:|",
    ]
    for k in best.k_values:
        mark = " (extrapolated)" if best.extrapolated(k) else ""
        greedy_score = f"{best.score_for(k, greedy):.3f}" if greedy else "–"
        lines.append(f"| pass@{k}{mark} | `{best.name_for(k)}` | {best.score_for(k):.3f} | {greedy_score} |")
    if any(best.extrapolated(k) for k in best.k_values):
        lines += ["", f"pass@k above {best.samples} samples is extrapolated as 1 - (1 - c/n)^k, never below the "
                  "measured pass@n: exact for greedy, biased low for a sampler."]
    return lines


def plot_selection(path: Path, sel: Selection, meta: dict) -> None:
    """Best-of-K accuracy vs K for greedy coverage and top-K by mean (the appendix's figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = list(range(1, len(sel.order) + 1))
    full = list(range(1, len(sel.full_order) + 1))
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(full, sel.full_coverage, "-", color="C0", alpha=0.35, label="greedy coverage, whole pool")
    ax.plot(ks, sel.coverage, "o-", color="C0", label="greedy coverage (ours)")
    ax.plot(ks, sel.top_k_coverage, "s--", color="C1", label="top-K by mean reward")
    ax.axhline(sel.pool_coverage, color="gray", linestyle=":", label="whole pool")
    if sel.saturation:
        ax.axvline(sel.saturation, color="C2", linestyle=":", label=f"saturates at K = {sel.saturation}")
    ax.set_xlabel("number of selected actions K")
    ax.set_ylabel("best-of-K accuracy F(S)")
    ax.set_title(f"Action selection on {meta['task']} ({meta['split']}, {meta['problems']} problems)")
    shown = min(len(full), max(len(ks), sel.saturation) + 2)  # the curve is flat after saturation
    ax.set_xlim(0.5, shown + 0.5)
    if shown <= 24:
        ax.set_xticks(range(1, shown + 1))
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
