"""Decode throughput on the default model: HF ``generate()`` vs our loop with a fixed action vs our
loop with a per-token adapter (a 3-layer MLP on the hidden state choosing among 4 actions).

Two workloads, timed side by side and interleaved over ``--repeats`` rounds (median kept; these
machines are noisy):

- ``natural`` (the headline): rows stop at EOS or after ``--new-tokens``. The prompts mix short
  arithmetic questions and open explanations, so rows finish at very different steps. Our loop
  drops finished rows from the batch and the KV cache; ``generate()`` keeps computing them until
  the last row ends. Tokens/s counts useful tokens (up to and including EOS) of each method.
- ``fixed``: every row generates exactly ``--new-tokens`` tokens (EOS suppressed), so all three
  do the same LM work and the ratio isolates per-step overhead.

Last line: one JSON object (headline keys from ``natural``; ``*_fixed`` keys from ``fixed``).

    .venv/bin/python benchmarks/decode_throughput.py [--batch 32] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from decoding_adapters.actions import PRESETS, ActionSet, DecodingAction
from decoding_adapters.decoding import decode
from decoding_adapters.models import ModelSpec, load_frozen_lm
from decoding_adapters.policies import TokenPolicy, TokenPolicyChooser, TokenPolicyConfig

TOPICS = ["photosynthesis", "the water cycle", "prime numbers", "gravity", "volcanoes", "the moon", "magnets", "rainbows"]


def prompt_mix(batch: int) -> list[list[dict]]:
    """Half short arithmetic questions (the default task), half open explanations."""
    from decoding_adapters.tasks import get_task

    task = get_task("arithmetic")
    short = [task.prompt(p) for p in task.load("test")[: batch - batch // 2]]
    long = [[{"role": "user", "content": f"Explain {TOPICS[i % len(TOPICS)]} to a child."}] for i in range(batch // 2)]
    return [c for pair in zip(short, long) for c in pair] + short[len(long):]


def useful_tokens(generated: torch.Tensor, eos_ids: list[int]) -> int:
    """Tokens per row up to and including the first EOS (all of them if none), summed."""
    is_eos = torch.isin(generated, torch.tensor(eos_ids))
    first = torch.where(is_eos.any(1), is_eos.float().argmax(1) + 1, torch.full((len(generated),), generated.shape[1]))
    return int(first.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    lm = load_frozen_lm(ModelSpec(name_or_path=args.model))
    prompts = lm.encode_chat(prompt_mix(args.batch))
    ids, mask = lm.pad(prompts)
    temperature_one = ActionSet([DecodingAction(temperature=1.0)])
    token_actions = ActionSet(PRESETS["math-token"])
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=4, token_budget=args.new_tokens)).eval()

    def hf_generate(fixed: bool) -> int:
        length = {"min_new_tokens": args.new_tokens} if fixed else {}
        with torch.inference_mode():
            out = lm.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens, do_sample=True,
                                    temperature=1.0, top_k=0, top_p=1.0, pad_token_id=lm.tokenizer.pad_token_id, **length)
        return useful_tokens(out[:, ids.shape[1]:], [] if fixed else lm.eos_token_ids)

    def loop(fixed: bool, chooser) -> int:
        stop = [] if fixed else None
        if chooser is None:
            result = decode(lm, prompts, temperature_one, row_actions=0, token_budget=args.new_tokens, stop_token_ids=stop)
        else:
            result = decode(lm, prompts, token_actions, chooser=chooser, token_budget=args.new_tokens, stop_token_ids=stop)
        return int(result.lengths.sum())

    runs = {
        "hf_generate": lambda fixed: hf_generate(fixed),
        "loop_fixed": lambda fixed: loop(fixed, None),
        "loop_adapter": lambda fixed: loop(fixed, TokenPolicyChooser(policy)),
    }
    rates: dict[tuple[str, str], list[float]] = {}
    loop(True, None)  # warm-up
    for r in range(args.repeats):
        for workload in ("natural", "fixed"):
            for name, fn in runs.items():
                start = time.perf_counter()
                tokens = fn(workload == "fixed")
                rate = tokens / (time.perf_counter() - start)
                rates.setdefault((workload, name), []).append(rate)
                print(f"round {r + 1} {workload:7s} {name:13s} {rate:8.1f} tok/s ({tokens} tokens)", flush=True)
    median = {key: statistics.median(v) for key, v in rates.items()}
    summary = {}
    for workload, suffix in (("natural", ""), ("fixed", "_fixed")):
        hf, fixed, adapter = (median[(workload, n)] for n in runs)
        summary.update({
            f"hf_generate_tok_s{suffix}": round(hf, 1), f"loop_fixed_tok_s{suffix}": round(fixed, 1),
            f"loop_adapter_tok_s{suffix}": round(adapter, 1), f"loop_vs_hf{suffix}": round(fixed / hf, 3),
            f"adapter_vs_fixed{suffix}": round(adapter / fixed, 3),
        })
        print(f"{workload}: loop / HF generate {fixed / hf:.2f}x (target >= 1.5x), adapter / fixed {adapter / fixed:.3f} "
              f"(target >= 0.95)")
    summary.update({"batch": args.batch, "new_tokens": args.new_tokens, "threads": args.threads})
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
