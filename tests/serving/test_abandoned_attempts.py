"""Attempt adapters (the learned attempt policy and a fixed rule) drop the work of a request whose
client has gone: before each attempt round and inside an attempt's decode, not after its last
attempt; the queue forgets such requests at once; ``/health`` counts their rows, not their tokens;
and ``n > 1``, which they cannot serve, is refused before the request queues. The LM's decode step
is slowed to a fixed time so that the work abandoned clients would cost is measurable."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import torch
from test_server import BackgroundServer

from adapter_helpers import save_tiny_base
from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.decoding.confidence import CONFIDENCE_FEATURES
from decoding_adapters.policies.attempt import AttemptPolicy, AttemptPolicyConfig, save_attempt_adapter
from decoding_adapters.policies.kind_rule import save_rule_adapter
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.server import ServerLimits, create_app

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

STEP_S = 0.02  # each decode step of the served model takes at least this long
BUDGET = 16
SAMPLER = DecodingAction(temperature=1.0)
ACTIONS = [GREEDY.to_dict(), SAMPLER.to_dict()]


class _SlowState:
    """A decode state whose every step takes ``STEP_S`` (a model much larger than the tiny one)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def step(self, tokens):
        time.sleep(STEP_S)
        return self.inner.step(tokens)


class _SlowLM:
    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def start_decode(self, *args, **kwargs):
        hidden, logits, state = self.inner.start_decode(*args, **kwargs)
        return hidden, logits, _SlowState(state)


@pytest.fixture(scope="module")
def generators(tmp_path_factory, tiny_lm):
    root = tmp_path_factory.mktemp("abandoned-attempts")
    base = str(save_tiny_base(tiny_lm, root / "base"))
    # an attempt policy that never stops on its own: 6 attempts per request
    config = AttemptPolicyConfig(("greedy", SAMPLER.name), 0, (1, 5), tuple(CONFIDENCE_FEATURES),
                                 ("confidence", "agreement"), 6, token_budget=BUDGET, stop_bias=-50.0)
    torch.manual_seed(0)
    dirs = {"attempt": save_attempt_adapter(root / "attempt", AttemptPolicy(config), ACTIONS, base_model=base,
                                            task="arithmetic"),
            "rule": save_rule_adapter(root / "rule", "self_consistency", {"n": 16}, ACTIONS, task="arithmetic",
                                      token_budget=BUDGET)}
    gens = {}
    for name, d in dirs.items():
        gens[name] = Adapter.from_pretrained(d, lm=tiny_lm).generator()
        gens[name].lm = _SlowLM(tiny_lm)
    return gens


def test_a_prompt_that_is_gone_stops_its_attempts_where_they_are(generators):
    gen = generators["attempt"]
    prepared = gen.prepare(["What is 2+3?", "What is 7*6?"], token_budget=BUDGET)
    full = gen.run(prepared)
    asked = []

    def gone(positions):  # prompt 1's client leaves at the third step of its first attempt
        asked.append(list(positions))
        return [q for q in positions if q == 1 and len(asked) >= 3]

    cut = gen.run(prepared, gone=gone)
    assert cut[0].to_dict() == full[0].to_dict()  # its batch-mate is not affected
    assert full[1].decodes == 6 and cut[1].decodes == 1 and cut[1].stopped_by == "cancelled"
    assert cut[1].completion_tokens[0] == 2  # cut inside the attempt, after the two steps before the client left
    never = gen.run(prepared, gone=lambda positions: list(positions))
    assert [(g.decodes, g.completions, g.stopped_by) for g in never] == [(0, [""], "cancelled")] * 2


def _body(gen, **extra):
    return {"model": gen.name, "prompt": "What is 2+3?", "max_tokens": BUDGET, **extra}


async def _abandon(url: str, body: dict, count: int, after_s: float) -> None:
    async def one(i):
        async with httpx.AsyncClient(timeout=after_s) as client:
            try:
                await client.post(f"{url}/v1/completions", json={**body, "seed": i})
            except httpx.TimeoutException:
                pass

    await asyncio.gather(*(one(i) for i in range(count)))


@pytest.mark.parametrize("name, stream", [("attempt", False), ("rule", True)])
def test_abandoned_attempt_requests_do_not_delay_the_next_one(generators, name, stream):
    # 32 requests of 6 (attempt) or 16 (rule) attempts x up to 16 steps, 8 per batch: decoded to the
    # end they would hold the decode for at least 4 x 6 x 16 x 0.02 = 8 s (attempt), 20 s (rule)
    gen = generators[name]
    limits = ServerLimits(max_tokens_limit=64, max_batch=8, max_queue=256, batch_wait_ms=5)
    with BackgroundServer(create_app(gen, limits)) as url:
        asyncio.run(_abandon(url, _body(gen, stream=stream), count=32, after_s=0.5))
        queued = httpx.get(f"{url}/health", timeout=10).json()["queued"]
        started = time.monotonic()
        done = httpx.post(f"{url}/v1/completions", json=_body(gen, max_tokens=2), timeout=120)
        seconds = time.monotonic() - started
        stats = httpx.get(f"{url}/health", timeout=10).json()["stats"]
    assert done.status_code == 200 and seconds < 4.0, (seconds, stats)
    assert queued == 0, queued  # the clients have gone: nothing of theirs waits
    stopped = stats["disconnected_rows"] if stream else stats["abandoned_rows"]
    assert 0 < stopped <= 32, stats  # one row per request (n = 1), not one per token


@pytest.mark.parametrize("name", ["attempt", "rule"])
def test_n_chains_are_served_and_too_many_refused_before_the_request_queues(generators, name):
    gen = generators[name]
    with BackgroundServer(create_app(gen, ServerLimits(max_tokens_limit=64, max_batch=8))) as url:
        served = httpx.post(f"{url}/v1/completions", json=_body(gen, n=2, max_tokens=4), timeout=60)
        r = httpx.post(f"{url}/v1/completions", json=_body(gen, n=9), timeout=60)
        stats = httpx.get(f"{url}/health", timeout=10).json()["stats"]
    assert served.status_code == 200 and len(served.json()["decoding_adapter"]["choices"]) == 2
    assert stats["rows"] == 2  # one row per chain of attempts
    assert r.status_code == 400 and r.json()["error"]["param"] == "n", r.text
    assert "n" in r.json()["error"]["message"] and stats["requests"] == 1  # the refused one never queued
