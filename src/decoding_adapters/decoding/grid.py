"""The decoded grid: problem x action x sample, the one place that says which rows a stored table
decodes, with which seed each row is sampled, which rows are still missing, and how a table on disk
is written, read back and resumed.

Three tables are views of this grid: the outcome table of a pool evaluation
(``selection.outcomes``: a reward and a length per sample), the draft-gated adapter's both-arms
table (``training.draft``: a record per problem) and the sample table the fixed rules and the attempt
policy read (``evaluation.sample_table``: arrays per chunk of problems). They share:

- **Rows** (:meth:`Grid.rows`): problem-major, then action, then sample. A greedy action is
  deterministic, so where the grid says ``greedy_once`` it is decoded once and its one row fills
  every sample slot it stands for.
- **Seeds** (:meth:`Grid.seeds`): row ``(x, s, i)`` is decoded with ``row_seed(seed, x.id, s.name, i,
  *seed_tag)``, so a sample does not depend on the pool's order, on the other actions, on the
  chunking or on a resume. The both-arms and sample tables share the tag ``"draft-table"``
  (:data:`SAMPLE_SEED_TAG`), so the same settings give the same samples in both.
- **Resume**: a table refuses a rerun under other settings (:func:`refuse_other_settings`) and
  decodes only what is missing, chunk by chunk (:func:`fill_chunks`), each chunk on disk before the
  next starts.
- **Storage**, in one of two layouts, both readable from the tables committed under ``docs/``:
  :class:`JsonlTable` (a header line, then one JSON record per line, appended and fsync'ed per chunk;
  a torn last line is dropped) and :class:`ChunkDirectory` (``header.json``, ``plan.json`` and one
  ``chunk-XXXXX.npz`` + ``chunk-XXXXX.json`` per chunk, each written atomically; a damaged chunk is
  refused in one line naming its file).
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..core.files import atomic_write, write_json
from .actions import ActionSet, DecodingAction
from .loop import DecodeResult, decode, row_seed
from .rollouts import answer_stops

log = logging.getLogger(__name__)

__all__ = [
    "SAMPLE_SEED_TAG",
    "GridRow",
    "Grid",
    "group_chunks",
    "decode_rows",
    "fill_chunks",
    "refuse_other_settings",
    "header_differences",
    "JsonlTable",
    "ChunkDirectory",
]

SAMPLE_SEED_TAG = ("draft-table",)
"""The seed tag of the both-arms and the sample tables' rows (the outcome table's rows have none)."""


# ---- rows and seeds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GridRow:
    """One decode of the grid."""

    problem: int
    """Index into the problems being decoded."""
    action: int
    """Index into the grid's actions."""
    sample: int
    """The sample index that names the row's seed."""
    slots: tuple[int, ...]
    """The sample indices the row's outcome is stored under (every missing one for a greedy action
    decoded once; otherwise just ``sample``)."""


@dataclass(frozen=True)
class Grid:
    """The rows and seeds of a (problem x action x sample) table."""

    actions: tuple[DecodingAction, ...]
    samples: int
    """Sample slots per (problem, action)."""
    seed: int
    seed_tag: tuple[str, ...] = ()
    """Keys appended to every row's seed (:data:`SAMPLE_SEED_TAG` for the both-arms and sample tables)."""
    greedy_once: bool = True
    """A greedy action is decoded once and fills all of its slots (False: one row per slot)."""

    def __post_init__(self) -> None:
        if self.samples < 1 or not self.actions:
            raise ValueError(f"a decoded grid needs samples >= 1 and at least one action, got {self.samples} "
                             f"and {len(self.actions)}")

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.actions]

    def rows(self, problems: int, stored: Callable[[int, int, int], bool] | None = None) -> list[GridRow]:
        """The rows still to decode for ``problems`` problems, problem-major, then action, then sample;
        ``stored(problem, action, sample)`` says which slots a table already holds (default: none)."""
        out: list[GridRow] = []
        for p in range(problems):
            for a, action in enumerate(self.actions):
                missing = tuple(s for s in range(self.samples) if stored is None or not stored(p, a, s))
                if missing and action.is_greedy and self.greedy_once:
                    out.append(GridRow(p, a, missing[0], missing))
                else:
                    out.extend(GridRow(p, a, s, (s,)) for s in missing)
        return out

    def seeds(self, problem_ids: Sequence[str], rows: Sequence[GridRow]) -> list[int]:
        """One seed per row: ``row_seed(seed, problem id, action name, sample, *seed_tag)``."""
        return [row_seed(self.seed, problem_ids[r.problem], self.actions[r.action].name, r.sample, *self.seed_tag)
                for r in rows]


