"""Load test of ``serve``: requests/s and p50/p95 latency at 1 and 8 concurrent clients.

Starts the OpenAI-compatible server in-process (uvicorn on a free 127.0.0.1 port, background thread)
on the default model, then for each concurrency level sends a fixed number of chat-completion
requests (``max_tokens`` 16, one seed per request) from that many client threads, each with its own
HTTP connection. With one client every request is decoded alone; with 8, requests that arrive while
the model is busy are merged into one decode call, so the ratio of the two rows is the batching gain.

    python benchmarks/serve_load.py                          # smollm2, an untrained token adapter
    python benchmarks/serve_load.py --adapter runs/tok --requests 32
    python benchmarks/serve_load.py --soak-s 180 --clients 32  # the soak: mixed requests, errors and RSS

``--soak-s S`` runs the soak instead, once per adapter kind (``--kinds``, default an untrained
token adapter and an untrained draft-gated adapter that stops its draft at the first answer):
``--clients`` threads send, for S seconds, a seeded mix of chat and completion requests, streamed
or not, with n = 1..4; every non-2xx answer, error event or broken stream counts as an error. The
server's process RSS is read after a warm-up (the first fifth of S) and at the end: the growth
between them is what a leak would show.

Without ``--adapter`` an *untrained* token adapter for the model is written to a temp directory:
its actions are arbitrary, but the serving cost (one policy MLP per token) is the real one.
Prints a table and, last, one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
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
    p.add_argument("--soak-s", type=float, default=0.0, help="run the mixed soak for this many seconds per kind")
    p.add_argument("--clients", type=int, default=32, help="soak: concurrent clients")
    p.add_argument("--kinds", default="token,draft",
                   help="soak: adapter kinds to serve in turn (token, draft, attempt; attempt-earlier: the attempt "
                        "adapter through the path before shared rounds and the prompt cache, for a side-by-side)")
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
        token_budget=token_budget,
        task="untrained (benchmark)",
    )
    return save_adapter(directory, policy, config)


def untrained_draft_adapter(lm, directory: Path, token_budget: int) -> Path:
    """A draft-gated adapter whose untrained policy keeps or re-decodes about half the drafts; its
    draft stops at the first complete answer, so the task reads each prompt's question."""
    from decoding_adapters.policies.draft import DraftContextConfig
    from decoding_adapters.policies.networks import SequencePolicy, SequencePolicyConfig

    torch.manual_seed(0)
    context = DraftContextConfig(features="confidence", token_budget=token_budget)
    actions = ActionSet(PRESETS["math"])
    policy = SequencePolicy(SequencePolicyConfig(embed_dim=context.dim(lm.hidden_size), num_actions=len(actions) + 1,
                                                 input_norm="standardise"))
    config = AdapterConfig(kind="draft", policy=dataclasses.asdict(policy.config), actions=actions.to_json(),
                           base_model=lm.spec.name_or_path, base_fingerprint=lm.fingerprint(),
                           parallel_budgets=[1, 2, 4], draft=dataclasses.asdict(context), task="arithmetic")
    return save_adapter(directory, policy, config)


def untrained_attempt_adapter(lm, directory: Path, token_budget: int) -> Path:
    """An attempt adapter whose untrained policy reads greedy's confidence and hidden state and never
    stops early (its stop logit at -50): every request makes all four attempts (greedy, then three at
    T=0.7), the attempt rounds' full cost."""
    from decoding_adapters.decoding.actions import GREEDY, DecodingAction
    from decoding_adapters.evaluation.sample_table import CONFIDENCE_FEATURES
    from decoding_adapters.policies.attempt import AttemptPolicy, AttemptPolicyConfig, save_attempt_adapter

    torch.manual_seed(0)
    arms = (GREEDY, DecodingAction(temperature=0.7))
    policy = AttemptPolicy(AttemptPolicyConfig(tuple(a.name for a in arms), 0, (1, 8), tuple(CONFIDENCE_FEATURES),
                                               ("confidence", "hidden"), max_attempts=4, hidden_size=lm.hidden_size,
                                               token_budget=token_budget, stop_bias=-50.0))
    return save_attempt_adapter(directory, policy, [a.to_dict() for a in arms], base_model=lm.spec.name_or_path,
                                task="arithmetic")


def rss_mb() -> float:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:")) / 1024


REFUSED = "refused"
"""A request the server turns away by a stated rule before queueing (400 naming the parameter ``n``:
more completions than the server takes per request): counted apart from the errors."""


def _stated_refusal(status: int, content: bytes) -> bool:
    if status != 400:
        return False
    try:
        return json.loads(content)["error"].get("param") == "n"
    except (ValueError, KeyError, TypeError, AttributeError):
        return False


