"""Load test of ``serve``: requests/s and p50/p95 latency at 1 and 8 concurrent clients.

Starts the OpenAI-compatible server in-process (uvicorn on a free 127.0.0.1 port, background thread)
on the default model, then for each concurrency level sends a fixed number of chat-completion
requests (``max_tokens`` 16, one seed per request) from that many client threads, each with its own
HTTP connection. With one client every request is decoded alone; with 8, requests that arrive while
the model is busy are merged into one decode call, so the ratio of the two rows is the batching gain.

    python benchmarks/serve_load.py                          # smollm2, an untrained token adapter
    python benchmarks/serve_load.py --adapter runs/tok --requests 32

Without ``--adapter`` an *untrained* token adapter for the model is written to a temp directory:
its actions are arbitrary, but the serving cost (one policy MLP per token) is the real one.
Prints a table and, last, one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.lm.models import DEFAULT_MODEL, ModelSpec, load_frozen_lm
from decoding_adapters.policies.networks import AdapterConfig, TokenPolicy, TokenPolicyConfig, save_adapter
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.server import ServerLimits, create_app


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL, help="frozen LM (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument(
        "--adapter", default=None, help="adapter directory (default: an untrained token adapter in a temp dir)"
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--concurrency", default="1,8", help="comma-separated numbers of concurrent clients")
    p.add_argument("--requests", type=int, default=16, help="requests per concurrency level")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--max-batch", type=int, default=16, help="server --max-batch (rows per decode call)")
    return p.parse_args()


def untrained_token_adapter(lm, directory: Path, token_budget: int) -> Path:
    torch.manual_seed(0)
    actions = ActionSet(PRESETS["math-token"])
    policy = TokenPolicy(
        TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=len(actions), token_budget=token_budget)
    )
    config = AdapterConfig(
        kind="token",
        policy=dataclasses.asdict(policy.config),
        actions=actions.to_json(),
        base_model=lm.spec.name_or_path,
        base_fingerprint=lm.fingerprint(),
        budgets=[token_budget],
        task="untrained (benchmark)",
    )
    return save_adapter(directory, policy, config)


class BackgroundServer:
    def __init__(self, app):
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def run_level(url: str, clients: int, requests: int, max_tokens: int) -> dict:
    local = threading.local()

    def one(i: int) -> tuple[float, int]:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=url, timeout=300)
        body = {
            "messages": [{"role": "user", "content": f"What is {17 + i} + {3 * i}?"}],
            "max_tokens": max_tokens,
            "seed": i,
        }
        start = time.perf_counter()
        r = local.client.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        return time.perf_counter() - start, r.json()["usage"]["completion_tokens"]

    health = httpx.get(f"{url}/health").json()["stats"]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(one, range(requests)))
    wall = time.perf_counter() - start
    after = httpx.get(f"{url}/health").json()["stats"]
    latencies = [lat for lat, _ in results]
    tokens = sum(n for _, n in results)
    batches = after["batches"] - health["batches"]
    return {
        "clients": clients,
        "requests": requests,
        "wall_s": round(wall, 3),
        "requests_per_s": round(requests / wall, 3),
        "completion_tokens_per_s": round(tokens / wall, 1),
        "p50_s": round(percentile(latencies, 0.5), 3),
        "p95_s": round(percentile(latencies, 0.95), 3),
        "decode_calls": batches,
        "mean_rows_per_call": round((after["rows"] - health["rows"]) / max(batches, 1), 2),
    }


def main() -> None:
    args = parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    t0 = time.perf_counter()
    lm = load_frozen_lm(ModelSpec(name_or_path=args.model, device=args.device))
    load_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        adapter = args.adapter
        if adapter is None:
            adapter = untrained_token_adapter(lm, Path(tmp) / "untrained-token", args.max_tokens)
            print(f"no --adapter given: serving an UNTRAINED token adapter for {args.model} ({adapter})")
        generator = Adapter.from_pretrained(adapter, lm=lm).generator()
        limits = ServerLimits(max_batch=args.max_batch, max_tokens_limit=max(args.max_tokens, 512))
        with BackgroundServer(create_app(generator, limits)) as url:
            httpx.post(
                f"{url}/v1/chat/completions",
                timeout=300,  # warm-up, not timed
                json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            ).raise_for_status()
            rows = [run_level(url, c, args.requests, args.max_tokens) for c in levels]
    print(
        f"model {args.model} ({lm.device}, loaded in {load_s:.1f} s), adapter {generator.name} ({generator.kind}), "
        f"max_tokens {args.max_tokens}, {torch.get_num_threads()} torch threads"
    )
    print(f"{'clients':>7} {'req/s':>7} {'tok/s':>7} {'p50 s':>7} {'p95 s':>7} {'calls':>6} {'rows/call':>9}")
    for r in rows:
        print(
            f"{r['clients']:>7} {r['requests_per_s']:>7.2f} {r['completion_tokens_per_s']:>7.1f} {r['p50_s']:>7.3f} "
            f"{r['p95_s']:>7.3f} {r['decode_calls']:>6} {r['mean_rows_per_call']:>9.2f}"
        )
    speedup = rows[-1]["requests_per_s"] / rows[0]["requests_per_s"] if len(rows) > 1 else 1.0
    print(
        json.dumps(
            {
                "benchmark": "serve_load",
                "model": args.model,
                "adapter": generator.name,
                "kind": generator.kind,
                "untrained_adapter": args.adapter is None,
                "max_tokens": args.max_tokens,
                "levels": rows,
                "throughput_ratio_last_vs_first": round(speedup, 2),
                "torch_threads": torch.get_num_threads(),
            }
        )
    )


if __name__ == "__main__":
    main()
