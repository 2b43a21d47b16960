"""Where a stored table's chunks are decoded: in this process, or on Ray actors that each hold the
frozen LM and the task.

A table builder (``evaluation.sample_table.build_sample_table``) cuts what is missing into chunks of
whole problems (``decoding.grid.group_chunks``) and hands them to an engine with a function
``decode(lm, task, chunk)``; the engine yields ``(chunk, result)`` as each chunk finishes, and the
builder writes it before it counts it (``decoding.grid.fill_chunks``). The chunks are cut the same
way whatever the engine, and each row draws its randomness from its own seed, so a chunk decoded on
any worker is the chunk decoded here: a table built on 2 workers equals one built on 1.

``LocalChunks``
    This process's LM and task, one chunk after another (the default); with ``rollouts``, the rows
    decoded by vLLM and their hidden states read by a teacher-forced pass of this process's LM.
``RayChunks`` (``--backend ray --workers N [--ray-address ...]``)
    N actors (``TableWorker``), each loading its own copy of the LM from the ``ModelSpec`` and
    rebuilding the task from a ``TaskSpec``; a free actor takes the next chunk. A kill loses at most
    the chunks in flight (one per worker): a rerun decodes only what no chunk on disk holds.

``TableBackend`` is the choice between the two (``hf`` or ``ray``, its workers and cluster), made
once: its ``open`` gives the engine, and a Ray engine starts its actors only when a table has
chunks to decode (a resumed run whose tables are whole loads no LM copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Literal, Protocol, Sequence

import torch

from ..lm.models import ModelSpec, load_frozen_lm
from .ray_rollouts import TaskSpec, ray_module, start_actors, stop_actors

__all__ = ["ChunkDecode", "ChunkEngine", "LocalChunks", "TableWorker", "RayChunks", "StartedOnUse", "TableBackend"]

ChunkDecode = Callable[[object, object, list], object]
"""``decode(lm, task, chunk)``: one chunk's result; a module-level function or a ``functools.partial``
of one, so that Ray can ship it to its actors."""


class ChunkEngine(Protocol):
    def map(self, decode: ChunkDecode, chunks: Sequence[list]) -> Iterator[tuple[list, object]]:
        """``(chunk, decode(lm, task, chunk))`` for every chunk, in the order they finish."""
        ...

    def close(self) -> None: ...


class LocalChunks:
    """This process's ``lm`` and ``task``, one chunk after another, in order. With ``rollouts`` (an
    engine that returns tokens only, ``VLLMRollouts``), each chunk's rows are decoded there:
    ``decode(lm, task, chunk, rollouts=rollouts)``, and ``lm`` gives their hidden states by a
    teacher-forced pass (``decoding.teacher_forced.decode_rows_elsewhere``)."""

    def __init__(self, lm, task, rollouts=None):
        self.lm, self.task, self.rollouts = lm, task, rollouts

    @property
    def rows_from(self) -> str | None:
        """Whose rows these are when not the decode loop's (another engine's random streams and
        kernels): the rollouts' class name, recorded in the table's header."""
        return None if self.rollouts is None else type(self.rollouts).__name__

    def map(self, decode: ChunkDecode, chunks: Sequence[list]) -> Iterator[tuple[list, object]]:
        extra = {} if self.rollouts is None else {"rollouts": self.rollouts}
        for chunk in chunks:
            yield chunk, decode(self.lm, self.task, chunk, **extra)

    def close(self) -> None:
        if self.rollouts is not None:
            self.rollouts.close()


class TableWorker:
    """One table actor: a frozen LM copy and the task. Wrapped with ``ray.remote`` by ``RayChunks``
    (the plain class stays importable and testable)."""

    def __init__(self, model_spec: ModelSpec, task_spec: TaskSpec, threads: int):
        torch.set_num_threads(max(1, threads))
        self.lm = load_frozen_lm(model_spec)
        self.task = task_spec.build()

    def ready(self) -> dict:
        return {"threads": torch.get_num_threads(), "device": str(self.lm.device), "model": self.lm.fingerprint()}

    def run(self, decode: ChunkDecode, chunk: list):
        return decode(self.lm, self.task, chunk)


class RayChunks:
    """Chunks decoded on ``workers`` Ray actors (module docstring). ``address``: an existing cluster
    (None starts a local one); ``num_cpus``, ``cpus_per_worker``, ``gpus_per_worker``: as ``RayRollouts``."""

    def __init__(self, model_spec: ModelSpec, task_spec: TaskSpec, *, workers: int = 2, address: str | None = None,
                 num_cpus: int | None = None, cpus_per_worker: float | None = None,
                 gpus_per_worker: float | None = None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.model_spec = model_spec
        self.actors, self._owns_ray, self.worker_info = start_actors(
            TableWorker, model_spec, workers, (task_spec,), address=address, num_cpus=num_cpus,
            cpus_per_worker=cpus_per_worker, gpus_per_worker=gpus_per_worker)

    @property
    def workers(self) -> int:
        return len(self.actors)

    def map(self, decode: ChunkDecode, chunks: Sequence[list]) -> Iterator[tuple[list, object]]:
        if not self.actors:
            raise RuntimeError("RayChunks.map after close()")
        ray = ray_module()
        queue, idle, pending = list(chunks), list(self.actors), {}
        decode_ref = ray.put(decode)  # shipped once, not once per chunk
        while queue or pending:
            while queue and idle:  # a free actor takes the next chunk
                actor, chunk = idle.pop(0), queue.pop(0)
                pending[actor.run.remote(decode_ref, chunk)] = (chunk, actor)
            [done], _ = ray.wait(list(pending), num_returns=1)
            chunk, actor = pending.pop(done)
            result = ray.get(done)  # a failed chunk raises here; close() ends the chunks still in flight
            idle.append(actor)
            yield chunk, result

    def close(self) -> None:
        """Kill the actors (and shut Ray down if this object started it)."""
        stop_actors(getattr(self, "actors", []), getattr(self, "_owns_ray", False))
        self.actors, self._owns_ray = [], False

    def __enter__(self) -> "RayChunks":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StartedOnUse:
    """An engine started by ``start()`` the first time it is given chunks to decode, and closed only
    if it was: a run whose tables are already whole starts nothing."""

    def __init__(self, start: Callable[[], ChunkEngine]):
        self._start, self.engine = start, None

    def map(self, decode: ChunkDecode, chunks: Sequence[list]) -> Iterator[tuple[list, object]]:
        if not chunks:
            return
        if self.engine is None:
            self.engine = self._start()
        yield from self.engine.map(decode, chunks)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None


@dataclass(frozen=True)
class TableBackend:
    """Where a run decodes its sample tables (module docstring): ``hf``, this process's LM; ``ray``,
    ``workers`` actors on a local Ray cluster or the one at ``ray_address``. The tables are the
    same bytes either way."""

    kind: Literal["hf", "ray"] = "hf"
    workers: int = 1
    """Ray actors (kind ray), each with its own copy of the LM"""
    ray_address: str | None = None
    """an existing Ray cluster to join (kind ray; None starts a local one)"""

    def __post_init__(self) -> None:
        if self.kind not in ("hf", "ray"):
            raise ValueError(f"a table backend is hf or ray, got {self.kind!r}")
        if self.workers < 1:
            raise ValueError(f"table workers must be >= 1, got {self.workers}")

    def open(self, lm, task, task_spec) -> ChunkEngine:
        """The engine: ``lm`` and ``task`` here, or Ray actors that load the LM from ``lm.spec`` and
        rebuild the task from ``task_spec`` (a ``TaskSpec``), started on first use. Close it when done."""
        if self.kind == "ray":
            return StartedOnUse(lambda: RayChunks(lm.spec, task_spec, workers=self.workers, address=self.ray_address))
        return LocalChunks(lm, task)