def group_chunks(items: Sequence, limit: int, weight: Callable[[object], int] = lambda item: 1) -> list[list]:
    """Consecutive ``items`` (whole problems) grouped into chunks of total ``weight`` at most
    ``limit`` (one item heavier than ``limit`` is a chunk of its own): the rows of a chunk share
    one decode, and each chunk is on disk before the next starts."""
    chunks, current, total = [], [], 0
    for item in items:
        if current and total + weight(item) > limit:
            chunks.append(current)
            current, total = [], 0
        current.append(item)
        total += weight(item)
    return chunks + ([current] if current else [])


def decode_rows(lm, task, problems, prompts, grid: Grid, rows: Sequence[GridRow], *, token_budget: int,
                stop_at_answer: bool, record_features: bool = False) -> tuple[DecodeResult, list[float]]:
    """Decode ``rows`` of ``problems`` (``prompts[i]`` the encoded prompt of ``problems[i]``, shared
    by its rows) in one batch with the grid's seeds, each row ended at its first complete answer
    when ``stop_at_answer``: the decode result (one row per grid row) and each row's reward."""
    result = decode(lm, prompts, ActionSet(list(grid.actions)), prompt_of_row=[r.problem for r in rows],
                    row_actions=[r.action for r in rows], token_budget=token_budget,
                    record_features=record_features, row_seeds=grid.seeds([p.id for p in problems], rows),
                    stop_checks=answer_stops(task, problems, [r.problem for r in rows], stop_at_answer))
    return result, task.reward_batch([problems[r.problem] for r in rows], result.texts)


def fill_chunks(chunks: Sequence, decode: Callable, store: Callable, on_chunk=None,
                size: Callable[[object], int] = lambda chunk: 1, engine=None) -> None:
    """The one resume loop: ``store(decode(chunk))`` for each chunk of what is missing, so a kill
    loses at most the chunk being decoded; after each chunk is on disk, ``on_chunk(done, total)``
    counts chunks, or problems where ``size`` gives a chunk's problem count. With an ``engine``
    (``decoding.table_engines``), ``decode(lm, task, chunk)`` runs where the engine holds the LM,
    several chunks at once, and each is stored as it finishes (a kill loses the chunks in flight)."""
    total, done = sum(size(c) for c in chunks), 0
    results = engine.map(decode, chunks) if engine is not None else ((c, decode(c)) for c in chunks)
    for chunk, result in results:
        store(result)
        done += size(chunk)
        if on_chunk is not None:
            on_chunk(done, total)


# ---- headers ----------------------------------------------------------------------------------------


def header_differences(stored: dict, now: dict, keys=None) -> str:
    """``"key: stored X vs now Y, ..."`` for the ``keys`` (default: all) on which two headers differ."""
    keys = sorted(set(stored) | set(now)) if keys is None else list(keys)
    differ = [k for k in keys if stored.get(k) != now.get(k)]

    def show(value) -> str:
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."

    return ", ".join(f"{k}: stored {show(stored.get(k))} vs now {show(now.get(k))}" for k in differ)


def refuse_other_settings(path: Path, stored: dict, now: dict, keys=None, hint: str = "") -> None:
    """A one-line ValueError when a stored table's header differs from this run's (its rows would
    not mix with the new ones)."""
    diff = header_differences(stored, json.loads(json.dumps(now)), keys)
    if diff:
        raise ValueError(f"{path} was decoded under other settings ({diff}){hint}")


# ---- a table of JSON lines ----------------------------------------------------------------------------


def _complete_lines(path: Path) -> tuple[list[str], int]:
    """Non-blank complete lines of ``path`` and the byte length of that complete part (a last line
    without a newline is torn: written by a run killed mid-write)."""
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    lines = [ln for ln in data[:end].decode("utf-8", errors="replace").split("\n") if ln.strip()]
    return lines, end


