"""The ``serve`` app's batching worker: one request's work (``Job``), its stream of text events
(``JobStream``, detokenized incrementally and held back at possible stop strings) and the
``BatchingWorker`` that owns the generator and merges queued jobs into batched decode calls on one
thread (the scheme is described in ``serving.server``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..policies.kinds import AdapterKind
from .decoders import decoder_for
from .schemas import ApiError, ServerLimits

log = logging.getLogger(__name__)

__all__ = ["Job", "JobStream", "IncrementalDetokenizer", "BatchingWorker"]


def served_mode(generator, deterministic_policy: bool | None) -> bool:
    """``deterministic_policy``, or (None) the adapter's stored policy_mode: what ``evaluate`` reports."""
    if deterministic_policy is not None:
        return bool(deterministic_policy)
    resolve = getattr(generator, "deterministic", None)
    return resolve(None) if callable(resolve) else True

# ---- jobs and the batching worker ------------------------------------------------------------------


@dataclass
class Job:
    """One request's generation work, as the worker sees it."""

    prompts: list  # str or chat (list of message dicts), one per prompt
    n: int
    max_tokens: int
    seed: int
    future: asyncio.Future | None = field(default=None, repr=False)
    stream: JobStream | None = field(default=None, repr=False)
    """Set for a streaming request: its rows' tokens go out as they are produced."""
    raw_text: bool = False
    """The prompts are text to continue (``/v1/completions``), not user messages for the chat template."""
    problem_ids: list[str] | None = None
    """Attempt adapters: the request's ``problem_id`` per prompt (``AdaptiveGenerator.generate``'s ``problem_ids``)."""
    queued_at: float = field(default_factory=time.monotonic, repr=False)
    started: bool = field(default=False, repr=False)
    """Taken by the worker into a batch (event loop)."""
    cancelled: bool = field(default=False, repr=False)
    """The client has gone: its rows stop at the next decode step (event loop sets, decode thread reads)."""

    @property
    def rows(self) -> int:
        return len(self.prompts) * self.n


class IncrementalDetokenizer:
    """The text of one completion as its tokens arrive, never cutting a character in two.

    A byte-level tokenizer spreads a multi-byte character (an accented letter, an emoji) over
    several tokens, and decoding a prefix of them ends in U+FFFD. As vLLM does, each new token is
    decoded within a short window of recent tokens (``ids[prefix:]`` against ``ids[prefix:read]``,
    which also keeps SentencePiece's leading spaces right) and its text is released only when it
    does not end in U+FFFD. ``finish`` releases whatever the whole completion decodes to beyond the
    text released so far, so the streamed text adds up to the non-streamed text."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = self.read = 0
        self.text = ""
        """Everything released so far."""

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token_id: int) -> str:
        """Add a token; the text it completes ("" while a character is still incomplete)."""
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix : self.read])
        after = self._decode(self.ids[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        delta = after[len(before) :]
        self.prefix, self.read = self.read, len(self.ids)
        self.text += delta
        return delta

    def finish(self) -> str:
        """The completion ended: the rest of its text (held bytes included, as the full decode has them)."""
        full = self._decode(self.ids)
        if not full.startswith(self.text):
            log.debug("streamed text %r is not a prefix of the full decode %r", self.text, full)
            return ""
        delta = full[len(self.text) :]
        self.text = full
        return delta


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    cuts = [text.find(s) for s in stops if s in text]
    return min(cuts) if cuts else None


def _held_back(text: str, stops: Sequence[str]) -> int:
    """Characters at the end of ``text`` that could be the start of a stop string (not sent yet)."""
    held = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), held, -1):
            if text.endswith(s[:k]):
                held = k
                break
    return held


@dataclass
class _RowStream:
    detokenizer: IncrementalDetokenizer
    sent: int = 0
    """Characters of ``detokenizer.text`` already sent."""
    tokens: int = 0
    actions: list[int] = field(default_factory=list)
    finished: bool = False
    info: dict | None = None
    """An attempt adapter's decision (``TokenEvent.adapter_info``), set with its last token."""


