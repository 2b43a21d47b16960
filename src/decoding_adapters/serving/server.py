"""``serve``: an OpenAI-compatible HTTP server whose decoding is chosen by a decoding adapter.

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (both also with
``"stream": true``), ``GET /v1/models``, ``GET /health``. Errors use OpenAI's format
``{"error": {"message", "type", "param", "code"}}``: malformed JSON, missing fields and wrong types
are 400 (``invalid_request_error``); a ``model`` other than the served one is 404
(``model_not_found``, as OpenAI answers); a request over the server's limits is 400 (``max_tokens``, ``n``)
or 413 (prompt or body too long, a chunked body judged while it streams in); a full queue is 503; an
unexpected failure is 500 for that request only — the server keeps running. Types are strict
(``max_tokens: "8"`` or ``true``, ``stream: "yes"`` are 400), and text that cannot be encoded (a lone
surrogate) is a 400.

How this departs from the OpenAI API:
- **The adapter chooses the decoding.** ``temperature``, ``top_p``, penalties and any other unknown
  sampling parameter are accepted and *ignored*; each response has an extra ``decoding_adapter``
  field with the action(s) taken per choice and the names of the ignored parameters.
- ``n`` is the parallel budget B (a sequence adapter sees it when choosing); ``max_tokens`` (or
  ``max_completion_tokens``) is the token budget b (default ``min(128, --max-tokens-limit)``).
- ``/v1/completions`` continues each prompt as raw text, as OpenAI's completions do ("The capital of
  France is" is completed, not answered as a chat); ``/v1/chat/completions`` applies the model's chat
  template, the form the adapters are trained on. Choice ``i * n + j`` is completion j of prompt i.
- ``seed`` makes a request reproducible; without one the server draws a seed and reports it.
- ``stop`` strings are applied to the finished text (it is cut at the first one; finish_reason
  ``stop``); a streamed row is also *stopped in the decode* where its text meets one, so its
  ``usage`` counts the tokens up to there (a non-streamed row is decoded to its end, then cut).
  ``logprobs`` are not supported (400).

Streaming (``"stream": true``) is token by token, OpenAI's Server-Sent Events: chat sends a role
chunk per choice, then ``delta.content`` chunks as tokens are decoded, then per choice a chunk with
an empty delta and its ``finish_reason`` (``stop`` or ``length``); completions send ``text`` chunks
and a last empty one with the ``finish_reason``. With ``stream_options.include_usage`` every chunk has
``"usage": null`` and a last chunk with no choices carries the usage. Then ``data: [DONE]``. The
``decoding_adapter`` field rides on the last chunk (per choice: action counts and the actions; a
sequence adapter's ``action_probs`` only in non-streamed responses). Text is detokenized
incrementally — bytes of an unfinished UTF-8 character and text that may begin a stop string are
held back until they are settled — so the chunks add up to the non-streamed text for the same seed.
A request is validated and tokenized before its stream opens, so its own errors are ordinary 4xx
responses; a failure after the first token is sent as an ``{"error": ...}`` event (the ``openai``
client raises it). A client that disconnects, streaming or not, has its rows stopped at the next
decode step (a queued one never starts); its batch-mates are unaffected. A request still queued
after ``max_queue_wait_s`` is refused (503 ``queue_timeout``) rather than served late. With an API
key, ``/v1/*`` and the API's description (``/docs``, ``/redoc``, ``/openapi.json``) need it, and
``/health`` without it says only whether the server is up. Batching is per decode call, not
continuous: a request that arrives while a batch decodes joins the next one, so its first token
waits for the running batch to end.

Batching: the model is not thread-safe, so one background asyncio task owns it. Handlers validate a
request (pydantic + limits) and queue it. The worker takes the oldest waiting request, waits
``batch_wait_ms`` for company, then merges waiting requests (in order, up to ``max_batch`` rows =
prompts x n) into **one** ``AdaptiveGenerator.run`` call on a single dedicated thread, so the event
loop keeps accepting requests while the model works; requests that arrive meanwhile form the next
batch. Every request keeps its own seeds, so its result does not depend on its batch-mates.
Tokenizing happens on the decode thread too; a request whose own preparation fails there, for any
reason (prompt plus max_tokens over the model's context, text the tokenizer refuses), gets a 400
without touching the others, and if a merged decode fails each request is retried alone, so one bad
request cannot fail its neighbours (a stream whose first tokens are already out ends with an error
event instead). Streams batch like any request: after every decode step the worker's ``on_tokens``
callback (on the decode thread) hands each streaming request its rows' new tokens (``JobStream``),
which posts text events to the request's handler on the event loop.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import time
import uuid
from collections import Counter, defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, AsyncIterator, Literal, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, Strict, StrictBool, StrictInt, StrictStr
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..policies.kinds import AdapterKind, adapter_kind
from .generator import DEFAULT_TOKEN_BUDGET

log = logging.getLogger(__name__)

__all__ = ["ServerLimits", "ApiError", "BatchingWorker", "create_app"]

DEFAULT_MAX_TOKENS = DEFAULT_TOKEN_BUDGET  # the same default as `generate`
SAMPLING_PARAMETERS = ("temperature", "top_p")  # declared (validated) but ignored: the adapter decides


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask for, and how requests are batched."""

    max_tokens_limit: int = 512
    """Largest ``max_tokens`` accepted (larger: 400); a request without one gets min(128, this), the
    default of ``generate`` too."""
    max_batch: int = 16
    """Most rows (prompts x n) merged into one decode call; also the most one request may ask for."""
    max_prompt_chars: int = 32_000
    """Most characters of prompt text per request (more: 413)."""
    max_queue: int = 256
    """Most requests waiting; more are refused with 503 instead of piling up."""
    batch_wait_ms: float = 2.0
    """How long the idle worker waits after a first request for others to batch with it."""
    max_queue_wait_s: float = 120.0
    """A request still waiting for the decode after this many seconds is refused (503
    ``queue_timeout``) rather than served late."""

    def __post_init__(self) -> None:
        for name in ("max_tokens_limit", "max_batch", "max_prompt_chars", "max_queue"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_wait_ms < 0:
            raise ValueError(f"batch_wait_ms must be >= 0, got {self.batch_wait_ms}")
        if not self.max_queue_wait_s > 0:  # NaN too
            raise ValueError(f"max_queue_wait_s must be > 0, got {self.max_queue_wait_s}")

    @property
    def default_max_tokens(self) -> int:
        return min(DEFAULT_MAX_TOKENS, self.max_tokens_limit)

    @property
    def max_body_bytes(self) -> int:
        """Request bodies larger than this are refused (413) before they are parsed."""
        return 4 * self.max_prompt_chars + 65_536


class ApiError(Exception):
    """An error answered to the client in OpenAI's format."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


# ---- request bodies ------------------------------------------------------------------------------


class StreamOptions(BaseModel):
    include_usage: StrictBool = False


Count = Annotated[StrictInt, Field(ge=1)]
"""A positive JSON integer: not a float, a string ("8") or a boolean (true)."""
Number = Annotated[float, Strict()]
"""A JSON number (an integer is accepted); not a string or a boolean."""


class _Common(BaseModel):
    """Fields shared by both endpoints. Unknown fields are accepted and reported as ignored.

    Types are strict: ``max_tokens: "8"``, ``max_tokens: true`` or ``stream: "yes"`` are 400s,
    not silently converted."""

    model_config = ConfigDict(extra="allow")

    model: StrictStr | None = None
    """Echoed back; any name is accepted (this server serves one adapter)."""
    max_tokens: Count | None = None
    n: Count = 1
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    seed: StrictInt | None = None
    stop: StrictStr | list[StrictStr] | None = None
    temperature: Annotated[Number, Field(ge=0, le=2)] | None = None
    top_p: Annotated[Number, Field(ge=0, le=1)] | None = None
    user: StrictStr | None = None

    def ignored_parameters(self) -> list[str]:
        return sorted([k for k in SAMPLING_PARAMETERS if getattr(self, k) is not None] + list(self.model_extra or {}))


class CompletionRequest(_Common):
    prompt: StrictStr | Annotated[list[StrictStr], Field(min_length=1)]
    echo: StrictBool = False
    logprobs: StrictInt | None = None


class ContentPart(BaseModel):
    type: StrictStr
    text: StrictStr | None = None


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | list[ContentPart] | None = None

    def as_dict(self) -> dict:
        content = self.content or ""
        if not isinstance(content, str):
            if any(part.type != "text" or part.text is None for part in content):
                raise ApiError(400, "only text content parts are supported", param="messages",
                               code="unsupported_content")
            content = "".join(part.text for part in content)
        return {"role": "system" if self.role == "developer" else self.role, "content": content}


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Count | None = None
    logprobs: StrictBool | None = None


def _reject_unencodable_text(value: Any, param: str) -> None:
    """A 400 for text that cannot be encoded as UTF-8 (a lone surrogate such as "\\ud800", which
    JSON escapes can carry): the tokenizer and the response encoder would fail on it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, f"{param}: text holds a lone surrogate (invalid Unicode)", param=param,
                           code="invalid_value") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _reject_unencodable_text(key, param)
            _reject_unencodable_text(item, param)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _reject_unencodable_text(item, param)


