"""An attempt adapter's server shares attempt rounds among concurrent requests: a request that
arrives while others are decoding joins the next round instead of waiting for them to finish, and
each answer is the one ``generate`` gives the same prompt and seed alone; a request's prompt is
prefilled once and reused by its later rounds, and dropped when the request ends."""

from __future__ import annotations

import threading
import time

import httpx
from test_abandoned_attempts import BUDGET, generators  # noqa: F401 (a fixture)
from test_server import BackgroundServer

from decoding_adapters.serving.rounds import RoundsWorker
from decoding_adapters.serving.server import ServerLimits, create_app


def _chat(gen, question: str, seed: int) -> dict:
    return {"model": gen.name, "messages": [{"role": "user", "content": question}], "max_tokens": BUDGET,
            "seed": seed}


def test_a_later_request_joins_the_next_round(generators):  # noqa: F811
    gen = generators["attempt"]  # 6 attempts per request, each step slowed
    questions = ["What is 2+3?", "What is 7*6?"]
    alone = [gen.generate([q], token_budget=BUDGET, seed=5)[0] for q in questions]
    app = create_app(gen, ServerLimits(max_tokens_limit=64, max_batch=8, batch_wait_ms=5))
    assert isinstance(app.state.worker, RoundsWorker)
    finished, bodies = {}, {}
    with BackgroundServer(app) as url:
        def ask(i: int) -> None:
            r = httpx.post(f"{url}/v1/chat/completions", json=_chat(gen, questions[i], 5), timeout=120)
            finished[i], bodies[i] = time.monotonic(), r.json()

        first = threading.Thread(target=ask, args=(0,))
        started = time.monotonic()
        first.start()
        time.sleep(0.4)  # the first request is in its first rounds
        ask(1)
        first.join()
        stats = httpx.get(f"{url}/health", timeout=10).json()["stats"]
    whole = finished[0] - started  # six rounds of one request
    # served one batch after another, the second would end about six rounds after the first
    assert finished[1] - finished[0] < 0.5 * whole, (finished, started, stats)
    assert stats["max_rows_in_batch"] == 2  # the two shared rounds
    for i, g in enumerate(alone):
        choice = bodies[i]["choices"][0]
        assert choice["message"]["content"] == g.completions[0]
        info = bodies[i]["decoding_adapter"]["choices"][0]
        assert info["decodes"] == g.decodes == 6 and info["attempts"] == g.attempt_actions
        assert info["stopped_by"] == g.stopped_by and info["answer"] == g.answer
    cache = app.state.worker._service.rounds.prompt_cache  # the worker's rounds' prefilled prompts
    assert (cache.misses, cache.hits, len(cache)) == (2, 10, 0)  # each prompt prefilled once, then dropped


def test_a_prompt_stays_prefilled_while_its_request_lives(generators):  # noqa: F811
    gen = generators["attempt"]  # 6 attempts per request
    service = gen.attempt_service()
    cache = service.rounds.prompt_cache
    prepared = gen.prepare(["What is 2+3?", "What is 7*6?"], token_budget=BUDGET, seed=5)
    keys = [service.add(p) for p in prepared]
    assert service.round() == {} and len(cache) == 2
    done = service.round(gone=lambda going: [keys[1]] if keys[1] in going else [])  # its client left
    assert set(done) == {keys[1]} and len(cache) == 1 and prepared[0].prompt_ids in cache
    while service.live:
        done = service.round()
    assert set(done) == {keys[0]} and len(cache) == 0 and (cache.misses, cache.hits) == (2, 5)
