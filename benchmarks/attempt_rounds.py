"""Shared attempt rounds: requests/s and latency of an attempt adapter's server worker with and
without sharing rounds, side by side in one run.

Builds an untrained attempt policy that never stops on its own (``--attempts`` attempts per
request) on the default model and drives the two workers in-process (no HTTP): ``--requests``
requests arriving ``--gap-s`` apart, each a different question. ``BatchingWorker`` decodes the
requests waiting when a batch starts to the end of their last attempt, the others wait;
``RoundsWorker`` (what ``serve`` runs for an attempt adapter) lets a waiting request join the next
round. Both give every request the same answer (its own seeds): the run checks it.

    python benchmarks/attempt_rounds.py --requests 8 --gap-s 0.5 --max-tokens 16

Prints one line per worker and a final JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from serve_abandoned import attempt_adapter  # noqa: E402

from decoding_adapters.lm.models import DEFAULT_MODEL, ModelSpec, load_frozen_lm  # noqa: E402
from decoding_adapters.serving.adapter import Adapter  # noqa: E402
from decoding_adapters.serving.rounds import RoundsWorker  # noqa: E402
from decoding_adapters.serving.server import ServerLimits  # noqa: E402
from decoding_adapters.serving.worker import BatchingWorker, Job  # noqa: E402


async def drive(worker, requests: int, gap_s: float, max_tokens: int) -> tuple[float, list[float], list[str]]:
    await worker.start()

    async def one(i: int) -> tuple[float, str]:
        await asyncio.sleep(i * gap_s)
        started = time.perf_counter()
        gens = await worker.submit(Job([f"What is {i} + {2 * i + 1}?"], 1, max_tokens, seed=i))
        return time.perf_counter() - started, gens[0].completions[0]

    started = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(requests)))
    wall = time.perf_counter() - started
    await worker.stop()
    return wall, [r[0] for r in results], [r[1] for r in results]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--gap-s", type=float, default=0.5, help="time between two requests' arrivals")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--attempts", type=int, default=4)
    p.add_argument("--max-batch", type=int, default=16)
    args = p.parse_args()
    lm = load_frozen_lm(ModelSpec(name_or_path=args.model, device="cpu"))
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = attempt_adapter(lm, Path(tmp) / "attempt", args.attempts, args.max_tokens)
        generator = Adapter.from_pretrained(directory, lm=lm).generator()
        generator.generate(["warm up"], token_budget=2)
        limits = ServerLimits(max_tokens_limit=512, max_batch=args.max_batch)
        texts = {}
        for name, cls in (("one batch after another", BatchingWorker), ("shared rounds", RoundsWorker)):
            wall, latency, texts[name] = asyncio.run(drive(cls(generator, limits), args.requests, args.gap_s,
                                                           args.max_tokens))
            ordered = sorted(latency)
            out[name] = {"wall_s": round(wall, 2), "requests_per_s": round(args.requests / wall, 3),
                         "p50_s": round(ordered[len(ordered) // 2], 2), "max_s": round(ordered[-1], 2)}
            print(f"{name}: {out[name]}", flush=True)
    same = texts["one batch after another"] == texts["shared rounds"]
    print(json.dumps({"benchmark": "attempt_rounds", "model": args.model, "requests": args.requests,
                      "gap_s": args.gap_s, "max_tokens": args.max_tokens, "attempts": args.attempts,
                      "same_answers": same, "workers": out,
                      "throughput_ratio": round(out["shared rounds"]["requests_per_s"]
                                                / out["one batch after another"]["requests_per_s"], 2)}))


if __name__ == "__main__":
    main()
