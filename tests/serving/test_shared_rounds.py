"""An attempt adapter's server shares attempt rounds among concurrent requests: a request that
arrives while others are decoding joins the next round instead of waiting for them to finish, and
each answer is the one ``generate`` gives the same prompt and seed alone."""

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
