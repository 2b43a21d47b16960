"""The OpenAI-compatible server, run for real: uvicorn in a background thread on a free 127.0.0.1
port, the tiny model and a saved tiny token adapter, spoken to with the ``openai`` client and httpx."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from adapter_helpers import make_adapter, save_tiny_base
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.server import ApiError, BatchingWorker, Job, ServerLimits, create_app

LIMITS = ServerLimits(max_tokens_limit=32, max_batch=8, max_prompt_chars=1000, max_queue=64, batch_wait_ms=5)


class BackgroundServer:
    """uvicorn on 127.0.0.1, port chosen by the OS, in a daemon thread."""

    def __init__(self, app):
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory, tiny_lm):
    root = tmp_path_factory.mktemp("served")
    adapter = make_adapter(root / "tiny-token", tiny_lm, "token",
                           base_model=str(save_tiny_base(tiny_lm, root / "base")))
    generator = Adapter.from_pretrained(adapter, lm=tiny_lm).generator()
    with BackgroundServer(create_app(generator, LIMITS, deterministic_policy=False)) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def http(base_url):
    with httpx.Client(base_url=base_url, timeout=60) as c:
        yield c


def test_completions(client):
    resp = client.completions.create(model="tiny-token", prompt="What is 2+3?", max_tokens=8, n=2, seed=1,
                                     temperature=0.2)
    assert len(resp.choices) == 2 and [c.index for c in resp.choices] == [0, 1]
    assert all(isinstance(c.text, str) and c.finish_reason in ("stop", "length") for c in resp.choices)
    assert resp.object == "text_completion" and resp.model == "tiny-token"
    assert 0 < resp.usage.completion_tokens <= 16 and resp.usage.prompt_tokens > 0
    info = resp.model_extra["decoding_adapter"]
    assert info["kind"] == "token" and info["seed"] == 1 and info["ignored_parameters"] == ["temperature"]
    assert len(info["choices"]) == 2 and all(a < len(info["actions"]) for a in info["choices"][0]["token_actions"])
    again = client.completions.create(model="tiny-token", prompt="What is 2+3?", max_tokens=8, n=2, seed=1)
    assert [c.text for c in again.choices] == [c.text for c in resp.choices]  # seeded: reproducible


def test_completions_with_prompt_list_and_stop(http):
    body = {"prompt": ["a", "b"], "n": 2, "max_tokens": 6, "seed": 3}
    plain = http.post("/v1/completions", json=body).json()
    assert [c["index"] for c in plain["choices"]] == [0, 1, 2, 3]
    text = plain["choices"][0]["text"]
    if len(text) > 2:  # cut at a stop string taken from the text itself
        cut = http.post("/v1/completions", json={**body, "stop": text[2]}).json()
        assert cut["choices"][0]["text"] == text[: text.index(text[2])] and cut["choices"][0]["finish_reason"] == "stop"


def test_chat_completions(client):
    resp = client.chat.completions.create(
        model="tiny-token", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        max_tokens=6, seed=2)
    assert resp.object == "chat.completion" and len(resp.choices) == 1
    msg = resp.choices[0].message
    assert msg.role == "assistant" and isinstance(msg.content, str)
    assert resp.model_extra["decoding_adapter"]["choices"][0]["action_counts"]


def test_streaming_equals_non_streaming(client, http):
    kwargs = dict(model="tiny-token", messages=[{"role": "user", "content": "What is 2+3?"}], max_tokens=8, seed=4, n=2)
    full = client.chat.completions.create(**kwargs)
    stream = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    texts, reasons, usage = {0: "", 1: ""}, {}, None
    for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                reasons[c.index] = c.finish_reason
    assert [texts[0], texts[1]] == [c.message.content for c in full.choices]
    assert reasons == {c.index: c.finish_reason for c in full.choices}
    assert usage is not None and usage.total_tokens == full.usage.total_tokens

    with http.stream("POST", "/v1/completions", json={"prompt": "Hi", "max_tokens": 4, "stream": True, "seed": 1}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length") and "decoding_adapter" in events[-1]


def test_health_and_models(client, http):
    health = http.get("/health").json()
    assert health["status"] == "ok" and health["model"] == "tiny-token" and health["kind"] == "token"
    assert health["limits"]["max_batch"] == 8
    assert [m.id for m in client.models.list().data] == ["tiny-token"]


@pytest.mark.parametrize("path,body,status,needle", [
    ("/v1/completions", {"max_tokens": 4}, 400, "prompt"),  # missing field
    ("/v1/chat/completions", {"max_tokens": 4}, 400, "messages"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": "many"}, 400, "max_tokens"),  # wrong type
    ("/v1/completions", {"prompt": 5}, 400, "prompt"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": -1}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 33}, 400, "limit of 32"),  # over the limits
    ("/v1/completions", {"prompt": "hi", "n": 9}, 400, "limit of 8"),
    ("/v1/completions", {"prompt": ["a", "b", "c"], "n": 3}, 400, "limit of 8"),
    ("/v1/completions", {"prompt": "x" * 1001}, 413, "characters"),
    ("/v1/completions", {"prompt": "y" * 500, "max_tokens": 32}, 400, "context"),  # 512 positions
    ("/v1/completions", {"prompt": "hi", "logprobs": 2}, 400, "logprobs"),
    # strict types: no silent conversion of strings, booleans or floats
    ("/v1/completions", {"prompt": "hi", "max_tokens": "8"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": True}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 8.0}, 400, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": "8"}, 400,
     "max_completion_tokens"),
    ("/v1/completions", {"prompt": "hi", "stream": "yes"}, 400, "stream"),
    ("/v1/completions", {"prompt": "hi", "stream": 1}, 400, "stream"),
    ("/v1/completions", {"prompt": "hi", "n": "2"}, 400, "n"),
    ("/v1/completions", {"prompt": "hi", "n": False}, 400, "n"),
    ("/v1/completions", {"prompt": "hi", "seed": "1"}, 400, "seed"),
    ("/v1/completions", {"prompt": "hi", "echo": "yes"}, 400, "echo"),
    ("/v1/completions", {"prompt": "hi", "temperature": "0.5"}, 400, "temperature"),
    ("/v1/completions", {"prompt": "hi", "stream": True, "stream_options": {"include_usage": "yes"}}, 400,
     "include_usage"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 400, "content"),
])
def test_bad_requests_get_openai_errors(http, path, body, status, needle):
    r = http.post(path, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert needle in err["message"] and err["type"] and "code" in err


def test_malformed_json_unknown_route_and_client_errors(http, client):
    r = http.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "json" in r.json()["error"]["message"].lower()
    r = http.get("/v1/nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    with pytest.raises(openai.BadRequestError, match="limit of 32"):
        client.completions.create(model="tiny-token", prompt="hi", max_tokens=100)
    assert http.get("/health").json()["status"] == "ok"  # still serving


def test_an_unknown_model_is_404_model_not_found(client, http):
    for path, extra in (("/v1/completions", {"prompt": "hi"}), ("/v1/chat/completions",
                                                                 {"messages": [{"role": "user", "content": "hi"}]})):
        r = http.post(path, json={"model": "gpt-4o", "max_tokens": 2, **extra})
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["code"] == "model_not_found" and err["param"] == "model" and "tiny-token" in err["message"]
    with pytest.raises(openai.NotFoundError, match="gpt-4o") as raised:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert raised.value.code == "model_not_found"
    served = http.get("/v1/models").json()["data"][0]["id"]
    assert client.completions.create(model=served, prompt="hi", max_tokens=2, seed=0).model == served


def test_twenty_concurrent_requests_are_batched(client, http):
    before = http.get("/health").json()["stats"]

    def one(i: int):
        if i % 2:
            r = client.chat.completions.create(model="tiny-token", messages=[{"role": "user", "content": f"Q{i}"}],
                                               max_tokens=6, seed=i)
            return r.choices[0].message.content
        return client.completions.create(model="tiny-token", prompt=f"P{i}", max_tokens=6, n=2, seed=i).choices[1].text

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(one, range(20)))
    assert len(results) == 20 and all(isinstance(t, str) for t in results)
    after = http.get("/health").json()["stats"]
    assert after["requests"] - before["requests"] == 20
    assert after["batches"] - before["batches"] < 20 and after["max_rows_in_batch"] > 2  # requests shared decode calls
    assert after["max_rows_in_batch"] <= LIMITS.max_batch


class FakeGenerator:
    """Stands in for the adapter's generator in worker / middleware tests (no model)."""

    name, kind = "fake", "token"

    def prepare(self, prompts, token_budget, parallel_budget, seed):
        if "long" in prompts:
            raise ValueError("prompt 0 is too long for the context")
        return list(prompts)

    def run(self, prepared, deterministic_policy, on_tokens=None, gone=None):  # the worker passes both
        if "boom" in prepared:
            raise RuntimeError("kaboom")
        return [p.upper() for p in prepared]