def soak(url: str, clients: int, seconds: float, max_tokens: int) -> dict:
    """``clients`` threads sending a seeded mix of requests for ``seconds``; errors, latency, RSS."""
    import random

    stop_at = time.monotonic() + seconds
    warm_at = time.monotonic() + seconds / 5
    rss = {"warm": None}
    lock = threading.Lock()
    counts = {"requests": 0, "errors": 0, "refused": 0, "streamed": 0, "chat": 0}
    examples: list[str] = []
    latencies: list[float] = []

    def request(client: httpx.Client, rng: random.Random, i: int) -> str | None:
        chat, stream, n = rng.random() < 0.5, rng.random() < 0.5, rng.randint(1, 4)
        question = f"What is {rng.randint(1, 99)} + {rng.randint(1, 99)}?"
        body = {"max_tokens": max_tokens, "n": n, "seed": i, "stream": stream,
                **({"messages": [{"role": "user", "content": question}]} if chat else {"prompt": question})}
        path = "/v1/chat/completions" if chat else "/v1/completions"
        with lock:
            counts["chat"] += chat
            counts["streamed"] += stream
        if not stream:
            r = client.post(path, json=body)
            if _stated_refusal(r.status_code, r.content):
                return REFUSED
            return None if r.status_code == 200 and len(r.json()["choices"]) == n else f"{r.status_code} {r.text[:200]}"
        with client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                content = r.read()
                return REFUSED if _stated_refusal(r.status_code, content) else f"{r.status_code} {content[:200]!r}"
            lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        if not lines or lines[-1] != "[DONE]":
            return "stream ended without [DONE]"
        bad = [x for x in lines[:-1] if "error" in json.loads(x)]
        return f"error event {bad[0][:200]}" if bad else None

    def client_loop(c: int) -> None:
        rng = random.Random(c)
        with httpx.Client(base_url=url, timeout=300) as client:
            i = 0
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                try:
                    error = request(client, rng, c * 1_000_000 + i)
                except httpx.HTTPError as err:
                    error = f"{type(err).__name__}: {err}"
                with lock:
                    counts["requests"] += 1
                    latencies.append(time.perf_counter() - started)
                    if error == REFUSED:
                        counts["refused"] += 1
                    elif error is not None:
                        counts["errors"] += 1
                        if len(examples) < 5:
                            examples.append(error)
                    if rss["warm"] is None and time.monotonic() >= warm_at:
                        rss["warm"] = rss_mb()
                i += 1

    threads = [threading.Thread(target=client_loop, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = rss_mb()
    warm = rss["warm"] or end
    return {**counts, "seconds": seconds, "clients": clients, "error_examples": examples,
            "p50_s": round(percentile(latencies, 0.5), 3), "p95_s": round(percentile(latencies, 0.95), 3),
            "rss_warm_mb": round(warm), "rss_end_mb": round(end), "rss_growth": round(end / warm - 1, 4)}


@contextlib.contextmanager
def earlier_attempt_path():
    """The server's attempt path before shared rounds and the prompt cache: each batch of requests
    decoded to the end of its last attempt (``BatchingWorker``), every round prefilling its prompts."""
    from decoding_adapters.serving import decoders, server

    saved = server.shares_rounds, decoders.AttemptRounds
    server.shares_rounds = lambda generator: False
    decoders.AttemptRounds = functools.partial(saved[1], prompt_cache_bytes=0)
    try:
        yield
    finally:
        server.shares_rounds, decoders.AttemptRounds = saved


def run_soak(args, lm, tmp: str) -> None:
    rows = []
    for kind in args.kinds.split(","):
        make = {"token": untrained_token_adapter, "draft": untrained_draft_adapter,
                "attempt": untrained_attempt_adapter, "attempt-earlier": untrained_attempt_adapter}[kind]
        generator = Adapter.from_pretrained(make(lm, Path(tmp) / kind, args.max_tokens), lm=lm).generator()
        limits = ServerLimits(max_batch=args.max_batch, max_tokens_limit=max(args.max_tokens, 512))
        path = earlier_attempt_path() if kind == "attempt-earlier" else contextlib.nullcontext()
        with path, BackgroundServer(create_app(generator, limits)) as url:
            rows.append({"kind": kind, **soak(url, args.clients, args.soak_s, args.max_tokens)})
        r = rows[-1]
        print(f"{kind}: {r['requests']} requests ({r['chat']} chat, {r['streamed']} streamed) from {r['clients']} "
              f"clients in {r['seconds']:g} s: {r['errors']} errors, {r['refused']} stated refusals, "
              f"p50 {r['p50_s']} s, p95 {r['p95_s']} s, "
              f"RSS {r['rss_warm_mb']} -> {r['rss_end_mb']} MB ({100 * r['rss_growth']:+.1f}%)")
        for example in r["error_examples"]:
            print(f"  error: {example}")
    print(json.dumps({"benchmark": "serve_load_soak", "model": args.model, "max_tokens": args.max_tokens,
                      "torch_threads": torch.get_num_threads(), "kinds": rows}))


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
        if args.soak_s > 0:
            return run_soak(args, lm, tmp)
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
