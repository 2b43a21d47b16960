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
waits for the running batch to end. An attempt adapter's requests share attempt rounds instead
(``serving.rounds``): one that arrives while others decode joins their next round.

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
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import AsyncIterator, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..policies.kinds import adapter_kind
from .decoders import decoder_for
from .rounds import RoundsWorker, shares_rounds
from .schemas import (
    ApiError,
    ChatCompletionRequest,
    CommonFields,
    CompletionRequest,
    ServerLimits,
    check_text,
)
from .worker import BatchingWorker, Job, JobStream, served_mode

log = logging.getLogger(__name__)

__all__ = ["ServerLimits", "ApiError", "BatchingWorker", "create_app"]


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


# ---- request -> job -> response -----------------------------------------------------------------


def _check_limits(req: CommonFields, num_prompts: int, prompt_chars: int, limits: ServerLimits,
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


def _check_n(generator, n: int) -> None:
    """400 (``param: "n"``) for a parallel budget the adapter cannot serve, decided from the request alone."""
    check = getattr(generator, "check_parallel_budget", None)  # a stand-in generator may have none
    if check is None:
        return
    try:
        check(n)
    except ValueError as err:
        raise ApiError(400, str(err), param="n", code="invalid_value") from None


def completion_job(req: CompletionRequest, limits: ServerLimits) -> Job:
    check_text(req)
    prompts = [req.prompt] if isinstance(req.prompt, str) else list(req.prompt)
    max_tokens = _check_limits(req, len(prompts), sum(map(len, prompts)), limits, req.max_tokens)
    return Job(prompts, req.n, max_tokens, _seed(req), raw_text=True, problem_ids=req.problem_ids())


def chat_job(req: ChatCompletionRequest, limits: ServerLimits) -> Job:
    check_text(req)
    messages = [m.as_dict() for m in req.messages]
    requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    max_tokens = _check_limits(req, 1, sum(len(m["content"]) for m in messages), limits, requested)
    return Job([messages], req.n, max_tokens, _seed(req), problem_ids=req.problem_ids())


def _seed(req: CommonFields) -> int:
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


def _choices(gens, req: CommonFields, echo_prompts: Sequence[str] | None = None) -> list[Choice]:
    """Flatten per-prompt Generations into OpenAI choices (index ``i * n + j``)."""
    out = []
    for i, g in enumerate(gens):
        counts = g.action_counts()
        for j, raw in enumerate(g.completions):
            text, stopped = _cut_at_stop(raw, req.stop)
            if echo_prompts is not None:
                text = echo_prompts[i] + text
            info: dict = {"index": len(out), "action_counts": counts[j]}
            info.update(decoder_for(adapter_kind(g.kind)).choice_info(g, j))
            out.append(Choice(len(out), text, "stop" if stopped else g.finish_reasons[j], info))
    return out


def _adapter_field(generator, req: CommonFields, seed: int, choices: list[Choice], deterministic: bool) -> dict:
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


def create_app(generator, limits: ServerLimits | None = None, *, deterministic_policy: bool | None = None,
               model_name: str | None = None, api_key: str | None = None) -> FastAPI:
    """The FastAPI app serving ``generator`` (an ``AdaptiveGenerator``). Its batching worker starts
    and stops with the app's lifespan (uvicorn runs it). ``deterministic_policy`` None: the
    adapter's stored policy_mode (argmax for sequence adapters, sampled for token adapters)."""
    limits = limits or ServerLimits()
    deterministic_policy = served_mode(generator, deterministic_policy)
    # an attempt adapter's requests share attempt rounds (serving.rounds); the others share decode calls
    worker = (RoundsWorker if shares_rounds(generator) else BatchingWorker)(generator, limits, deterministic_policy)
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
    _install_guards(app, api_key, limits)

    def response_meta(req: CommonFields, chat: bool) -> dict:
        return {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": req.model or model_name}

    async def answer(req: CommonFields, job: Job, echo: Sequence[str] | None, chat: bool, request: Request):
        if req.stream:
            return await stream(req, job, echo, chat, request)
        gens = await _while_wanted(worker.submit(job), job, request, limits, worker.stats)
        choices = _choices(gens, req, echo)
        body_fn = _chat_body if chat else _completion_body
        adapter, usage = _adapter_field(generator, req, job.seed, choices, deterministic_policy), _usage(gens)
        return body_fn(response_meta(req, chat), choices, usage, adapter)

    async def stream(req: CommonFields, job: Job, echo: Sequence[str] | None, chat: bool, request: Request):
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

    def check_model(req: CommonFields) -> None:
        """Only the served model answers (OpenAI: 404 ``model_not_found``); no ``model`` means it; an
        ``n`` the adapter cannot serve is refused here, before the request queues."""
        if req.model is not None and req.model != model_name:
            raise ApiError(404, f"The model `{req.model}` does not exist: this server serves `{model_name}` "
                           "(GET /v1/models)", param="model", code="model_not_found")
        _check_n(generator, req.n)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        check_model(req)
        job = completion_job(req, limits)
        return await answer(req, job, job.prompts if req.echo else None, chat=False, request=request)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request):
        check_model(req)
        return await answer(req, chat_job(req, limits), None, chat=True, request=request)

    _add_info_routes(app, model_name, started, api_key)
    return app


def _install_guards(app: FastAPI, api_key: str | None, limits: ServerLimits) -> None:
    """The API key check (where the server has one) and, outermost, the request body size limit."""

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if api_key and _needs_key(request.url.path) and not _authorized(request, api_key):
            return ApiError(401, "missing or wrong API key (Authorization: Bearer ...)", type="authentication_error",
                            code="invalid_api_key").response()
        return await call_next(request)

    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)  # outermost: before the API key


def _add_info_routes(app: FastAPI, model_name: str, started: int, api_key: str | None) -> None:
    """``GET /v1/models`` (the one served model, its adapter kind and actions) and ``GET /health``
    (up or not; with the key, or on a server without one: the worker's queue, stats and limits)."""
    worker, limits, generator = app.state.worker, app.state.limits, app.state.generator

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