def test_worker_isolates_failing_requests_from_their_batch_mates():
    async def main():
        worker = BatchingWorker(FakeGenerator(), ServerLimits(max_batch=8, batch_wait_ms=20))
        await worker.start()
        jobs = [Job([p], 1, 4, 0) for p in ("a", "boom", "long", "b")]
        results = await asyncio.gather(*(worker.submit(j) for j in jobs), return_exceptions=True)
        alive = worker.alive
        await worker.stop()
        return results, worker.stats, alive

    results, stats, alive = asyncio.run(main())
    assert results[0] == ["A"] and results[3] == ["B"] and alive
    assert isinstance(results[1], ApiError) and results[1].status == 500 and "kaboom" in results[1].message
    assert isinstance(results[2], ApiError) and results[2].status == 400 and "context" in results[2].message
    assert stats["batches"] == 1 and stats["failed_batches"] == 1  # merged once, then each retried alone


def test_api_key_and_body_size_are_checked_first():
    from fastapi.testclient import TestClient

    app = create_app(FakeGenerator(), ServerLimits(max_prompt_chars=100), api_key="sekret")
    with TestClient(app) as c:
        r = c.post("/v1/completions", json={"prompt": "hi"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        r = c.post("/v1/completions", content=b"x" * 70_000, headers={"authorization": "Bearer sekret"})
        assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def test_strict_types_still_accept_plain_json(http):
    body = {"prompt": "hi", "max_tokens": 4, "n": 1, "stream": False, "seed": 3, "temperature": 1, "top_p": 0.5}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text


def _raw_post(http_or_url, path: str, body: dict) -> bytes:
    """A JSON body with non-ASCII escaped ("\\ud800" stays an escape: clients refuse to encode it)."""
    return json.dumps(body, ensure_ascii=True).encode()


def test_lone_surrogate_fails_only_its_own_request(http):
    # A chat message holding "\ud800" (not encodable) fails in preparation: that request gets 400,
    # and the 5 others batched with it still get 200.
    good = {"model": "tiny-token", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "seed": 1}
    bad = {**good, "messages": [{"role": "user", "content": "bad \ud800 text"}]}
    bodies = [good, good, bad, good, good, good]
    headers = {"content-type": "application/json"}

    def post(body):
        return http.post("/v1/chat/completions", content=_raw_post(http, "", body), headers=headers)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        responses = list(pool.map(post, bodies))
    assert [r.status_code for r in responses] == [200, 200, 400, 200, 200, 200], [r.text for r in responses]
    assert "surrogate" in responses[2].json()["error"]["message"]
    completion = http.post("/v1/completions", content=_raw_post(http, "", {"prompt": ["ok", "\udfff"]}),
                           headers=headers)
    assert completion.status_code == 400 and completion.json()["error"]["param"] == "prompt"


class RefusingGenerator(FakeGenerator):
    """prepare raises something other than ValueError for one prompt (as a tokenizer would)."""

    def prepare(self, prompts, token_budget, parallel_budget, seed):
        if "odd" in prompts:
            raise TypeError("TextEncodeInput must be Union[TextInputSequence, ...]")
        return super().prepare(prompts, token_budget, parallel_budget, seed)


def test_any_preparation_error_fails_only_its_own_request():
    async def main():
        worker = BatchingWorker(RefusingGenerator(), ServerLimits(max_batch=8, batch_wait_ms=20))
        await worker.start()
        jobs = [Job([p], 1, 4, 0) for p in ("a", "b", "odd", "c", "d", "e")]
        results = await asyncio.gather(*(worker.submit(j) for j in jobs), return_exceptions=True)
        await worker.stop()
        return results

    results = asyncio.run(main())
    assert [r for i, r in enumerate(results) if i != 2] == [["A"], ["B"], ["C"], ["D"], ["E"]]
    assert isinstance(results[2], ApiError) and results[2].status == 400 and "TypeError" in results[2].message


def test_chunked_body_over_the_limit_is_refused_while_streaming(base_url):
    # A chunked body without Content-Length is refused with 413 as soon as it passes the limit, not
    # read whole first. Here the body never even ends: the answer must come anyway.
    import socket
    from urllib.parse import urlparse

    url = urlparse(base_url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 8192
        sent = 0
        try:
            while sent < 4 * LIMITS.max_body_bytes:  # bounded: 4x the limit at most, never terminated
                conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except OSError:
            pass  # the server stopped reading and closed: fine, its answer is already on the way
        conn.settimeout(10)
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = conn.recv(65536)
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_chunked_body_under_the_limit_is_served(http):
    body = json.dumps({"prompt": "hi", "max_tokens": 4, "seed": 1}).encode()
    r = http.post("/v1/completions", content=iter([body[:5], body[5:]]), headers={"content-type": "application/json"})
    assert r.status_code == 200 and "transfer-encoding" in r.request.headers and r.json()["choices"]


def test_completions_continue_raw_text_and_chat_uses_the_template(client, tiny_lm):
    """A completions prompt is text to continue (as OpenAI's completions): its tokens are the text's
    own, not a chat template around it; chat completions apply the template."""
    text = "The capital of France is"
    raw = client.completions.create(model="tiny-token", prompt=text, max_tokens=2, seed=0)
    assert raw.usage.prompt_tokens == len(tiny_lm.tokenizer(text)["input_ids"])
    chat = client.chat.completions.create(model="tiny-token", messages=[{"role": "user", "content": text}],
                                          max_tokens=2, seed=0)
    assert chat.usage.prompt_tokens == len(tiny_lm.encode_chat([[{"role": "user", "content": text}]])[0])
    assert chat.usage.prompt_tokens > raw.usage.prompt_tokens
