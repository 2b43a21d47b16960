"""The ``serve`` app's worker for an attempt adapter: concurrent requests share attempt rounds.

An attempt adapter (``AdapterKind.attempts``) answers a prompt after a number of attempts its
decider chooses round by round. ``BatchingWorker`` would decode a batch of requests to the end of
their last attempt while later requests wait in the queue; ``RoundsWorker`` instead keeps one
``AttemptService`` (``serving.decoders``) going: before every round the requests waiting join it
(as many prompts as fit in ``max_batch`` beside the ones going), the round decodes one attempt of
every prompt going in one batched decode, and a request is answered as soon as its last prompt has
stopped. A prompt's attempts draw from its own seeds, so its answer is the same as ``generate``
gives it alone. A client that has gone stops its prompts before the next round or at the next
decode step (``gone``); a round that fails fails the requests in it (500) and the others go on."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .decoders import attempt_events
from .schemas import ApiError
from .worker import BatchingWorker, Job

log = logging.getLogger(__name__)

__all__ = ["RoundsWorker", "shares_rounds"]


def shares_rounds(generator) -> bool:
    """``generator`` decodes sequential attempts that requests can share (``attempt_service``)."""
    service = getattr(generator, "attempt_service", None)
    return callable(service) and service() is not None


class RoundsWorker(BatchingWorker):
    """``BatchingWorker`` whose decode is a sequence of shared attempt rounds (module docstring)."""

    def __init__(self, generator, limits, deterministic_policy: bool | None = None):
        super().__init__(generator, limits, deterministic_policy)
        self._service = generator.attempt_service()
        self._live: dict[int, tuple[Job, int]] = {}  # service key -> (job, its prompt k)
        self._answers: dict[int, list] = {}  # id(job) -> its Generations so far (None: not yet)
        self._counted: set[int] = set()  # id(job) of the gone jobs whose rows are in the stats

    async def _loop(self) -> None:
        while True:
            if not self._pending and not self._live:
                await self._wait_for_work()
            batch = self._take_batch(busy=self._service.live)  # rows going: one per chain of attempts
            jobs = {id(job): job for job, _ in self._live.values()}
            self._running = [*jobs.values(), *batch]
            try:
                finished = await asyncio.get_running_loop().run_in_executor(self._executor, self._round, batch)
            except Exception as err:  # never let the loop die: fail the requests of this round only
                log.exception("attempt round failed")
                self.stats["failed_batches"] += 1
                finished = self._fail_all(ApiError(500, f"generation failed: {err}", type="server_error"))
            self._running = list({id(job): job for job, _ in self._live.values()}.values())
            for job, outcome in finished:
                self._deliver(job, outcome)

    def _fail_all(self, err: ApiError) -> list[tuple[Job, Any]]:
        """Every request in the rounds fails with ``err``; the service starts afresh."""
        jobs = {id(job): job for job, _ in self._live.values()}
        jobs.update({id(job): job for job in self._running})
        self._live.clear()
        self._answers.clear()
        self._service = self.generator.attempt_service()
        return [(job, err) for job in jobs.values()]

    def _round(self, batch: list[Job]) -> list[tuple[Job, Any]]:
        """On the decode thread: the waiting ``batch`` joins, one round runs; the requests answered."""
        finished = self._join(batch)
        rows = self._service.live
        self.stats["batches"] += 1 if rows else 0
        self.stats["max_rows_in_batch"] = max(self.stats["max_rows_in_batch"], rows)
        if rows:
            for key, (gen, ids) in self._service.round(self._gone).items():
                job, k = self._live.pop(key)
                answers = self._answers[id(job)]
                answers[k] = gen
                if job.stream is not None:
                    stopped = job.stream.take([(k, event) for event in attempt_events(k, gen, ids)])
                    if job.stream.cancelled and id(job) not in self._counted:
                        self._counted.add(id(job))
                        self.stats["disconnected_rows"] += len(set(stopped))
                if all(a is not None for a in answers):
                    finished.append((job, self._answers.pop(id(job))))
                    self._counted.discard(id(job))
        return finished

    def _join(self, batch: list[Job]) -> list[tuple[Job, Any]]:
        """The ``batch``'s prompts join the service; the requests refused in preparation."""
        refused = []
        self.stats["requests"] += len(batch)
        for job in batch:
            try:
                prepared = self._prepare(job)
            except ApiError as err:
                if job.stream is not None:
                    job.stream.fail(err)
                refused.append((job, err))
                continue
            if job.stream is not None:
                job.stream.start(self.generator.lm.tokenizer, [len(p.prompt_ids) for p in prepared])
            self.stats["rows"] += sum(p.parallel_budget for p in prepared)
            self._answers[id(job)] = [None] * len(prepared)
            for k, p in enumerate(prepared):
                self._live[self._service.add(p)] = (job, k)
        return refused

    def _gone(self, keys) -> list[int]:
        """The service's ``gone``: the prompts whose client has left (their rows counted once per request)."""
        left = [key for key in keys if self._cancelled(self._live[key][0])]
        for key in left:
            job = self._live[key][0]
            if id(job) not in self._counted:
                self._counted.add(id(job))
                self.stats["disconnected_rows" if job.stream is not None else "abandoned_rows"] += job.rows
        return left
