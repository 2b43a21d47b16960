"""``serve``: an OpenAI-compatible HTTP server whose decoding is chosen by a decoding adapter.

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (both also with
``"stream": true``), ``GET /v1/models``, ``GET /health``. Errors use OpenAI's format
``{"error": {"message", "type", "param", "code"}}``: malformed JSON, missing fields and wrong types
are 400 (``invalid_request_error``); a request over the server's limits is 400 (``max_tokens``, ``n``)
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
- ``/v1/completions`` sends each prompt as one user message through the chat template (the adapters
  are trained on chat prompts); choice ``i * n + j`` is completion j of prompt i, as in OpenAI.
- ``seed`` makes a request reproducible; without one the server draws a seed and reports it.
- ``stop`` strings are applied to the finished text (it is cut at the first one; finish_reason
  ``stop``). ``logprobs`` are not supported (400).
- **Streaming is not token by token**: generation is batched, so the stream is sent once the request's
  completions are finished — per choice a role chunk (chat), one chunk with the whole text and a
  chunk with ``finish_reason``; then a usage chunk if ``stream_options.include_usage``; then
  ``data: [DONE]``. Because the result is awaited before the stream opens, errors are ordinary 4xx
  responses, never half-sent streams.

Batching: the model is not thread-safe, so one background asyncio task owns it. Handlers validate a
request (pydantic + limits) and queue it. The worker takes the oldest waiting request, waits
``batch_wait_ms`` for company, then merges waiting requests (in order, up to ``max_batch`` rows =
prompts x n) into **one** ``AdaptiveGenerator.run`` call on a single dedicated thread, so the event
loop keeps accepting requests while the model works; requests that arrive meanwhile form the next
batch. Every request keeps its own seeds, so its result does not depend on its batch-mates.
Tokenizing happens on that thread too; a request whose own preparation fails there, for any reason
(prompt plus max_tokens over the model's context, text the tokenizer refuses), gets a 400 without
touching the others, and if a merged decode fails each request is retried alone, so one bad request
cannot fail its neighbours.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, Strict, StrictBool, StrictInt, StrictStr
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

__all__ = ["ServerLimits", "ApiError", "BatchingWorker", "create_app"]

DEFAULT_MAX_TOKENS = 128
SAMPLING_PARAMETERS = ("temperature", "top_p")  # declared (validated) but ignored: the adapter decides


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask for, and how requests are batched."""

    max_tokens_limit: int = 512
    """Largest ``max_tokens`` accepted (larger: 400)."""
    max_batch: int = 16
    """Most rows (prompts x n) merged into one decode call; also the most one request may ask for."""
    max_prompt_chars: int = 32_000
    """Most characters of prompt text per request (more: 413)."""
    max_queue: int = 256
    """Most requests waiting; more are refused with 503 instead of piling up."""
    batch_wait_ms: float = 2.0
    """How long the idle worker waits after a first request for others to batch with it."""

    def __post_init__(self) -> None:
        for name in ("max_tokens_limit", "max_batch", "max_prompt_chars", "max_queue"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_wait_ms < 0:
            raise ValueError(f"batch_wait_ms must be >= 0, got {self.batch_wait_ms}")

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
                raise ApiError(400, "only text content parts are supported", param="messages", code="unsupported_content")
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

    @property
    def rows(self) -> int:
        return len(self.prompts) * self.n


class BatchingWorker:
    """Owns the generator: merges queued jobs into batched ``run`` calls on one thread."""

    def __init__(self, generator, limits: ServerLimits, deterministic_policy: bool | None = None):
        deterministic_policy = _served_mode(generator, deterministic_policy)
        self.generator, self.limits, self.deterministic_policy = generator, limits, deterministic_policy
        self.stats = {"requests": 0, "batches": 0, "rows": 0, "max_rows_in_batch": 0, "failed_batches": 0}
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
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")  # the only thread touching the model
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
            if not job.future.done():
                job.future.set_exception(ApiError(503, "server is shutting down", type="server_error"))
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, job: Job):
        """Queue ``job`` and wait for its list of ``Generation``s (or its error)."""
        if not self.alive:
            raise ApiError(503, "the generation worker is not running", type="server_error")
        if len(self._pending) >= self.limits.max_queue:
            raise ApiError(503, f"server busy: {len(self._pending)} requests are waiting; retry later", type="server_error",
                           code="queue_full")
        job.future = asyncio.get_running_loop().create_future()
        self._pending.append(job)
        self._wakeup.set()
        return await job.future

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
                if job.future.done():  # the client went away
                    continue
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
            rows += job.rows
        return batch

    def _run_batch(self, batch: list[Job]) -> list:
        """On the decode thread: per job a list of Generations or an exception."""
        outcomes: list[Any] = [None] * len(batch)
        prepared = {}
        for i, job in enumerate(batch):
            try:
                prepared[i] = self.generator.prepare(job.prompts, token_budget=job.max_tokens, parallel_budget=job.n, seed=job.seed)
            except ValueError as err:  # this request's own input: a 400 for it alone
                code = "context_length_exceeded" if "context" in str(err) else "invalid_value"
                outcomes[i] = ApiError(400, str(err), param="prompt", code=code)
            except Exception as err:  # anything else raised on this request's behalf: still its own 400
                log.warning("request %d of a batch failed in preparation: %s: %s", i, type(err).__name__, err)
                outcomes[i] = ApiError(400, f"the request could not be prepared: {type(err).__name__}: {err}",
                                       param="prompt", code="invalid_value")
        merged = [p for i in prepared for p in prepared[i]]
        self._count(batch, prepared)
        try:
            gens = self.generator.run(merged, self.deterministic_policy) if merged else []
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
            try:
                outcomes[i] = self.generator.run(prepared[i], self.deterministic_policy)
            except Exception as err:
                log.exception("request failed")
                outcomes[i] = ApiError(500, f"generation failed: {err.__class__.__name__}: {err}", type="server_error")
        return outcomes

    def _count(self, batch: list[Job], prepared: dict) -> None:
        rows = sum(batch[i].rows for i in prepared)
        s = self.stats
        s["requests"] += len(batch)
        s["batches"] += 1 if rows else 0
        s["rows"] += rows
        s["max_rows_in_batch"] = max(s["max_rows_in_batch"], rows)


