"""Decode throughput on the default model: HF ``generate()`` vs our loop with a fixed action vs our
loop with a per-token adapter (a 3-layer MLP on the hidden state choosing among 4 actions).

Every configuration generates exactly ``--new-tokens`` tokens for every row (EOS is not a stop
token here), so all three do the same amount of LM work and the ratios isolate per-step overhead.
The three are timed side by side, interleaved over ``--repeats`` rounds, and the median is kept
(these machines are noisy). Last line: one JSON object.

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
    chats = [[{"role": "user", "content": f"Explain {TOPICS[i % len(TOPICS)]} to a child, example {i}."}] for i in range(args.batch)]
    prompts = lm.encode_chat(chats)
    ids, mask = lm.pad(prompts)
    tokens = args.batch * args.new_tokens
    temperature_one = ActionSet([DecodingAction(temperature=1.0)])
    token_actions = ActionSet(PRESETS["math-token"])
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=4, token_budget=args.new_tokens)).eval()

    def hf_generate():
        with torch.inference_mode():
            lm.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                              do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=lm.tokenizer.pad_token_id)

    def loop_fixed():
        decode(lm, prompts, temperature_one, row_actions=0, token_budget=args.new_tokens, stop_token_ids=[])

    def loop_adapter():
        decode(lm, prompts, token_actions, chooser=TokenPolicyChooser(policy), token_budget=args.new_tokens, stop_token_ids=[])

    runs = {"hf_generate": hf_generate, "loop_fixed": loop_fixed, "loop_adapter": loop_adapter}
    times: dict[str, list[float]] = {name: [] for name in runs}
    loop_fixed()  # warm-up
    for r in range(args.repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
            print(f"round {r + 1}: {name:13s} {tokens / times[name][-1]:8.1f} tok/s", flush=True)
    rate = {name: tokens / statistics.median(t) for name, t in times.items()}
    summary = {
        "hf_generate_tok_s": round(rate["hf_generate"], 1),
        "loop_fixed_tok_s": round(rate["loop_fixed"], 1),
        "loop_adapter_tok_s": round(rate["loop_adapter"], 1),
        "loop_vs_hf": round(rate["loop_fixed"] / rate["hf_generate"], 3),
        "adapter_vs_fixed": round(rate["loop_adapter"] / rate["loop_fixed"], 3),
        "batch": args.batch, "new_tokens": args.new_tokens, "threads": args.threads,
    }
    print(f"loop / HF generate: {summary['loop_vs_hf']:.2f}x (target >= 1.5x); "
          f"adapter / fixed: {summary['adapter_vs_fixed']:.3f} (target >= 0.95)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