class JobStream:
    """A streaming request's share of a batched decode.

    On the decode thread, ``take`` turns its rows' new tokens into events — ``("text", choice,
    text)``, ``("finish", choice, reason)``, finally ``("done", usage, adapter_choices)`` — and
    posts each step's events to ``queue`` on the event loop, where the request's handler turns
    them into SSE chunks. Text that could begin a stop string is held back until it cannot; a row
    that meets one is finished (``stop``) and stopped in the decode. When the client goes away the
    handler sets ``cancelled`` and the row's next step stops them all, freeing their batch rows."""

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int, stop: str | list[str] | None,
                 echo: Sequence[str] | None, action_names: Sequence[str], kind: AdapterKind) -> None:
        self.loop, self.n, self.echo, self.action_names, self.kind = loop, n, echo, list(action_names), kind
        self.decoder = decoder_for(kind)  # what the response says of each completion
        self.stops = [stop] if isinstance(stop, str) else list(stop or [])
        self.queue: asyncio.Queue[list[tuple]] = asyncio.Queue()
        self.rows: list[_RowStream] = []
        self.prompt_tokens = 0
        self.cancelled = False
        """Set by the handler (event loop) when the client has gone away."""
        self.received = False
        """Decode thread: a token has arrived (a failed decode can no longer be retried unseen)."""
        self.done = False
        """Every row finished, or the stream failed: nothing more is posted."""

    def _post(self, events: list[tuple]) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, events)
        except RuntimeError:  # the loop is closed: the server is gone, and the client with it
            self.done = True

    # -- decode thread --
    def start(self, tokenizer, prompt_tokens: Sequence[int]) -> None:
        """The request is prepared (its response can start): one row per prompt x n."""
        self.rows = [_RowStream(IncrementalDetokenizer(tokenizer)) for _ in range(len(prompt_tokens) * self.n)]
        self.prompt_tokens = sum(prompt_tokens)
        events: list[tuple] = [("start",)]
        if self.echo is not None:
            events += [("text", i, self.echo[i // self.n]) for i in range(len(self.rows))]
        self._post(events)

    def take(self, tokens: list[tuple[int, Any]]) -> list[tuple[int, int]]:
        """``(prompt k of this job, TokenEvent)`` pairs of one step; returns the ``(k, j)`` rows to stop."""
        self.received = True
        if self.done:
            return []
        if self.cancelled:
            self.done = True
            return [(k, event.completion) for k, event in tokens]
        events, stop = [], []
        for k, event in tokens:
            index = k * self.n + event.completion
            row = self.rows[index]
            if row.finished:
                continue
            if getattr(event, "adapter_info", None) is not None:
                row.info = event.adapter_info
            if event.token_id < 0:  # a completion that will not be generated (a kept draft's others at n > 1)
                row.finished = True
                events.append(("finish", index, event.finish_reason or "stop"))
                continue
            row.tokens += 1
            row.actions.append(event.action)
            row.detokenizer.push(event.token_id)
            reason = event.finish_reason
            if reason is not None:
                row.detokenizer.finish()
            text = row.detokenizer.text
            cut = _first_stop(text, self.stops)
            if cut is not None:  # the text ends before the stop string, and so does the row
                text, safe = text[:cut], cut
                if reason is None:
                    stop.append((k, event.completion))
                reason = "stop"
            else:
                safe = len(text) if reason is not None else len(text) - _held_back(text, self.stops)
            if safe > row.sent:
                events.append(("text", index, text[row.sent : safe]))
                row.sent = safe
            if reason is not None:
                row.finished = True
                events.append(("finish", index, reason))
        if all(row.finished for row in self.rows):
            self.done = True
            events.append(("done", self._usage(), self._adapter_choices()))
        if events:
            self._post(events)
        return stop

    def _usage(self) -> dict:
        completion = sum(row.tokens for row in self.rows)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion}

    def _adapter_choices(self) -> list[dict]:
        out = []
        for index, row in enumerate(self.rows):
            names = [self.action_names[a] for a in row.actions]
            info: dict = {"index": index, "action_counts": dict(Counter(names).most_common())}
            info.update(self.decoder.stream_info([r.actions for r in self.rows], index, self.n, self.action_names,
                                                 row.info))
            out.append(info)
        return out

    # -- either thread --
    def fail(self, err: ApiError) -> None:
        """End the stream with an error (before it started: the handler answers it as an ordinary 4xx/5xx)."""
        if not self.done:
            self.done = True
            self._post([("error", err)])


class BatchingWorker:
    """Owns the generator: merges queued jobs into batched ``run`` calls on one thread."""

    def __init__(self, generator, limits: ServerLimits, deterministic_policy: bool | None = None):
        deterministic_policy = served_mode(generator, deterministic_policy)
        self.generator, self.limits, self.deterministic_policy = generator, limits, deterministic_policy
        self.stats = {"requests": 0, "batches": 0, "rows": 0, "max_rows_in_batch": 0, "failed_batches": 0,
                      "streams": 0, "disconnected_rows": 0, "abandoned_rows": 0, "queue_timeouts": 0}
        self._pending: deque[Job] = deque()
        self._running: list[Job] = []  # the batch on the decode thread
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def queued(self) -> int:
        """Requests waiting whose clients still want them."""
        self._drop_cancelled()
        return len(self._pending)

    def _drop_cancelled(self) -> None:
        """Forget waiting requests whose clients have gone, at once rather than when the worker
        reaches them (they would count against ``max_queue`` until then)."""
        if any(job.future is not None and job.future.done() for job in self._pending):
            self._pending = deque(job for job in self._pending if job.future is None or not job.future.done())

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        self._wakeup = asyncio.Event()
        # the only thread touching the model
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
        self._task = asyncio.create_task(self._loop(), name="batching-worker")

    async def _wait_for_work(self) -> None:
        """Until a request waits (then ``batch_wait_ms`` more, for company)."""
        self._wakeup.clear()
        await self._wakeup.wait()
        if self.limits.batch_wait_ms > 0:  # let requests that arrive together share a batch
            await asyncio.sleep(self.limits.batch_wait_ms / 1000)

    async def stop(self) -> None:
        unfinished = [*self._running, *self._pending]
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for job in unfinished:
            if job.stream is not None:
                job.stream.fail(ApiError(503, "server is shutting down", type="server_error"))
            elif not job.future.done():
                job.future.set_exception(ApiError(503, "server is shutting down", type="server_error"))
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, job: Job):
        """Queue ``job`` and wait for its list of ``Generation``s (or its error)."""
        self._enqueue(job)
        return await job.future

    async def submit_stream(self, job: Job) -> list[tuple]:
        """Queue a streaming ``job`` (``job.stream`` set) and wait until it is prepared: returns its
        first events; a request that fails before that raises its ``ApiError`` (an ordinary response)."""
        self._enqueue(job)
        self.stats["streams"] += 1
        first = await job.stream.queue.get()
        if first[0][0] == "error":
            raise first[0][1]
        return first

    def _enqueue(self, job: Job) -> None:
        if not self.alive:
            raise ApiError(503, "the generation worker is not running", type="server_error")
        self._drop_cancelled()
        if len(self._pending) >= self.limits.max_queue:
            raise ApiError(503, f"server busy: {len(self._pending)} requests are waiting; retry later",
                           type="server_error", code="queue_full")
        job.future = asyncio.get_running_loop().create_future()
        self._pending.append(job)
        self._wakeup.set()

    async def _loop(self) -> None:
        while True:
            if not self._pending:
                await self._wait_for_work()
            batch = self._take_batch()
            if not batch:
                continue
            self._running = batch
            try:
                outcomes = await asyncio.get_running_loop().run_in_executor(self._executor, self._run_batch, batch)
            except Exception as err:  # never let the loop die: fail this batch's requests only
                log.exception("batch failed")
                outcomes = [ApiError(500, f"generation failed: {err}", type="server_error")] * len(batch)
            finally:
                self._running = []
            for job, outcome in zip(batch, outcomes):
                self._deliver(job, outcome)

    @staticmethod
    def _deliver(job: Job, outcome) -> None:
        if job.stream is not None:  # its results went out while decoding; only a failure is left to say
            if isinstance(outcome, BaseException):
                job.stream.fail(outcome if isinstance(outcome, ApiError) else
                                ApiError(500, f"generation failed: {outcome}", type="server_error"))
            elif not job.stream.done:
                job.stream.fail(ApiError(500, "the decode ended before the stream's completions", type="server_error"))
            if not job.future.done():
                job.future.set_result(None)
            return
        if job.future.done():  # the client went away
            return
        if isinstance(outcome, BaseException):
            job.future.set_exception(outcome)
        else:
            job.future.set_result(outcome)

    def _take_batch(self, busy: int = 0) -> list[Job]:
        """The oldest waiting jobs whose rows fit in ``max_batch`` beside ``busy`` rows already
        decoding (with none busy, the first one always)."""
        batch, rows = [], busy
        while self._pending:
            job = self._pending[0]
            if job.future.done():  # cancelled while waiting
                self._pending.popleft()
                continue
            if (batch or busy) and rows + job.rows > self.limits.max_batch:
                break
            batch.append(self._pending.popleft())
            job.started = True
            rows += job.rows
        return batch

    def _run_batch(self, batch: list[Job]) -> list:
        """On the decode thread: per job a list of Generations or an exception."""
        outcomes: list[Any] = [None] * len(batch)
        prepared = {}
        for i, job in enumerate(batch):
            try:
                prepared[i] = self._prepare(job)
            except ApiError as err:
                outcomes[i] = err
        self._start_streams(batch, prepared, outcomes)
        merged = [p for i in prepared for p in prepared[i]]
        self._count(batch, prepared)
        try:
            gens = self._decode(merged, *self._watch(batch, prepared, list(prepared))) if merged else []
        except Exception:
            log.exception("merged decode of %d requests failed; retrying each alone", len(prepared))
            self.stats["failed_batches"] += 1
            return self._run_alone(batch, prepared, outcomes)
        start = 0
        for i in prepared:
            outcomes[i] = gens[start:start + len(prepared[i])]
            start += len(prepared[i])
        return outcomes

    def _prepare(self, job: Job) -> list:
        """On the decode thread: the job's prepared prompts; any failure is its own 400 (``ApiError``)."""
        try:
            raw = {"raw_text": True} if job.raw_text else {}
            ids = {"problem_ids": job.problem_ids} if job.problem_ids is not None else {}
            return self.generator.prepare(job.prompts, token_budget=job.max_tokens, parallel_budget=job.n,
                                          seed=job.seed, **raw, **ids)
        except ValueError as err:  # this request's own input: a 400 for it alone
            code = "context_length_exceeded" if "context" in str(err) else "invalid_value"
            param = "problem_id" if "problem_id" in str(err) else "prompt"
            raise ApiError(400, str(err), param=param, code=code) from None
        except Exception as err:  # anything else raised on this request's behalf: still its own 400
            log.warning("a request failed in preparation: %s: %s", type(err).__name__, err)
            raise ApiError(400, f"the request could not be prepared: {type(err).__name__}: {err}",
                           param="prompt", code="invalid_value") from None

    def _run_alone(self, batch, prepared: dict, outcomes: list) -> list:
        for i in prepared:
            stream = batch[i].stream
            if stream is not None and stream.received:  # its first tokens are out: a rerun would repeat them
                outcomes[i] = ApiError(500, "generation failed while streaming", type="server_error")
                continue
            try:
                outcomes[i] = self._decode(prepared[i], *self._watch(batch, prepared, [i]))
            except Exception as err:
                log.exception("request failed")
                outcomes[i] = ApiError(500, f"generation failed: {err.__class__.__name__}: {err}", type="server_error")
        return outcomes

    def _decode(self, prepared: list, on_tokens, gone) -> list:
        # what this adapter's decoder asks of a server run (a draft-gated adapter: n answers, its kept draft among them)
        extra = getattr(self.generator, "serve_options", {})
        if on_tokens is None:  # no stream in this batch: the plain call
            return self.generator.run(prepared, self.deterministic_policy, gone=gone, **extra)
        return self.generator.run(prepared, self.deterministic_policy, on_tokens=on_tokens, gone=gone, **extra)

    def _start_streams(self, batch: list[Job], prepared: dict, outcomes: list) -> None:
        """Streams whose request is prepared can open their response now; the others fail now."""
        for i, job in enumerate(batch):
            if job.stream is None:
                continue
            if i in prepared:
                job.stream.start(self.generator.lm.tokenizer, [len(p.prompt_ids) for p in prepared[i]])
            else:
                job.stream.fail(outcomes[i])

    def _stream_callback(self, batch: list[Job], prepared: dict, order: list[int], counted: set[int]):
        """``on_tokens`` for a decode of the jobs ``order`` (their prepared prompts concatenated in that
        order): hands each streaming job its rows' tokens, and returns the rows its stream stops.
        ``counted``: the jobs whose stopped rows are already in the stats."""
        streams = {i: batch[i].stream for i in order if batch[i].stream is not None}
        if not streams:
            return None
        owner, first = [], {}  # merged prompt position -> (job, its prompt k); job -> its first position
        for i in order:
            first[i] = len(owner)
            owner += [(i, k) for k in range(len(prepared[i]))]

        def on_tokens(events) -> list[tuple[int, int]]:
            by_job = defaultdict(list)
            for event in events:
                i, k = owner[event.prompt]
                if i in streams:
                    by_job[i].append((k, event))
            stop = []
            for i, tokens in by_job.items():
                stream = streams[i]
                rows = stream.take(tokens)
                if stream.cancelled and i not in counted:
                    counted.add(i)  # its rows once each (an attempt adapter reports a row's tokens in one call)
                    self.stats["disconnected_rows"] += len(set(rows))
                stop += [(first[i] + k, j) for k, j in rows]
            return stop

        return on_tokens

    def _watch(self, batch: list[Job], prepared: dict, order: list[int]):
        """``on_tokens`` and ``gone`` for a decode of the jobs ``order``: the streams' callback
        (``_stream_callback``), and the rows of every job whose client has gone stopped at the next
        step, streaming or not, so that abandoned requests free the decode (``gone`` tells an attempt
        adapter, whose attempts report no tokens until it has decided, the same)."""
        counted: set[int] = set()
        streamed = self._stream_callback(batch, prepared, order, counted)
        owner = [(i, k) for i in order for k in range(len(prepared[i]))]  # merged prompt -> (job, its prompt)

        def gone_positions(positions) -> list[int]:
            left = [q for q in positions if self._cancelled(batch[owner[q][0]])]
            for i in {owner[q][0] for q in left} - counted:
                counted.add(i)
                self.stats["disconnected_rows" if batch[i].stream is not None else "abandoned_rows"] += batch[i].rows
            return left

        def on_tokens(events) -> list[tuple[int, int]]:
            stop = list(streamed(events) or []) if streamed is not None else []
            gone = {(event.prompt, event.completion) for event in events
                    if batch[owner[event.prompt][0]].stream is None and batch[owner[event.prompt][0]].cancelled}
            self.stats["abandoned_rows"] += sum(owner[q][0] not in counted for q, _ in gone)  # rows, once each
            return stop + sorted(gone)

        return on_tokens, gone_positions

    @staticmethod
    def _cancelled(job: Job) -> bool:
        """The job's client has gone (streaming or not)."""
        return job.cancelled or (job.stream is not None and job.stream.cancelled)

    def _count(self, batch: list[Job], prepared: dict) -> None:
        rows = sum(batch[i].rows for i in prepared)
        s = self.stats
        s["requests"] += len(batch)
        s["batches"] += 1 if rows else 0
        s["rows"] += rows
        s["max_rows_in_batch"] = max(s["max_rows_in_batch"], rows)
