"""Per-step cost of the decode loop's parts, best of many single steps (robust on a loaded machine).

For each dtype and batch: one LM step through HF's forward with ``DynamicCache`` (the old path)
vs the lean step with the ``RowKVCache``; attention over a view of the cache that stops at the
length vs over the cache's contiguous reserved block (what the lean step reads) vs SDPA on that
block; and one sampling step the old way (an exponential per vocabulary entry from per-row
``torch.Generator``s) vs the new way (counter-based uniform, inverse CDF). First, the
entropy/max-prob pass over [128, vocab] logits with glibc's allocator defaults and then with
``cpu_allocator.keep_freed_memory`` (as the CLI runs). Every figure (wall or, with ``--clock cpu``,
CPU time) is the minimum over ``--steps`` timed steps, interleaved, so a load spike on a shared
machine does not count. Last line: JSON.

    PYTHONPATH=src .venv/bin/python benchmarks/decode_step.py [--batches 32,128] [--steps 12]
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch
import torch.nn.functional as F
from decode_throughput import flops_per_token  # noqa: E402  (same directory)

from decoding_adapters.decoding.actions import counter_uniform, inverse_cdf_sample
from decoding_adapters.decoding.loop import _base_stats
from decoding_adapters.lm.cpu_allocator import keep_freed_memory
from decoding_adapters.lm.kv_cache import COLUMN_CHUNK
from decoding_adapters.lm.models import FrozenLM, ModelSpec, eager_attention, load_frozen_lm
from decoding_adapters.tasks import get_task

CLOCK = time.perf_counter


def best_of(fn, n: int) -> float:
    best = float("inf")
    for _ in range(n):
        t = CLOCK()
        fn()
        best = min(best, CLOCK() - t)
    return best


def attention_ms(config, batch: int, length: int, dtype: torch.dtype, steps: int) -> dict[str, float]:
    """One step's attention over every layer's cache (distinct buffers, so nothing stays in the CPU's
    caches between layers), three ways: eager over a view that stops at ``length`` columns of a cache
    reserved for 128 more (rows ``reserved`` columns apart, so not contiguous); eager over the whole
    contiguous reserved block (``RowKVCache``: ``length`` rounded up to a chunk, the rest masked); and
    ``scaled_dot_product_attention`` over the same block (``--attention sdpa``)."""
    kv_heads, head_dim = config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    groups, layers = config.num_attention_heads // kv_heads, config.num_hidden_layers
    scaling = head_dim**-0.5
    q = torch.randn(batch, kv_heads, groups, head_dim).to(dtype)
    block = -(-length // COLUMN_CHUNK) * COLUMN_CHUNK
    ways = {"view": length + 128, "block": block, "sdpa_block": block}
    out = {}
    for way, reserved in ways.items():
        keys = torch.randn(layers, batch, kv_heads, reserved, head_dim).to(dtype)
        values = torch.randn(layers, batch, kv_heads, reserved, head_dim).to(dtype)
        mask = torch.zeros(batch, 1, 1, reserved, dtype=dtype)
        mask[..., length:] = float("-inf")

        def step(keys=keys, values=values, mask=mask, way=way) -> None:
            for layer in range(layers):
                if way == "block":  # what the lean step runs
                    eager_attention(q, keys[layer], values[layer], mask, scaling)
                elif way == "sdpa_block":
                    F.scaled_dot_product_attention(q, keys[layer], values[layer], attn_mask=mask, scale=scaling)
                else:  # the view; keys as the left operand: as the right one, transposed, it copied too
                    k, v, m = keys[layer, :, :, :length], values[layer, :, :, :length], mask[..., :length]
                    scores = torch.matmul(k, q.transpose(-1, -2)).transpose(-1, -2) * scaling + m
                    torch.matmul(scores.softmax(-1, dtype=torch.float32).to(dtype), v)

        out[way] = best_of(step, steps) * 1e3
    return out


def old_sample(logits: torch.Tensor, generators) -> torch.Tensor:
    probs = logits.softmax(-1)
    noise = torch.ones_like(probs)
    for row, g in enumerate(generators):
        noise[row].exponential_(generator=g)
    return (probs / noise).argmax(-1)


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="32,128")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: process CPU time, a measure of work that other processes' load does not inflate "
        "(meaningful with --threads 1)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    # The allocator first: vocabulary-wide temporaries with glibc's defaults, then with freed memory kept
    # (a process-wide setting that cannot be undone, so everything after runs with it, as the CLI does).
    vocab_logits = torch.randn(128, 49152) * 3
    def base_stats_ms() -> float:
        return round(best_of(lambda: _base_stats(vocab_logits), args.steps) * 1e3, 2)

    out_alloc = {"base_stats_ms_b128_malloc_default": base_stats_ms()}
    out_alloc["malloc_keeps_freed_memory"] = keep_freed_memory()
    out_alloc["base_stats_ms_b128_malloc_kept"] = base_stats_ms()
    print(f"entropy/max-prob pass at batch 128: {out_alloc['base_stats_ms_b128_malloc_default']} ms with glibc's "
          f"defaults, {out_alloc['base_stats_ms_b128_malloc_kept']} ms with freed memory kept", flush=True)
    lm32 = load_frozen_lm(ModelSpec(dtype="float32"))
    lms = {"fp32": lm32, "bf16": FrozenLM(copy.deepcopy(lm32.model).to(torch.bfloat16), lm32.tokenizer, lm32.spec)}
    task = get_task("arithmetic")
    attention = lm32.model.config._attn_implementation
    out = {"threads": args.threads, "clock": args.clock, "attention": attention, **out_alloc}
    for batch in [int(b) for b in args.batches.split(",")]:
        prompts = lm32.encode_chat([task.prompt(p) for p in task.load("test")[:batch]])
        for name, lm in lms.items():
            _, logits, dyn = lm.start_decode(prompts, None, args.steps + 2, row_cache=False)
            _, _, row = lm.start_decode(prompts, None, args.steps + 2, row_cache=True)
            tokens = logits.argmax(-1)
            times = {"hf_step": float("inf"), "lean_step": float("inf")}
            for _ in range(args.steps):  # interleaved, one step each
                # best_of calls each function at once; the defaults bind this iteration's states
                hf_step = best_of(lambda dyn=dyn, tokens=tokens: dyn.step(tokens), 1)
                lean_step = best_of(lambda row=row, tokens=tokens: row.step(tokens), 1)
                times["hf_step"] = min(times["hf_step"], hf_step)
                times["lean_step"] = min(times["lean_step"], lean_step)
            for key, value in times.items():
                out[f"{key}_ms_{name}_b{batch}"] = round(value * 1e3, 2)
                out[f"{key}_tok_s_{name}_b{batch}"] = round(batch / value, 1)
            print(
                f"batch {batch} {name}: HF forward step {times['hf_step'] * 1e3:.1f} ms, lean step "
                f"{times['lean_step'] * 1e3:.1f} ms ({times['hf_step'] / times['lean_step']:.2f}x)",
                flush=True,
            )
        config = lm32.model.config
        a = torch.randn(batch, config.hidden_size).to(torch.bfloat16)
        b = torch.randn(config.hidden_size, config.intermediate_size).to(torch.bfloat16)
        matmul = best_of(lambda a=a, b=b: a @ b, 5 * args.steps)
        limit = 2 * batch * config.hidden_size * config.intermediate_size / matmul / flops_per_token(config)
        lean_bf16 = out[f"lean_step_tok_s_bf16_b{batch}"]
        out.update(
            {
                f"limit_tok_s_bf16_b{batch}": round(limit, 1),
                f"lean_step_frac_bf16_limit_b{batch}": round(lean_bf16 / limit, 3),
            }
        )
        print(
            f"batch {batch}: bf16 matmul limit {limit:.0f} tok/s; the lean bf16 step alone runs at "
            f"{lean_bf16:.0f} tok/s = {lean_bf16 / limit:.0%} of it",
            flush=True,
        )
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            for length in (max(map(len, prompts)) + 16, max(map(len, prompts)) + 128):
                ms = attention_ms(config, batch, length, dtype, args.steps)
                out[f"attention_ms_{name}_b{batch}_len{length}"] = {way: round(v, 2) for way, v in ms.items()}
                print(
                    f"batch {batch} {name} attention over {length} columns, all layers: a view up to the length "
                    f"{ms['view']:.1f} ms, the reserved block {ms['block']:.1f} ms ({ms['view'] / ms['block']:.2f}x), "
                    f"SDPA on the block {ms['sdpa_block']:.1f} ms",
                    flush=True,
                )
        logits = logits.float()
        generators = [torch.Generator().manual_seed(i) for i in range(batch)]
        seeds = torch.arange(batch)
        old = best_of(lambda logits=logits, gens=generators: old_sample(logits, gens), args.steps)
        new = best_of(
            lambda logits=logits, seeds=seeds: inverse_cdf_sample(_base_stats(logits)[3], counter_uniform(seeds, 0)),
            args.steps,
        )
        stats = best_of(lambda logits=logits: _base_stats(logits), args.steps)
        out.update(
            {
                f"sample_old_ms_b{batch}": round(old * 1e3, 2),
                f"sample_new_ms_b{batch}": round(new * 1e3, 2),
                f"base_stats_ms_b{batch}": round(stats * 1e3, 2),
            }
        )
        print(
            f"batch {batch} sampling: old {old * 1e3:.1f} ms, new {new * 1e3:.1f} ms (of which entropy/max-prob/"
            f"softmax {stats * 1e3:.1f} ms)",
            flush=True,
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