# ---- request -> job -> response -----------------------------------------------------------------


def _check_limits(req: _Common, num_prompts: int, prompt_chars: int, limits: ServerLimits, max_tokens: int | None) -> int:
    """The token budget of the request, after refusing what is over the limits."""
    if req.logprobs:
        raise ApiError(400, "logprobs are not supported by this server", param="logprobs", code="unsupported_parameter")
    max_tokens = limits.default_max_tokens if max_tokens is None else max_tokens
    if max_tokens > limits.max_tokens_limit:
        raise ApiError(400, f"max_tokens={max_tokens} is over this server's limit of {limits.max_tokens_limit}",
                       param="max_tokens", code="max_tokens_too_large")
    if num_prompts * req.n > limits.max_batch:
        raise ApiError(400, f"{num_prompts} prompt(s) x n={req.n} = {num_prompts * req.n} completions is over this server's "
                            f"limit of {limits.max_batch} per request", param="n", code="too_many_completions")
    if prompt_chars > limits.max_prompt_chars:
        raise ApiError(413, f"the prompt has {prompt_chars} characters, over this server's limit of {limits.max_prompt_chars}",
                       param="prompt", code="prompt_too_long")
    stops = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    if len(stops) > 4 or any(not s for s in stops):
        raise ApiError(400, "stop takes at most 4 non-empty strings", param="stop", code="invalid_value")
    return max_tokens