def _check_text(req: _Common) -> None:
    for name, value in req.model_dump().items():  # extra (ignored) fields included
        _reject_unencodable_text(value, name)


class BodySizeLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413, judged by its Content-Length
    when it has one, else while it streams in (chunked): the body is never read whole first, the
    rest of it is not read at all, and the app's own answer to the cut-off body is replaced."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    def _too_large(self, size: str) -> JSONResponse:
        return ApiError(413, f"request body of {size} bytes is over this server's limit of {self.max_bytes}",
                        code="request_too_large").response()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            await self._too_large(length.decode())(scope, receive, send)
            return
        received, exceeded = 0, False

        async def limited_receive():
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True  # stop here: the app sees a client that went away
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            if not exceeded:
                await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
        if exceeded:
            await self._too_large(f"more than {self.max_bytes}")(scope, receive, send)


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
            if self.kind.per_token:
                info["token_actions"] = row.actions
            else:  # one action per prompt; a draft's tokens carry output 0, re-decoded ones the chosen output
                info["action"] = names[0] if names else None
                if self.kind.keeps_draft:
                    siblings = self.rows[index - index % self.n: index - index % self.n + self.n]
                    info["draft_kept"] = all(not r.actions or r.actions[0] == 0 for r in siblings)
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
        deterministic_policy = _served_mode(generator, deterministic_policy)
        self.generator, self.limits, self.deterministic_policy = generator, limits, deterministic_policy
        self.stats = {"requests": 0, "batches": 0, "rows": 0, "max_rows_in_batch": 0, "failed_batches": 0,
                      "streams": 0, "disconnected_rows": 0, "abandoned_rows": 0, "queue_timeouts": 0}
        self._pending: deque[Job] = deque()
        self._running: list[Job] = []  # the batch on the decode thread
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def queued(self) -> int:
        return len(self._pending)

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        self._wakeup = asyncio.Event()
        # the only thread touching the model
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
        self._task = asyncio.create_task(self._loop(), name="batching-worker")

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
        if len(self._pending) >= self.limits.max_queue:
            raise ApiError(503, f"server busy: {len(self._pending)} requests are waiting; retry later",
                           type="server_error", code="queue_full")
        job.future = asyncio.get_running_loop().create_future()
        self._pending.append(job)
        self._wakeup.set()

    async def _loop(self) -> None:
        while True:
            if not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
                if self.limits.batch_wait_ms > 0:  # let requests that arrive together share a batch
                    await asyncio.sleep(self.limits.batch_wait_ms / 1000)
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

    def _take_batch(self) -> list[Job]:
        """The oldest waiting jobs whose rows fit in ``max_batch`` (the first one always)."""
        batch, rows = [], 0
        while self._pending:
            job = self._pending[0]
            if job.future.done():  # cancelled while waiting
                self._pending.popleft()
                continue
            if batch and rows + job.rows > self.limits.max_batch:
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
                raw = {"raw_text": True} if job.raw_text else {}
                prepared[i] = self.generator.prepare(job.prompts, token_budget=job.max_tokens, parallel_budget=job.n,
                                                     seed=job.seed, **raw)
            except ValueError as err:  # this request's own input: a 400 for it alone
                code = "context_length_exceeded" if "context" in str(err) else "invalid_value"
                outcomes[i] = ApiError(400, str(err), param="prompt", code=code)
            except Exception as err:  # anything else raised on this request's behalf: still its own 400
                log.warning("request %d of a batch failed in preparation: %s: %s", i, type(err).__name__, err)
                outcomes[i] = ApiError(400, f"the request could not be prepared: {type(err).__name__}: {err}",
                                       param="prompt", code="invalid_value")
        self._start_streams(batch, prepared, outcomes)
        merged = [p for i in prepared for p in prepared[i]]
        self._count(batch, prepared)
        try:
            gens = self._decode(merged, self._watch(batch, prepared, list(prepared))) if merged else []
        except Exception:
            log.exception("merged decode of %d requests failed; retrying each alone", len(prepared))
            self.stats["failed_batches"] += 1
            return self._run_alone(batch, prepared, outcomes)
        start = 0
        for i in prepared:
            outcomes[i] = gens[start:start + len(prepared[i])]
            start += len(prepared[i])
        return outcomes

    def _run_alone(self, batch, prepared: dict, outcomes: list) -> list:
        for i in prepared:
            stream = batch[i].stream
            if stream is not None and stream.received:  # its first tokens are out: a rerun would repeat them
                outcomes[i] = ApiError(500, "generation failed while streaming", type="server_error")
                continue
            try:
                outcomes[i] = self._decode(prepared[i], self._watch(batch, prepared, [i]))
            except Exception as err:
                log.exception("request failed")
                outcomes[i] = ApiError(500, f"generation failed: {err.__class__.__name__}: {err}", type="server_error")
        return outcomes

    def _decode(self, prepared: list, on_tokens) -> list:
        # a client that asks for n completions gets n, a draft-gated adapter's kept draft among them
        kind = getattr(self.generator, "adapter_kind", None)
        extra = {"all_answers": True} if kind is not None and kind.keeps_draft else {}
        if on_tokens is None:  # no stream in this batch: the plain call
            return self.generator.run(prepared, self.deterministic_policy, **extra)
        return self.generator.run(prepared, self.deterministic_policy, on_tokens=on_tokens, **extra)

    def _start_streams(self, batch: list[Job], prepared: dict, outcomes: list) -> None:
        """Streams whose request is prepared can open their response now; the others fail now."""
        for i, job in enumerate(batch):
            if job.stream is None:
                continue
            if i in prepared:
                job.stream.start(self.generator.lm.tokenizer, [len(p.prompt_ids) for p in prepared[i]])
            else:
                job.stream.fail(outcomes[i])

    def _stream_callback(self, batch: list[Job], prepared: dict, order: list[int]):
        """``on_tokens`` for a decode of the jobs ``order`` (their prepared prompts concatenated in that
        order): hands each streaming job its rows' tokens, and returns the rows its stream stops."""
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
                if stream.cancelled:
                    self.stats["disconnected_rows"] += len(rows)
                stop += [(first[i] + k, j) for k, j in rows]
            return stop

        return on_tokens

    def _watch(self, batch: list[Job], prepared: dict, order: list[int]):
        """``on_tokens`` for a decode of the jobs ``order``: the streams' callback
        (``_stream_callback``), and the rows of every job whose client has gone stopped at the next
        step, streaming or not, so that abandoned requests free the decode."""
        streamed = self._stream_callback(batch, prepared, order)
        owner = [(i, k) for i in order for k in range(len(prepared[i]))]  # merged prompt -> (job, its prompt)

        def on_tokens(events) -> list[tuple[int, int]]:
            stop = list(streamed(events) or []) if streamed is not None else []
            gone = [(event.prompt, event.completion) for event in events
                    if batch[owner[event.prompt][0]].stream is None and batch[owner[event.prompt][0]].cancelled]
            if gone:
                self.stats["abandoned_rows"] += len(gone)
            return stop + gone

        return on_tokens

    def _count(self, batch: list[Job], prepared: dict) -> None:
        rows = sum(batch[i].rows for i in prepared)
        s = self.stats
        s["requests"] += len(batch)
        s["batches"] += 1 if rows else 0
        s["rows"] += rows
        s["max_rows_in_batch"] = max(s["max_rows_in_batch"], rows)


