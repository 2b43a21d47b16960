"""Sequential attempts in rounds, with and without the prompt cache, vs one batched decode of the
same attempts: what the rounds cost, and what keeping each prompt's prefill across them saves.

``--prompts`` arithmetic test problems (the default task) each get ``--attempts`` attempts: the
first greedy, the rest sampled at T = 0.7, each ``--tokens`` new tokens at most. Three ways, on the
same LM, interleaved for ``--repeats`` rounds:

- ``rounds``: ``decoding.attempts.sequential_attempts`` with a decider that asks for one more
  attempt until a problem has ``--attempts`` (each round one batched ``decode`` of the problems
  still going), without the prompt cache: every round prefills its problems' prompts again;
- ``cached rounds``: the same with the prompt cache (the default of ``sequential_attempts``): each
  prompt prefilled in the first round and reused by the later ones;
- ``one batch``: one ``decode`` of every (problem, attempt) row with the same arms and seeds.

With batch invariance (the default) all three produce the same tokens, so they decode the same total
tokens; printed: the wall seconds of each, the ratios of cached rounds over rounds, cached rounds
over one batch and rounds over one batch (medians over repeats of the paired ratios), and the
prefill's share of each (with the cache, the prefill's time includes copying cached prompts in). The
first line names the device (and on a CPU its relevant flags); the last line is one JSON object.

    PYTHONPATH=src .venv/bin/python benchmarks/attempt_rounds_vs_decode.py [--prompts 128] [--attempts 3] [--tokens 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.attempts import AttemptState, sequential_attempts
from decoding_adapters.decoding.loop import decode, row_seed
from decoding_adapters.lm.cpu_features import cpu_features
from decoding_adapters.lm.models import FrozenLM, ModelSpec, describe_device, load_frozen_lm
from decoding_adapters.tasks import get_task

ARMS = (GREEDY, DecodingAction(temperature=0.7))


class UpTo:
    """A decider that makes ``attempts`` attempts per problem: the first arm once, then arm 1."""

    def __init__(self, attempts: int):
        self.attempts = attempts

    def decide(self, state: AttemptState, rows: list[int]) -> list[tuple[int | None, str]]:
        return [(1, "") if len(state.order[i]) < self.attempts else (None, "rule") for i in rows]

    def answer(self, state: AttemptState, rows: list[int]) -> list[int]:
        return [-1] * len(rows)


def seeds(i: int, arm: int, j: int) -> int:
    return row_seed(0, i * 1000 + arm * 100 + j)


def timed_prefill(lm: FrozenLM) -> list[float]:
    """Wrap ``lm.start_decode`` so that its wall seconds are summed into the returned one-item list."""
    spent, start_decode = [0.0], FrozenLM.start_decode

    def timed(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return start_decode(lm, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - begin

    lm.start_decode = timed
    return spent


def run_rounds(lm: FrozenLM, prompts, attempts: int, tokens: int, cached: bool = False) -> tuple[float, int, float]:
    spent = timed_prefill(lm)
    begin = time.perf_counter()
    result = sequential_attempts(lm, prompts, ARMS, UpTo(attempts), first_arm=0, distinct=[1, attempts],
                                 max_attempts=attempts, token_budgets=[tokens] * len(prompts), seeds=seeds,
                                 extract=lambda i, text: "", **({} if cached else {"prompt_cache_bytes": 0}))
    seconds = time.perf_counter() - begin
    del lm.start_decode
    return seconds, sum(result.tokens), spent[0]


def run_cached_rounds(lm: FrozenLM, prompts, attempts: int, tokens: int) -> tuple[float, int, float]:
    return run_rounds(lm, prompts, attempts, tokens, cached=True)


def run_one_batch(lm: FrozenLM, prompts, attempts: int, tokens: int) -> tuple[float, int, float]:
    rows = [(i, 0 if j == 0 else 1, 0 if j == 0 else j - 1) for i in range(len(prompts)) for j in range(attempts)]
    spent = timed_prefill(lm)
    begin = time.perf_counter()
    result = decode(lm, prompts, ActionSet(list(ARMS)), prompt_of_row=[i for i, _, _ in rows],
                    row_actions=[arm for _, arm, _ in rows], token_budget=tokens, record_features=True,
                    row_seeds=[seeds(i, arm, j) for i, arm, j in rows])
    seconds = time.perf_counter() - begin
    del lm.start_decode
    return seconds, int(result.lengths.sum()), spent[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_frozen_lm(ModelSpec(name_or_path=args.model, device=args.device))
    where = cpu_features().describe() if lm.device.type == "cpu" else describe_device(lm.device)
    print(f"device: {where}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{str(lm.dtype).removeprefix('torch.')}", flush=True)
    task = get_task("arithmetic")
    prompts = lm.encode_chat([task.prompt(p) for p in task.load("test")[: args.prompts]])
    run_one_batch(lm, prompts[:2], 2, 2)  # first use: weights packed, kernels initialised; not timed
    ways = {"rounds": run_rounds, "cached rounds": run_cached_rounds, "one batch": run_one_batch}
    seconds, prefill, generated = {w: [] for w in ways}, {w: [] for w in ways}, {}
    for round_index in range(args.repeats):
        for way in (list(ways) if round_index % 2 == 0 else list(ways)[::-1]):
            wall, count, spent = ways[way](lm, prompts, args.attempts, args.tokens)
            seconds[way].append(wall)
            prefill[way].append(spent / wall)
            generated[way] = count
            print(f"  round {round_index + 1} {way:<13} {wall:6.1f} s, {count} tokens, prefill {spent:.1f} s "
                  f"({spent / wall:.1%})", flush=True)
    ratios = {f"{a}_over_{b}".replace(" ", "_"): statistics.median(x / y for x, y in zip(seconds[a], seconds[b]))
              for a, b in (("cached rounds", "rounds"), ("cached rounds", "one batch"), ("rounds", "one batch"))}
    for name, ratio in ratios.items():
        print(f"{name.replace('_', ' ')}: {ratio:.3f} of the wall time", flush=True)
    print(f"({len(prompts)} prompts x {args.attempts} attempts; tokens: " +
          ", ".join(f"{w} {n}" for w, n in generated.items()) + ")", flush=True)
    print(json.dumps({"device": where, "prompts": len(prompts), "attempts": args.attempts, "tokens": args.tokens,
                      **{name: round(ratio, 3) for name, ratio in ratios.items()},
                      "seconds": {w: round(statistics.median(v), 2) for w, v in seconds.items()},
                      "prefill_share": {w: round(statistics.median(v), 3) for w, v in prefill.items()},
                      "generated": generated}))


if __name__ == "__main__":
    main()
