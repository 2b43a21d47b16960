"""The outcome table of a pool evaluation: a reward and a length per (problem, action, sample) of
the decoded grid (``decoding.grid``), filled by :func:`evaluate_pool` and read by the coverage
selection (``selection.coverage``), the Best static choice (``selection.best``), offline replay
(``selection.replay``) and the draft-gated adapter's both-arms tables (``training.draft``).

:func:`evaluate_pool` fills an :class:`OutcomeTable` through the rollout interface, one
``RolloutRequest`` per chunk of problems so that all actions x samples of a problem share its
prompt's prefill. The table lives in a JSONL file (``decoding.grid.JsonlTable``), appended and
fsync'ed per chunk: a killed run continues where it stopped and never recomputes a stored outcome (a
torn last line is dropped).

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

Seeds: the grid's (``decoding.grid.Grid``, no tag): sample ``i`` of action ``s`` on problem ``x`` is
decoded with ``row_seed(seed, x.id, s.name, i)``, so an outcome does not depend on the pool's order,
on which other actions are in the pool, or on how the run was chunked or resumed. Greedy actions are
deterministic: one decode is stored for all their samples.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..decoding.actions import ActionSet, DecodingAction
from ..decoding.grid import Grid, GridRow, JsonlTable, fill_chunks, group_chunks, header_differences
from ..decoding.protocol import stored_stop
from ..decoding.rollouts import HFRollouts, RolloutRequest, Rollouts, answer_stops, encode_problems
from ..tasks.base import problems_digest

log = logging.getLogger(__name__)

__all__ = [
    "TABLE_FORMAT",
    "TABLE_VERSION",
    "Outcome",
    "OutcomeTable",
    "evaluate_pool",
    "table_header",
    "check_table",
    "check_replay_header",
]

TABLE_FORMAT = "decoding-adapters/outcomes"
TABLE_VERSION = 2

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
        header, records = JsonlTable(path).read()
        table = cls(header, path)
        for record in records:
            try:
                table.add_record(record)
            except (ValueError, KeyError, TypeError):
                log.warning("%s: skipping an unreadable record", path)
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
                 stop_at_answer: bool, data: dict | None = None) -> dict:
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
                        cot_ratio: float, stop_at_answer: bool) -> None:
    """Refuse to replay a table whose outcomes were decoded under other settings than the
    trainer's (task, model, data, prompts, token budget, seed, CoT ratio, the stop at the first
    answer): its rewards would describe another experiment. One-line ValueError naming the fields
    that differ."""
    header, path = table.header, table.path
    if stored_stop(header) != bool(stop_at_answer):
        raise ValueError(f"{path} was decoded with stop_at_answer={stored_stop(header)}, this "
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


# ---- pool evaluation --------------------------------------------------------------------------------

Pending = tuple[int, list[GridRow]]
"""A problem's index and its rows still to decode."""


def _pending(table: OutcomeTable, problems, grid: Grid) -> list[Pending]:
    """The decodes still missing, grouped by problem; a greedy action decodes once for all samples."""
    names = grid.names
    rows = grid.rows(len(problems), lambda p, a, s: table.has(problems[p].id, names[a], s))
    by_problem: dict[int, list[GridRow]] = {}
    for row in rows:
        by_problem.setdefault(row.problem, []).append(row)
    return list(by_problem.items())


def _chunk_request(chunk: list[Pending], prompts, problems, grid: Grid, token_budget: int, share_prefill: bool,
                   task, stop_at_answer: bool) -> tuple[RolloutRequest, list[GridRow]]:
    """One ``RolloutRequest`` for a chunk and its rows; with ``stop_at_answer`` every row ends at its
    first complete answer (``task.answer_complete``)."""
    rows = [row for _, rows in chunk for row in rows]
    if share_prefill:  # one prompt per problem, fanned out to all of its rows
        local = {pi: i for i, (pi, _) in enumerate(chunk)}
        request_prompts, prompt_of_row = [prompts[pi] for pi, _ in chunk], [local[r.problem] for r in rows]
    else:  # a private copy of the prompt per row: nothing is shared (for measuring the saving)
        request_prompts, prompt_of_row = [prompts[r.problem] for r in rows], list(range(len(rows)))
    seeds = grid.seeds([p.id for p in problems], rows)
    stops = answer_stops(task, problems, [r.problem for r in rows], stop_at_answer)
    request = RolloutRequest(request_prompts, prompt_of_row, seeds, token_budget, [r.action for r in rows], stops)
    return request, rows


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
    stop_at_answer: bool,
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
    grid = Grid(tuple(actions), samples, seed)
    pending = _pending(table, problems, grid)
    # whole problems up to ``batch_rows`` rows (one problem may exceed it: the rollouts then split its
    # rows, still prefilling the prompt once per sub-chunk)
    chunks = group_chunks(pending, batch_rows, weight=lambda item: len(item[1]))
    prompts, _ = encode_problems(lm, task, problems, cot_ratio, seed) if pending else ([], [])
    total = len(problems) * len(actions) * samples
    log.info("pool evaluation: %d problems x %d actions x %d samples, %d chunks to run (%d problems already done)",
             len(problems), len(actions), samples, len(chunks), len(problems) - len(pending))
    file = JsonlTable(path)
    file.open(header)
    left = sum(len(r.slots) for _, rows in pending for r in rows)
    try:
        with tqdm(total=total, initial=total - left, desc=progress if isinstance(progress, str) else "pool",
                  unit="sample", disable=not progress, dynamic_ncols=True) as bar:
            def store(records: list[dict]) -> None:
                file.append(records)
                for r in records:
                    table.add_record(r)
                bar.update(len(records))

            fill_chunks(chunks, lambda chunk: _run_chunk(rollouts, task, chunk, prompts, problems, grid, token_budget,
                                                         share_prefill, stop_at_answer), store, on_chunk)
    finally:
        file.close()
    return table.subset([p.id for p in problems], [a.name for a in actions], samples)


def _run_chunk(rollouts, task, chunk: list[Pending], prompts, problems, grid: Grid, token_budget: int,
               share_prefill: bool, stop_at_answer: bool) -> list[dict]:
    """Decode one chunk and return its table records (a greedy decode yields one per stored sample)."""
    request, rows = _chunk_request(chunk, prompts, problems, grid, token_budget, share_prefill, task, stop_at_answer)
    result = rollouts.run(request)
    rewards = task.reward_batch([problems[r.problem] for r in rows], result.texts)
    records = []
    for i, row in enumerate(rows):
        reward, length = float(rewards[i]), int(result.lengths[i])
        records += [{"problem": problems[row.problem].id, "action": grid.names[row.action], "sample": s,
                     "reward": reward, "length": length} for s in row.slots]
    return records
