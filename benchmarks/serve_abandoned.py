"""Abandoned requests: how long a normal request waits after many clients gave up on theirs.

Starts ``serve`` in-process on the default model, once per adapter kind of ``--kinds``: an untrained
token adapter (the abandoned requests ask n = 4), an untrained attempt policy that never stops on
its own (``--attempts`` attempts per request, the stopped greedy then samples at T = 1) and the
self-consistency rule over ``--rule-n`` attempts (a ``make-rule --rule self_consistency --n 16``
adapter). For each: one normal request on the idle server (its unloaded time), then ``--abandoned``
non-streaming requests (``--max-tokens`` tokens) whose clients give up after ``--give-up-s``
(their connections close), the queue length at once after they have gone, then the normal request
again. A server that decodes abandoned work answers it only after all of it; the target is a
normal request within 2x its unloaded time and an empty queue.

    python benchmarks/serve_abandoned.py                     # 200 requests per kind, 64 tokens, give up after 1 s
    python benchmarks/serve_abandoned.py --abandoned 50 --max-tokens 32

Prints one line per kind and a final JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

sys.path.insert(0, str(Path(__file__).parent))
from serve_load import BackgroundServer, untrained_token_adapter  # noqa: E402

from decoding_adapters.decoding.actions import GREEDY, DecodingAction  # noqa: E402
from decoding_adapters.decoding.confidence import CONFIDENCE_FEATURES  # noqa: E402
from decoding_adapters.lm.models import DEFAULT_MODEL, ModelSpec, load_frozen_lm  # noqa: E402
from decoding_adapters.policies.attempt import AttemptPolicy, AttemptPolicyConfig, save_attempt_adapter  # noqa: E402
from decoding_adapters.policies.kind_rule import save_rule_adapter  # noqa: E402
from decoding_adapters.serving.adapter import Adapter  # noqa: E402
from decoding_adapters.serving.server import ServerLimits, create_app  # noqa: E402

SAMPLER = DecodingAction(temperature=1.0)
NORMAL = {"prompt": "What is 2 + 3?", "max_tokens": 16, "seed": 0}


def attempt_adapter(lm, directory: Path, attempts: int, token_budget: int) -> Path:
    """An untrained attempt policy whose stop logit never wins: ``attempts`` attempts per request."""
    torch.manual_seed(0)
    config = AttemptPolicyConfig(("greedy", SAMPLER.name), 0, (1, attempts - 1), tuple(CONFIDENCE_FEATURES),
                                 max_attempts=attempts, token_budget=token_budget, stop_bias=-50.0)
    return save_attempt_adapter(directory, AttemptPolicy(config), [GREEDY.to_dict(), SAMPLER.to_dict()],
                                base_model=lm.spec.name_or_path, task="arithmetic")


def rule_adapter(directory: Path, n: int, token_budget: int) -> Path:
    return save_rule_adapter(directory, "self_consistency", {"n": n}, [GREEDY.to_dict(), SAMPLER.to_dict()],
                             task="arithmetic", token_budget=token_budget)


async def abandon(url: str, count: int, give_up_s: float, max_tokens: int, n: int) -> None:
    async def one(i: int) -> None:
        body = {"prompt": f"What is {i} + {2 * i}?", "n": n, "max_tokens": max_tokens, "seed": i}
        async with httpx.AsyncClient(timeout=give_up_s) as client:
            try:
                await client.post(f"{url}/v1/completions", json=body)
            except httpx.TimeoutException:
                pass

    await asyncio.gather(*(one(i) for i in range(count)))


def timed(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    r = httpx.post(f"{url}/v1/completions", json=NORMAL, timeout=600)
    return time.perf_counter() - started, r.status_code


def measure(generator, args, n: int) -> dict:
    with BackgroundServer(create_app(generator, ServerLimits(max_tokens_limit=512))) as url:
        timed(url)  # warm-up: the first request pays for lazy set-up
        unloaded_s, _ = timed(url)
        started = time.perf_counter()
        asyncio.run(abandon(url, args.abandoned, args.give_up_s, args.max_tokens, n))
        abandoning_s = time.perf_counter() - started
        queued_after = httpx.get(f"{url}/health").json()["queued"]
        normal_s, status = timed(url)
        health = httpx.get(f"{url}/health").json()
    stats = health["stats"]
    return {"status": status, "unloaded_s": round(unloaded_s, 2), "normal_request_s": round(normal_s, 2),
            "ratio": round(normal_s / unloaded_s, 2), "abandoning_s": round(abandoning_s, 2),
            "queued_after_abandoning": queued_after, "queued_at_end": health["queued"],
            "requests_started": stats["requests"], "abandoned_rows": stats["abandoned_rows"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--kinds", default="token,attempt,rule", help="adapter kinds to serve in turn")
    p.add_argument("--abandoned", type=int, default=200)
    p.add_argument("--give-up-s", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--attempts", type=int, default=8, help="attempts per request of the attempt adapter")
    p.add_argument("--rule-n", type=int, default=16, help="attempts per request of the self-consistency rule")
    args = p.parse_args()
    lm = load_frozen_lm(ModelSpec(name_or_path=args.model, device="cpu"))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        makers = {"token": lambda d: untrained_token_adapter(lm, d, args.max_tokens),
                  "attempt": lambda d: attempt_adapter(lm, d, args.attempts, args.max_tokens),
                  "rule": lambda d: rule_adapter(d, args.rule_n, args.max_tokens)}
        for kind in args.kinds.split(","):
            generator = Adapter.from_pretrained(makers[kind](Path(tmp) / kind), lm=lm).generator()
            results[kind] = measure(generator, args, 4 if kind == "token" else 1)
            print(f"{kind}: {results[kind]}", flush=True)
    print(json.dumps({"benchmark": "serve_abandoned", "model": args.model, "abandoned": args.abandoned,
                      "give_up_s": args.give_up_s, "max_tokens": args.max_tokens, "attempts": args.attempts,
                      "rule_n": args.rule_n, "kinds": results}))


if __name__ == "__main__":
    main()
