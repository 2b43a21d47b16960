"""Abandoned requests: how long a normal request waits after many clients gave up on theirs.

Starts ``serve`` in-process on the default model with an untrained token adapter, sends
``--abandoned`` non-streaming completion requests (n = 4, ``--max-tokens`` tokens) whose clients
give up after ``--give-up-s`` (their connections close), then one normal request, and reports how
long that one took. A server that decodes abandoned work answers it only after all of it.

    python benchmarks/serve_abandoned.py                     # 200 requests, n = 4, 64 tokens, give up after 1 s

Prints one JSON line.
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

sys.path.insert(0, str(Path(__file__).parent))
from serve_load import BackgroundServer, untrained_token_adapter  # noqa: E402

from decoding_adapters.lm.models import DEFAULT_MODEL, ModelSpec, load_frozen_lm  # noqa: E402
from decoding_adapters.serving.adapter import Adapter  # noqa: E402
from decoding_adapters.serving.server import ServerLimits, create_app  # noqa: E402


async def abandon(url: str, count: int, give_up_s: float, max_tokens: int) -> None:
    async def one(i: int) -> None:
        body = {"prompt": f"What is {i} + {2 * i}?", "n": 4, "max_tokens": max_tokens, "seed": i}
        async with httpx.AsyncClient(timeout=give_up_s) as client:
            try:
                await client.post(f"{url}/v1/completions", json=body)
            except httpx.TimeoutException:
                pass

    await asyncio.gather(*(one(i) for i in range(count)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--abandoned", type=int, default=200)
    p.add_argument("--give-up-s", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=64)
    args = p.parse_args()
    lm = load_frozen_lm(ModelSpec(name_or_path=args.model, device="cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        generator = Adapter.from_pretrained(untrained_token_adapter(lm, Path(tmp) / "tok", args.max_tokens),
                                            lm=lm).generator()
        with BackgroundServer(create_app(generator, ServerLimits(max_tokens_limit=512))) as url:
            started = time.perf_counter()
            asyncio.run(abandon(url, args.abandoned, args.give_up_s, args.max_tokens))
            abandoned_s = time.perf_counter() - started
            started = time.perf_counter()
            r = httpx.post(f"{url}/v1/completions", json={"prompt": "What is 2 + 3?", "max_tokens": 16}, timeout=600)
            normal_s = time.perf_counter() - started
            stats = httpx.get(f"{url}/health").json()["stats"]
    print(json.dumps({"benchmark": "serve_abandoned", "model": args.model, "abandoned": args.abandoned,
                      "give_up_s": args.give_up_s, "max_tokens": args.max_tokens, "status": r.status_code,
                      "abandoning_s": round(abandoned_s, 2), "normal_request_s": round(normal_s, 2),
                      "requests_started": stats["requests"], "abandoned_rows": stats.get("abandoned_rows")}))


if __name__ == "__main__":
    main()