# ---- request -> job -> response -----------------------------------------------------------------


def _check_limits(req: _Common, num_prompts: int, prompt_chars: int, limits: ServerLimits,
                  max_tokens: int | None) -> int:
    """The token budget of the request, after refusing what is over the limits."""
    if req.logprobs:
        raise ApiError(400, "logprobs are not supported by this server", param="logprobs", code="unsupported_parameter")
    max_tokens = limits.default_max_tokens if max_tokens is None else max_tokens
    if max_tokens > limits.max_tokens_limit:
        raise ApiError(400, f"max_tokens={max_tokens} is over this server's limit of {limits.max_tokens_limit}",
                       param="max_tokens", code="max_tokens_too_large")
    if num_prompts * req.n > limits.max_batch:
        raise ApiError(400, f"{num_prompts} prompt(s) x n={req.n} = {num_prompts * req.n} completions is over "
                            f"this server's limit of {limits.max_batch} per request",
                       param="n", code="too_many_completions")
    if prompt_chars > limits.max_prompt_chars:
        raise ApiError(413, f"the prompt has {prompt_chars} characters, "
                            f"over this server's limit of {limits.max_prompt_chars}",
                       param="prompt", code="prompt_too_long")
    stops = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    if len(stops) > 4 or any(not s for s in stops):
        raise ApiError(400, "stop takes at most 4 non-empty strings", param="stop", code="invalid_value")
    return max_tokens