class JsonlTable:
    """A table file of JSON lines: ``{"header": {...}}``, then one record per line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file = None

    def read(self) -> tuple[dict | None, list[dict]]:
        """The header (None when the file has none) and the records. A torn last line (a kill
        mid-write) is dropped; an unreadable line elsewhere is skipped with a warning (its rows are
        decoded again on resume)."""
        header, records = None, []
        lines, _ = _complete_lines(self.path)
        for number, line in enumerate(lines, start=1):
            try:
                row = json.loads(line)
            except ValueError:
                log.warning("%s:%d: skipping an unreadable line", self.path, number)
                continue
            if isinstance(row, dict) and "header" in row:
                header = row["header"]
            elif isinstance(row, dict):
                records.append(row)
            else:
                log.warning("%s:%d: skipping a line that is not a record", self.path, number)
        return header, records

    def open(self, header: dict) -> None:
        """Open for appending: drop a torn last line, write ``header`` first if the file has no line."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _, complete = _complete_lines(self.path)
        self._file = open(self.path, "ab")
        self._file.truncate(complete)
        self._file.seek(complete)
        if complete == 0:
            self.append([{"header": header}])

    def append(self, records: Sequence[dict]) -> None:
        """Append records, flushed and fsync'ed: on disk before the next chunk starts."""
        self._file.write("".join(json.dumps(r) + "\n" for r in records).encode())
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


# ---- a directory of chunks ------------------------------------------------------------------------------


class ChunkDirectory:
    """``header.json``, ``plan.json`` (the problem ids the table was asked for, so a killed table
    knows it is unfinished) and per chunk ``chunk-XXXXX.npz`` (arrays) then ``chunk-XXXXX.json``
    (problem ids and strings), each written atomically: a chunk counts once its JSON is there."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def has_header(self) -> bool:
        return (self.path / "header.json").is_file()

    def read_header(self) -> dict:
        try:
            return json.loads((self.path / "header.json").read_text())
        except ValueError as err:
            raise ValueError(f"{self.path / 'header.json'}: not a readable header ({err})") from None

    def open(self, header: dict, problem_ids: Sequence[str], hint: str = "") -> None:
        """Write ``header`` (refusing a table decoded under another) and the plan ``problem_ids``."""
        if self.has_header():
            refuse_other_settings(self.path, self.read_header(), header, hint=hint)
        else:
            write_json(self.path / "header.json", header)
        write_json(self.path / "plan.json", {"problems": list(problem_ids)})

    def planned(self) -> list[str] | None:
        """The problem ids the last build asked for (None: a table written before plans were kept)."""
        plan = self.path / "plan.json"
        return json.loads(plan.read_text())["problems"] if plan.is_file() else None

    def chunk_indices(self) -> list[int]:
        # a chunk counts once both of its files are there (each is written atomically, the .json last)
        return sorted(int(f.stem.split("-")[1]) for f in self.path.glob("chunk-*.json")
                      if f.with_suffix(".npz").is_file())

    def stored_ids(self) -> list[str]:
        return [pid for i in self.chunk_indices() for pid in self.read_meta(i)["problems"]]

    def unfinished(self) -> bool:
        """The plan holds problems no chunk holds yet (a table written without a plan: False)."""
        planned = self.planned()
        return planned is not None and bool(set(planned) - set(self.stored_ids()))

    def clear(self) -> None:
        for old in self.path.glob("chunk-*"):
            old.unlink()
        (self.path / "plan.json").unlink(missing_ok=True)

    def write_chunk(self, index: int, arrays: dict[str, np.ndarray], meta: dict) -> None:
        def write(tmp: Path) -> None:
            with tmp.open("wb") as f:
                np.savez_compressed(f, **arrays)

        atomic_write(self.path / f"chunk-{index:05d}.npz", write)
        write_json(self.path / f"chunk-{index:05d}.json", meta)

    def read_meta(self, index: int) -> dict:
        file = self.path / f"chunk-{index:05d}.json"
        try:
            meta = json.loads(file.read_text())
        except ValueError as err:
            raise ValueError(f"{file}: damaged ({err}); delete it and its .npz to decode its problems again") from None
        if not isinstance(meta, dict) or not isinstance(meta.get("problems"), list):
            raise ValueError(f"{file}: damaged (no list of problems); delete it and its .npz to decode them again")
        return meta

    def read_arrays(self, index: int) -> dict[str, np.ndarray]:
        """The chunk's arrays; a file that is not a complete npz (a truncated copy) is one line."""
        file = self.path / f"chunk-{index:05d}.npz"
        try:
            with np.load(file, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"{file}: damaged ({reason}); delete it and its .json to decode its problems "
                             "again") from None