def completion_job(req: CompletionRequest, limits: ServerLimits) -> Job:
    _check_text(req)
    prompts = [req.prompt] if isinstance(req.prompt, str) else list(req.prompt)
    max_tokens = _check_limits(req, len(prompts), sum(map(len, prompts)), limits, req.max_tokens)
    return Job(prompts, req.n, max_tokens, _seed(req))


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
            if g.kind == "sequence":
                info.update(action=g.action, action_probs=dict(zip(g.action_names, [round(p, 6) for p in g.action_probs])))
            else:
                info["token_actions"] = g.token_actions[j]
            out.append(Choice(len(out), text, "stop" if stopped else g.finish_reasons[j], info))
    return out


def _adapter_field(generator, req: _Common, seed: int, choices: list[Choice], deterministic: bool) -> dict:
    return {"adapter": generator.name, "kind": generator.kind, "actions": generator.action_set.names, "seed": seed,
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


def _completion_chunks(meta: dict, choices: list[Choice], usage: dict | None, adapter: dict) -> list[dict]:
    chunk = {**meta, "object": "text_completion"}
    events = []
    for c in choices:
        events.append({**chunk, "choices": [{"index": c.index, "text": c.text, "finish_reason": None, "logprobs": None}]})
        events.append({**chunk, "choices": [{"index": c.index, "text": "", "finish_reason": c.finish_reason, "logprobs": None}]})
    events[-1]["decoding_adapter"] = adapter
    if usage is not None:
        events.append({**chunk, "choices": [], "usage": usage})
    return events


def _chat_chunks(meta: dict, choices: list[Choice], usage: dict | None, adapter: dict) -> list[dict]:
    chunk = {**meta, "object": "chat.completion.chunk"}
    events = []
    for c in choices:
        for delta in ({"role": "assistant", "content": ""}, {"content": c.text}):
            events.append({**chunk, "choices": [{"index": c.index, "delta": delta, "finish_reason": None, "logprobs": None}]})
        events.append({**chunk, "choices": [{"index": c.index, "delta": {}, "finish_reason": c.finish_reason, "logprobs": None}]})
    events[-1]["decoding_adapter"] = adapter
    if usage is not None:
        events.append({**chunk, "choices": [], "usage": usage})
    return events


async def _sse(events: list[dict]):
    for event in events:
        yield f"data: {json.dumps(event)}\n\n"
    yield "data: [DONE]\n\n"


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

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if api_key and request.url.path.startswith("/v1/") and request.headers.get("authorization") != f"Bearer {api_key}":
            return ApiError(401, "missing or wrong API key (Authorization: Bearer ...)", type="authentication_error",
                            code="invalid_api_key").response()
        return await call_next(request)

    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)  # outermost: before the API key

    async def answer(req: _Common, job: Job, echo: Sequence[str] | None, chat: bool):
        gens = await worker.submit(job)
        choices = _choices(gens, req, echo)
        body_fn, chunks_fn = (_chat_body, _chat_chunks) if chat else (_completion_body, _completion_chunks)
        meta = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": req.model or model_name}
        adapter, usage = _adapter_field(generator, req, job.seed, choices, deterministic_policy), _usage(gens)
        if not req.stream:
            return body_fn(meta, choices, usage, adapter)
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        events = chunks_fn(meta, choices, usage if include_usage else None, adapter)
        return StreamingResponse(_sse(events), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest):
        job = completion_job(req, limits)
        return await answer(req, job, job.prompts if req.echo else None, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest):
        return await answer(req, chat_job(req, limits), None, chat=True)

    @app.get("/v1/models")
    async def models():
        info = generator.describe()
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": started,
                                            "owned_by": "decoding-adapters", "root": info["base_model"],
                                            "decoding_adapter": {"kind": info["kind"], "actions": info["actions"]}}]}

    @app.get("/health")
    async def health():
        body = {"status": "ok" if worker.alive else "error", **generator.describe(), "model": model_name,
                "queued": worker.queued, "stats": dict(worker.stats),
                "limits": {**vars(limits), "default_max_tokens": limits.default_max_tokens}}
        return JSONResponse(body, status_code=200 if worker.alive else 503)

    return app


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