def completion_job(req: CompletionRequest, limits: ServerLimits) -> Job:
    _check_text(req)
    prompts = [req.prompt] if isinstance(req.prompt, str) else list(req.prompt)
    max_tokens = _check_limits(req, len(prompts), sum(map(len, prompts)), limits, req.max_tokens)
    return Job(prompts, req.n, max_tokens, _seed(req), raw_text=True)


def chat_job(req: ChatCompletionRequest, limits: ServerLimits) -> Job:
    _check_text(req)
    messages = [m.as_dict() for m in req.messages]
    requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    max_tokens = _check_limits(req, 1, sum(len(m["content"]) for m in messages), limits, requested)
    return Job([messages], req.n, max_tokens, _seed(req))


def _seed(req: _Common) -> int:
    return req.seed if req.seed is not None else secrets.randbelow(2**31)


def _cut_at_stop(text: str, stop: str | list[str] | None) -> tuple[str, bool]:
    stops = [stop] if isinstance(stop, str) else (stop or [])
    cuts = [text.find(s) for s in stops if s in text]
    return (text[: min(cuts)], True) if cuts else (text, False)


@dataclass
class Choice:
    index: int
    text: str
    finish_reason: str
    adapter: dict


def _choices(gens, req: _Common, echo_prompts: Sequence[str] | None = None) -> list[Choice]:
    """Flatten per-prompt Generations into OpenAI choices (index ``i * n + j``)."""
    out = []
    for i, g in enumerate(gens):
        counts = g.action_counts()
        for j, raw in enumerate(g.completions):
            text, stopped = _cut_at_stop(raw, req.stop)
            if echo_prompts is not None:
                text = echo_prompts[i] + text
            info: dict = {"index": len(out), "action_counts": counts[j]}
            kind = adapter_kind(g.kind)
            if kind.per_token:
                info["token_actions"] = g.token_actions[j]
            else:
                info.update(action=g.action,
                            action_probs=dict(zip(g.action_names, [round(p, 6) for p in g.action_probs])))
                if kind.keeps_draft:
                    info.update(draft_kept=g.draft_kept, decodes=g.decodes, draft_tokens=g.draft_tokens)
            out.append(Choice(len(out), text, "stop" if stopped else g.finish_reasons[j], info))
    return out


