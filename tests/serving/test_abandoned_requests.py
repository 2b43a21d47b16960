"""Requests whose clients have gone are dropped (queued ones never start, running ones stop at the
next decode step, streaming or not), and a request left waiting in the queue past
``max_queue_wait_s`` is refused with 503 instead of being served late. The decode is slowed to a
fixed time per step so that the work abandoned clients would cost is measurable."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from test_server import BackgroundServer

from adapter_helpers import make_adapter, save_tiny_base
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.server import ServerLimits, create_app

STEP_S = 0.02  # each decode step of the served model takes at least this long
TOKENS = 32


class SlowGenerator:
    """A generator whose decode steps take ``STEP_S`` each (a model much larger than the tiny one)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, prepared, deterministic_policy=None, on_tokens=None, **kwargs):
        def slow(events):
            time.sleep(STEP_S)
            return on_tokens(events) if on_tokens is not None else None

        return self.inner.run(prepared, deterministic_policy, on_tokens=slow, **kwargs)


@pytest.fixture(scope="module")
def generator(tmp_path_factory, tiny_lm):
    root = tmp_path_factory.mktemp("abandoned")
    adapter = make_adapter(root / "tok", tiny_lm, "token", base_model=str(save_tiny_base(tiny_lm, root / "base")))
    return SlowGenerator(Adapter.from_pretrained(adapter, lm=tiny_lm).generator())


def _body(gen, **extra):
    return {"model": gen.name, "prompt": "What is 2+3?", "max_tokens": TOKENS, "temperature": 1.0,
            "ignore_eos": True, **extra}


async def _abandon(url: str, body: dict, count: int, after_s: float) -> None:
    """``count`` requests whose clients give up after ``after_s`` (their connections close)."""

    async def one(i):
        async with httpx.AsyncClient(timeout=after_s) as client:
            try:
                await client.post(f"{url}/v1/completions", json={**body, "seed": i})
            except httpx.TimeoutException:
                pass

    await asyncio.gather(*(one(i) for i in range(count)))


@pytest.mark.parametrize("stream", [False, True])
def test_abandoned_requests_do_not_delay_the_next_one(generator, stream):
    # 40 requests of n = 4 x 32 steps: served one after another they hold the decode for about
    # 40 x 32 x 0.02 / 2 (two requests per batch of 8 rows) = 13 s
    limits = ServerLimits(max_tokens_limit=64, max_batch=8, max_queue=256, batch_wait_ms=5)
    with BackgroundServer(create_app(generator, limits)) as url:
        asyncio.run(_abandon(url, _body(generator, n=4, stream=stream), count=40, after_s=0.5))
        started = time.monotonic()
        done = httpx.post(f"{url}/v1/completions", json=_body(generator, max_tokens=4), timeout=60)
        seconds = time.monotonic() - started
        stats = httpx.get(f"{url}/health", timeout=10).json()["stats"]
    assert done.status_code == 200 and seconds < 4.0, (seconds, stats)
    assert stats["requests"] < 20, stats  # most abandoned requests never started


def test_a_request_waiting_past_the_queue_deadline_is_refused(generator):
    limits = ServerLimits(max_tokens_limit=256, max_batch=4, max_queue=16, batch_wait_ms=5, max_queue_wait_s=0.5)
    with BackgroundServer(create_app(generator, limits)) as url:
        async def both():
            async with httpx.AsyncClient(timeout=60) as client:
                long = asyncio.ensure_future(client.post(f"{url}/v1/completions",
                                                         json=_body(generator, n=4, max_tokens=150)))
                await asyncio.sleep(0.3)  # the long one is decoding: this one waits in the queue
                started = time.monotonic()
                late = await client.post(f"{url}/v1/completions", json=_body(generator))
                waited = time.monotonic() - started
                return await long, late, waited

        long, late, waited = asyncio.run(both())
    assert long.status_code == 200
    assert late.status_code == 503 and late.json()["error"]["code"] == "queue_timeout", late.text
    assert waited < 2.0  # refused at its deadline, not when the worker reached it