def _adapter_field(generator, req: _Common, seed: int, choices: list[Choice], deterministic: bool) -> dict:
    return {"adapter": generator.name, "kind": generator.kind, "actions": generator.action_names, "seed": seed,
            "deterministic_policy": deterministic, "ignored_parameters": req.ignored_parameters(),
            "choices": [c.adapter for c in choices]}


def _usage(gens) -> dict:
    prompt = sum(g.prompt_tokens for g in gens)
    completion = sum(sum(g.completion_tokens) for g in gens)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion_body(meta: dict, choices: list[Choice], usage: dict, adapter: dict) -> dict:
    return {**meta, "object": "text_completion", "usage": usage, "decoding_adapter": adapter, "choices": [
        {"index": c.index, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None} for c in choices]}


def _chat_body(meta: dict, choices: list[Choice], usage: dict, adapter: dict) -> dict:
    return {**meta, "object": "chat.completion", "usage": usage, "decoding_adapter": adapter, "choices": [
        {"index": c.index, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason,
         "logprobs": None} for c in choices]}


def _stream_chunks(events: list[tuple], meta: dict, chat: bool, include_usage: bool, adapter: dict,
                   num_choices: int) -> tuple[list[dict], bool]:
    """OpenAI chunks for one step's events of a stream, and whether the stream is over.

    Chat: a role chunk per choice first, then ``delta.content`` chunks, then a chunk with an empty
    delta and the ``finish_reason``; completions: ``text`` chunks, then an empty text with the
    ``finish_reason``. With ``include_usage`` every chunk has ``"usage": null`` and a last chunk with
    no choices carries the usage. ``decoding_adapter`` rides on the last chunk."""
    base = {**meta, "object": "chat.completion.chunk" if chat else "text_completion"}
    if include_usage:
        base["usage"] = None

    def choice(index: int, content: str | None, finish_reason: str | None, role: bool = False) -> dict:
        if chat:
            delta = {"role": "assistant", "content": ""} if role else ({} if content is None else {"content": content})
            body = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        else:
            body = {"index": index, "text": content or "", "logprobs": None, "finish_reason": finish_reason}
        return {**base, "choices": [body]}

    chunks, over = [], False
    for event in events:
        kind = event[0]
        if kind == "start":
            chunks += [choice(i, None, None, role=True) for i in range(num_choices)] if chat else []
        elif kind == "text":
            chunks.append(choice(event[1], event[2], None))
        elif kind == "finish":
            chunks.append(choice(event[1], None, event[2]))
        elif kind == "done":
            over, (usage, choices) = True, event[1:]
            if include_usage:
                chunks.append({**base, "choices": [], "usage": usage})
            if chunks:
                chunks[-1]["decoding_adapter"] = {**adapter, "choices": choices}
        elif kind == "error":
            err: ApiError = event[1]
            chunks.append({"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}})
            over = True
    return chunks, over


async def _sse(first: list[tuple], stream: JobStream, job: Job, to_chunks) -> AsyncIterator[str]:
    """The SSE body of a stream: chunks as the decode thread posts events, then ``[DONE]``. Leaving
    early (the client went away: the response task is cancelled) marks the stream cancelled, so its
    rows stop at the next decode step, or never start when it was still queued."""
    try:
        events = first
        while True:
            chunks, over = to_chunks(events)
            for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n"
            if over:
                break
            events = await stream.queue.get()
        yield "data: [DONE]\n\n"
    finally:
        if not stream.done:
            stream.cancelled = True
        if job.future is not None and not job.future.done():
            job.future.cancel()


POLL_S = 0.25
"""How often a waiting request checks that its client is still there and its queue deadline."""


async def _while_wanted(work, job: Job, request: Request | None, limits: ServerLimits, stats: dict):
    """Await ``work`` (the job's submission) while its client is connected and, until the worker
    takes it, for at most ``limits.max_queue_wait_s``. A client that has gone cancels the job (a
    queued job never starts; a running one's rows stop at the next step); a job that waited too
    long is refused with 503 ``queue_timeout``."""
    task = asyncio.ensure_future(work)
    # the client's disconnect arrives as the next ASGI message once the body is read (polling
    # Request.is_disconnected does not see it through an HTTP middleware)
    gone = asyncio.ensure_future(_disconnected(request)) if request is not None else None
    try:
        while True:
            done, _ = await asyncio.wait({task} | ({gone} if gone is not None else set()), timeout=POLL_S,
                                         return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            if gone is not None and gone in done:
                job.cancelled = True
                raise ApiError(499, "the client closed the request", type="invalid_request_error",
                               code="client_closed_request")
            if not job.started and time.monotonic() - job.queued_at > limits.max_queue_wait_s:
                job.cancelled = True
                stats["queue_timeouts"] += 1
                raise ApiError(503, f"server busy: the request waited over {limits.max_queue_wait_s:g} s "
                                    "in the queue; retry later", type="server_error", code="queue_timeout")
    finally:
        if job.cancelled:
            if job.stream is not None:
                job.stream.cancelled = True
            if job.future is not None and not job.future.done():
                job.future.cancel()  # a queued job is skipped when the worker reaches it
        for pending in (task, gone):
            if pending is not None and not pending.done():
                pending.cancel()


async def _disconnected(request: Request) -> None:
    """Returns when the client of ``request`` (whose body has been read) disconnects."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _validation_message(err: RequestValidationError) -> tuple[str, str | None]:
    """One readable line from pydantic's errors, and the offending top-level parameter."""
    parts, param = [], None
    for e in err.errors():
        if e.get("type") == "json_invalid":
            return f"invalid JSON body: {e.get('ctx', {}).get('error', e.get('msg'))}", None
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        param = param or (loc[0] if loc else None)
        parts.append(f"{'.'.join(loc) or 'body'}: {e.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts), param


# ---- the app ---------------------------------------------------------------------------------------


def _served_mode(generator, deterministic_policy: bool | None) -> bool:
    """``deterministic_policy``, or (None) the adapter's stored policy_mode: what ``evaluate`` reports."""
    if deterministic_policy is not None:
        return bool(deterministic_policy)
    resolve = getattr(generator, "deterministic", None)
    return resolve(None) if callable(resolve) else True


def create_app(generator, limits: ServerLimits | None = None, *, deterministic_policy: bool | None = None,
               model_name: str | None = None, api_key: str | None = None) -> FastAPI:
    """The FastAPI app serving ``generator`` (an ``AdaptiveGenerator``). Its batching worker starts
    and stops with the app's lifespan (uvicorn runs it). ``deterministic_policy`` None: the
    adapter's stored policy_mode (argmax for sequence adapters, sampled for token adapters)."""
    limits = limits or ServerLimits()
    deterministic_policy = _served_mode(generator, deterministic_policy)
    worker = BatchingWorker(generator, limits, deterministic_policy)
    model_name = model_name or generator.name
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await worker.start()
        yield
        await worker.stop()

    app = FastAPI(title="decoding-adapters", lifespan=lifespan)
    app.state.worker, app.state.limits, app.state.generator = worker, limits, generator
    _install_error_handlers(app)

    api_key = check_api_key(api_key)

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if api_key and _needs_key(request.url.path) and not _authorized(request, api_key):
            return ApiError(401, "missing or wrong API key (Authorization: Bearer ...)", type="authentication_error",
                            code="invalid_api_key").response()
        return await call_next(request)

    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)  # outermost: before the API key

    def response_meta(req: _Common, chat: bool) -> dict:
        return {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": req.model or model_name}

    async def answer(req: _Common, job: Job, echo: Sequence[str] | None, chat: bool, request: Request):
        if req.stream:
            return await stream(req, job, echo, chat, request)
        gens = await _while_wanted(worker.submit(job), job, request, limits, worker.stats)
        choices = _choices(gens, req, echo)
        body_fn = _chat_body if chat else _completion_body
        adapter, usage = _adapter_field(generator, req, job.seed, choices, deterministic_policy), _usage(gens)
        return body_fn(response_meta(req, chat), choices, usage, adapter)

    async def stream(req: _Common, job: Job, echo: Sequence[str] | None, chat: bool, request: Request):
        job.stream = JobStream(asyncio.get_running_loop(), job.n, req.stop, echo, generator.action_names,
                               generator.adapter_kind)
        # errors before the first token are ordinary responses
        first = await _while_wanted(worker.submit_stream(job), job, request, limits, worker.stats)
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        adapter = _adapter_field(generator, req, job.seed, [], deterministic_policy)
        del adapter["choices"]
        to_chunks = partial(_stream_chunks, meta=response_meta(req, chat), chat=chat, include_usage=include_usage,
                            adapter=adapter, num_choices=job.rows)
        return StreamingResponse(_sse(first, job.stream, job, to_chunks), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    def check_model(req: _Common) -> None:
        """Only the served model answers (OpenAI: 404 ``model_not_found``); no ``model`` means it."""
        if req.model is not None and req.model != model_name:
            raise ApiError(404, f"The model `{req.model}` does not exist: this server serves `{model_name}` "
                           "(GET /v1/models)", param="model", code="model_not_found")

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        check_model(req)
        job = completion_job(req, limits)
        return await answer(req, job, job.prompts if req.echo else None, chat=False, request=request)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request):
        check_model(req)
        return await answer(req, chat_job(req, limits), None, chat=True, request=request)

    @app.get("/v1/models")
    async def models():
        info = generator.describe()
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": started,
                                            "owned_by": "decoding-adapters", "root": info["base_model"],
                                            "decoding_adapter": {"kind": info["kind"], "actions": info["actions"]}}]}

    @app.get("/health")
    async def health(request: Request):
        if api_key and not _authorized(request, api_key):  # without the key: up or not, nothing more
            return JSONResponse({"status": "ok" if worker.alive else "error"}, status_code=200 if worker.alive else 503)
        body = {"status": "ok" if worker.alive else "error", **generator.describe(), "model": model_name,
                "queued": worker.queued, "stats": dict(worker.stats),
                "limits": {**vars(limits), "default_max_tokens": limits.default_max_tokens}}
        return JSONResponse(body, status_code=200 if worker.alive else 503)

    return app


API_KEY_ENV = "DECODING_ADAPTERS_API_KEY"

KEYED_PAGES = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")
"""Pages that describe the API: behind the key like ``/v1/*`` when the server has one."""


def check_api_key(api_key: str | None) -> str | None:
    """``api_key`` as the server uses it: None (no key: every page is open) or a non-blank
    string; an empty one is refused, since it would silently turn authentication off."""
    if api_key is None:
        return None
    if not isinstance(api_key, str) or not api_key.strip():
        raise ValueError(f"the API key is empty (--api-key '' or an empty ${API_KEY_ENV}): give a key, or unset "
                         "it to serve without one")
    return api_key


def _needs_key(path: str) -> bool:
    return path.startswith("/v1/") or path in KEYED_PAGES


def _authorized(request: Request, api_key: str) -> bool:
    """Whether ``request`` carries ``Authorization: Bearer <api_key>``, compared in constant time."""
    given = request.headers.get("authorization", "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, f"Bearer {api_key}".encode("utf-8", "surrogateescape"))


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError):
        return err.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError):
        message, param = _validation_message(err)
        return ApiError(400, message, param=param, code="invalid_value").response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException):
        kind = "not_found_error" if err.status_code == 404 else "invalid_request_error"
        return ApiError(err.status_code, f"{err.detail}: {request.method} {request.url.path}", type=kind).response()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception):
        log.exception("unexpected error")
        return ApiError(500, f"internal error: {err.__class__.__name__}: {err}", type="server_error").response()

