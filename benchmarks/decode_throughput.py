"""Decode throughput on the default model, side by side in one run.

For each batch size (default 32 and 128), every row generates exactly ``--new-tokens`` tokens (EOS
suppressed), so all methods do the same LM work:

- ``hf_fp32`` / ``hf_bf16``: HF ``generate()`` (T = 1 sampling) on the model as this project loads
  it (eager attention on CPU, ``ModelSpec.attention``); ``hf_<dtype>_sdpa``: the same with HF's
  default SDPA attention. The loop's ratio is taken against the faster of the two;
- ``loop_fp32`` / ``loop_bf16``: our ``decode()`` with one fixed action (T = 1), each dtype with its
  default linear kernel (``ModelSpec.linear_kernel``: oneDNN in fp32); ``loop_fp32_sgemm``: fp32 with
  ``F.linear`` (MKL's sgemm, HF's own arithmetic), so ``onednn_vs_sgemm_fp32`` shows what the kernel
  choice buys;
- ``mixed_<dtype>``: our loop choosing uniformly at random among the 4 token actions (greedy,
  T = 0.5, 1, 1.25) at every token, i.e. the per-token Mixed baseline;
- ``adapter_<dtype>``: the same actions chosen by a per-token adapter (a 3-layer MLP on the hidden
  state), in the faster dtype. ``adapter_overhead`` = 1 - adapter / mixed tok/s is the policy's own
  cost; ``actions_overhead`` = 1 - mixed / loop is what per-token switching between temperatures and
  greedy costs over plain T = 1 sampling, whoever chooses.

Methods are interleaved over ``--repeats`` rounds, every other round in reverse order, and the
median is kept (shared machines are noisy; with one round the order is fixed, and the last methods,
Mixed and the adapter, can drift together with the machine). The same run times two matmul limits
in bf16, both in tok/s at M = batch rows:

- ``limit``: one ``[M x hidden] @ [hidden x intermediate]`` matmul timed alone (its weight stays in
  the CPU cache) in fp32 and bf16, each with the loop's linear kernel for that dtype; its GFLOP/s
  divided by the LM's FLOPs per token (from its config: every weight matrix twice, LM head
  included). ``frac_bf16_limit`` = best loop / this;
- ``chain_limit``: every weight matrix of the LM in order (LM head last) with the loop's linear
  kernel on ``[M, in]``, as a decode step meets them: weights streamed from memory, nothing else. A
  step cannot be faster than this; ``frac_bf16_chain_limit`` = best loop / this.

Both count only the new tokens, while the loops also prefill the prompts (``prompt_tokens``, their
real tokens, in the JSON), so neither fraction can reach 1. Hence a third figure, ``floor``: the least
time any loop could take for the same work, by parts (``decode_floor_seconds``: the steps' matmul
chain, the prefill's matmul chain timed at M = the prompts' real tokens (packed, no padding), and
one read of the KV cache per step at the streaming read rate ``read_gb_s`` timed in the same run);
``floor_vs_bf16_limit`` says how much of the matmul limit even that floor reaches,
``frac_bf16_floor`` = best loop / floor.

``prefill_padded_fraction_b<batch>``: the share of the prefill's tokens that are padding with every
prompt padded to the longest and with the prompts in ``prefill_groups``' length groups, each padded
to its own longest (as the loop prefills); ``prefill_s_<dtype>_b<batch>``: the prefill timed both ways
(best of 3, interleaved) in the fastest dtype.

Finally the greedy accuracy of the default task (arithmetic) on the same ``--accuracy-problems``
test problems at ``--accuracy-tokens`` tokens in fp32 (both kernels) and bf16, and
``greedy_rows_identical_onednn_vs_sgemm``: the fraction of those greedy rows whose text the fp32
kernel choice leaves unchanged.

The first line names the CPU and its relevant flags (``lm.cpu_features``). Only the dtypes the CPU
computes natively are timed (``--dtypes auto``): bf16 needs AVX512-BF16 or AMX-BF16, and without them
(e.g. an AVX2-only CPU) it is skipped, said so on a line and in ``dtypes_skipped``; Mixed and the
adapter then run in fp32. The limits and the floor are taken from the fastest dtype timed
(``limit_dtype_b<batch>``; key names carry that dtype). ``--quick`` shrinks the sizes so that a run
ends within 15 minutes on either kind of CPU.

Last line: one JSON object with every figure (the CPU's model and flags included).

    PYTHONPATH=src .venv/bin/python benchmarks/decode_throughput.py [--quick] [--batches 32,128] [--new-tokens 128]

On a GPU (``--device cuda``, ``main_cuda``): a model of ``--random-weights`` shape (``default``: the
default model's, ``1b``: a 1.07B Llama; ``random_weights.py``) in bf16 with the default model's
tokenizer (``--tokenizer DIR``), and, side by side in one run: ``loop`` (our decode, T = 1, its step
replayed from CUDA graphs), ``loop_eager_step`` (the same with ``cuda_graphs=False``), ``mixed`` and
``adapter`` (per-token Mixed and the 3-layer-MLP adapter over the 4 token actions), ``hf_generate``
(HF ``generate()``, its default dynamic cache), ``loop_uncompiled`` (the fused step captured without
``torch.compile``, ``ModelSpec.compile_step=False``), ``loop_variant`` (``batch_invariant=False``: no
row tiles, what invariance costs; ``--no-variant`` leaves it out) and, unless ``--no-hf-compiled``,
HF with a static cache and its forward compiled (``reduce-overhead``), timed last (a failure is written
into the figures as ``hf_static_compiled_error_b<batch>``); the memory floor (every weight and every
row's KV read once per step at the device-to-device copy bandwidth measured in the same run); where a
decode's time goes (the prefill alone, the LM's graphed step alone); the agreement of our greedy loop
with HF's greedy ``generate()`` on ``--accuracy-problems`` rows (differences at near-ties counted);
and, unless ``--invariance-rows 0``, batch invariance: that many greedy rows decoded in one batch and
reversed in batches of 8, rows whose tokens are identical (``batch_invariant_rows``). ``--table FILE``
writes the figures as a Markdown table too. Figures: ``docs/gpu.md``.

    python benchmarks/decode_throughput.py --device cuda --random-weights 1b --tokenizer DIR

``--gpu-table`` runs this GPU table on any device: ``--device cpu --gpu-table --random-weights tiny``
is a dry run of the code (float32) on a CPU.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time
from typing import Callable

import torch

from decoding_adapters.decoding.actions import GREEDY, PRESETS, ActionSet, DecodingAction
from decoding_adapters.decoding.loop import decode
from decoding_adapters.lm.cpu_allocator import keep_freed_memory
from decoding_adapters.lm.cpu_features import CpuFeatures, cpu_features
from decoding_adapters.lm.models import (
    PREFILL_GROUP_COST_TOKENS,
    FrozenLM,
    ModelSpec,
    describe_device,
    load_frozen_lm,
    locate_model,
    padded_fraction,
    prefill_groups,
)
from decoding_adapters.policies.networks import TokenPolicy, TokenPolicyChooser, TokenPolicyConfig, UniformChooser
from decoding_adapters.tasks import get_task

TOPICS = [
    "photosynthesis",
    "the water cycle",
    "prime numbers",
    "gravity",
    "volcanoes",
    "the moon",
    "magnets",
    "rainbows",
]


def prompt_mix(batch: int) -> list[list[dict]]:
    """Half short arithmetic questions (the default task), half open explanations."""
    task = get_task("arithmetic")
    short = [task.prompt(p) for p in task.load("test")[: batch - batch // 2]]
    long = [[{"role": "user", "content": f"Explain {TOPICS[i % len(TOPICS)]} to a child."}] for i in range(batch // 2)]
    return [c for pair in zip(short, long) for c in pair] + short[len(long) :]


def flops_per_token(config) -> int:
    """2 x the multiply-adds of every weight matrix a token passes through (attention over the cache
    excluded: it is small next to these at the lengths measured here)."""
    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    q_out, kv_out = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    per_layer = hidden * q_out + 2 * hidden * kv_out + q_out * hidden + 3 * hidden * inter
    return 2 * (layers * per_layer + hidden * config.vocab_size)


def best_seconds(fn, seconds: float, warmup: int = 1) -> float:
    """Best wall time of ``fn()`` over calls repeated for ``seconds``, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, linear: Callable, seconds: float = 1.0) -> float:
    """Attainable GFLOP/s of ``[m x k] @ [k x n]`` with the ``linear`` kernel (best of the timed calls
    after a warm-up)."""
    a, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
    return 2 * m * k * n / best_seconds(lambda: linear(a, w, None), seconds, warmup=3) / 1e9


def matmul_chain_seconds(lm: FrozenLM, m: int, seconds: float = 2.0, head: bool = True) -> float:
    """Best time of one pass of the LM's linear kernel over every weight matrix of the model (in module
    order, which for HF causal LMs ends with the LM head; without it if not ``head``) on
    ``[m, in_features]`` inputs."""
    weights = [module.weight for module in lm.model.modules() if isinstance(module, torch.nn.Linear)]
    weights = weights[: None if head else -1]
    inputs = {w.shape[1]: torch.randn(m, w.shape[1]).to(w.dtype) for w in weights}
    with torch.inference_mode():
        return best_seconds(lambda: [lm.linear(inputs[w.shape[1]], w, None) for w in weights], seconds)


def read_bytes_per_s(seconds: float = 1.0) -> float:
    """Streaming read rate of this machine's memory: the best time of summing 512 MiB of float32."""
    x = torch.ones(128 * 1024**2)
    return x.numel() * x.element_size() / best_seconds(x.sum, seconds)


def decode_floor_seconds(
    lm: FrozenLM, lengths: list[int], new_tokens: int, chain_s: float, read_rate: float
) -> dict:
    """The least time any loop could decode one row per prompt (prompt ``lengths``) for ``new_tokens``,
    by parts: ``steps`` = the matmul chain at M = rows once per new token (``chain_s``); ``prefill`` =
    the decoder's matmul chain timed at M = the prompts' real tokens (packed: no padding; the LM head
    left out); ``attention`` = reading every layer's keys and values once per step (the cache holds
    the longest prompt + t columns at step t) at the machine's streaming read rate. No sampling, no
    small ops, no writes."""
    batch, width = len(lengths), max(lengths)
    config = lm.model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    column_bytes = batch * config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * lm.dtype.itemsize
    columns_read = sum(width + t for t in range(1, new_tokens + 1))
    return {
        "steps": new_tokens * chain_s,
        "prefill": matmul_chain_seconds(lm, sum(lengths), head=False),
        "attention": column_bytes * columns_read / read_rate,
    }


def greedy_texts(lm: FrozenLM, problems, tokens: int, batch: int = 64) -> list[str]:
    prompts = lm.encode_chat([get_task("arithmetic").prompt(p) for p in problems])
    texts = []
    for start in range(0, len(problems), batch):
        chunk = prompts[start : start + batch]
        texts += decode(lm, chunk, ActionSet([GREEDY]), row_actions=0, token_budget=tokens).texts
    return texts


QUICK = {"batches": "32,128", "new_tokens": 48, "repeats": 1, "accuracy_problems": 48}
"""``--quick``: the sizes for a run of at most 15 minutes on either kind of CPU (an AVX2-only one
decodes fp32 at ~190 tok/s at batch 128, so the full run's 128 tokens x 3 rounds would take over an hour)."""
FULL = {"batches": "32,128", "new_tokens": 128, "repeats": 3, "accuracy_problems": 200}


def timed_dtypes(requested: str, cpu: CpuFeatures) -> tuple[list[str], dict[str, str]]:
    """The dtypes to time (``auto``: the ones this CPU computes natively) and, for each dtype left out,
    why (printed and in the JSON)."""
    wanted = list(cpu.fast_dtypes) if requested == "auto" else [d for d in requested.split(",") if d]
    if not wanted or any(d not in ("fp32", "bf16") for d in wanted) or "fp32" not in wanted:
        raise SystemExit(f"--dtypes must be auto or a list of fp32,bf16 that includes fp32, got {requested!r}")
    skipped = {}
    if "bf16" not in wanted:
        skipped["bf16"] = (
            "not computed natively (no avx512_bf16 / amx_bf16: emulated, ~100x slower than fp32)"
            if not cpu.native_bf16
            else "not requested"
        )
    return wanted, skipped


# ---- on a GPU (--device cuda) ----------------------------------------------------------------------


def copy_bytes_per_s(device: torch.device, seconds: float = 1.0, size: int = 1 << 30) -> float:
    """Device memory bandwidth: bytes read plus written per second by a ``size``-byte (1 GiB)
    device-to-device copy (best of the timed copies)."""
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() / best_cuda_seconds(lambda: dst.copy_(src), seconds, device=device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_cuda_seconds(fn, seconds: float = 1.0, warmup: int = 1, device: torch.device | None = None) -> float:
    """Best wall time of ``fn()`` with the device synchronised around each call."""
    device = device or torch.device("cuda")
    for _ in range(warmup):
        fn()
    sync(device)
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t)
    return best


def memory_floor_seconds(lm: FrozenLM, lengths: list[int], new_tokens: int, rate: float) -> float:
    """The least time any decode of one row per prompt could take for ``new_tokens`` on a memory-bound
    GPU: every step reads every weight once and every row's keys and values once (prompt + the tokens
    so far), at the measured copy rate. Prefill, sampling and writes left out."""
    config = lm.model.config
    weight_bytes = sum(p.numel() * p.element_size() for p in lm.model.parameters())  # tied: counted once
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    column_bytes = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * lm.dtype.itemsize
    kv_columns = sum(sum(length + t for length in lengths) for t in range(1, new_tokens + 1))
    return (new_tokens * weight_bytes + kv_columns * column_bytes) / rate


def greedy_agreement(lm: FrozenLM, prompts, tokens: int, near_tie: float) -> dict:
    """Rows of our greedy loop against HF ``generate(do_sample=False)`` on the same model: identical
    rows, and for the others whether HF's logits at the first differing step put our token within
    ``near_tie`` of HF's (a near-tie: rounding of different kernels decides it)."""
    ours = decode(lm, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=tokens, stop_token_ids=[])
    ids, mask = lm.pad(prompts)
    with torch.inference_mode():
        out = lm.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                                do_sample=False, output_scores=True, return_dict_in_generate=True,
                                pad_token_id=lm.tokenizer.pad_token_id)
    theirs = out.sequences[:, ids.shape[1]:].cpu()
    identical, near_ties, gaps = 0, 0, []
    for row in range(len(prompts)):
        differ = (ours.tokens[row, :tokens] != theirs[row]).nonzero()
        if len(differ) == 0:
            identical += 1
            continue
        step = int(differ[0])
        scores = out.scores[step][row].float()
        gap = float(scores[theirs[row, step]] - scores[ours.tokens[row, step]])
        gaps.append(round(gap, 4))
        near_ties += gap <= near_tie
    return {"rows": len(prompts), "tokens": tokens, "identical": identical, "near_ties": near_ties,
            "near_tie_logit_gap": near_tie, "first_difference_gaps": gaps}


def time_hf_compiled(run, batch: int, repeats: int, device: torch.device, loop_rate: float) -> dict:
    """HF ``generate()`` with a static cache, its forward compiled (``reduce-overhead``: CUDA graphs):
    one warm-up call (the compilation, timed apart), then the best of ``repeats``."""
    try:
        start = time.perf_counter()
        run()
        sync(device)
        compile_s = time.perf_counter() - start
        best = 0.0
        for _ in range(repeats):
            start = time.perf_counter()
            tokens = run()
            sync(device)
            best = max(best, tokens / (time.perf_counter() - start))
    except Exception as err:  # a compiler missing on the machine: say so, keep the rest
        print(f"batch {batch}: HF static cache compiled failed: {type(err).__name__}: {err}"[:400], flush=True)
        return {f"hf_static_compiled_error_b{batch}": f"{type(err).__name__}: {err}"[:400]}
    print(f"batch {batch}: HF static cache compiled {best:.0f} tok/s (compiled in {compile_s:.0f} s); loop = "
          f"{loop_rate / best:.2f}x it", flush=True)
    return {f"hf_static_compiled_tok_s_b{batch}": round(best, 1), f"hf_static_compiled_warmup_s_b{batch}":
            round(compile_s, 1), f"loop_vs_hf_static_compiled_b{batch}": round(loop_rate / best, 3)}


@torch.inference_mode()
def step_breakdown(lm: FrozenLM, prompts, new_tokens: int, device: torch.device) -> dict:
    """Where a decode's time goes: the prefill (``start_decode``) alone, and the LM's step alone (the
    state's ``step``, CUDA graphs replayed, no statistics, sampler or bookkeeping), per step."""
    sync(device)
    start = time.perf_counter()
    _, logits, state = lm.start_decode(prompts, None, max_new_tokens=new_tokens + 8)
    sync(device)
    prefill_s = time.perf_counter() - start
    tokens = logits.argmax(-1)
    for _ in range(8):  # capture
        state.step(tokens)
    sync(device)
    start = time.perf_counter()
    for _ in range(new_tokens):
        state.step(tokens)
    sync(device)
    return {"prefill_ms": 1e3 * prefill_s, "lm_step_ms": 1e3 * (time.perf_counter() - start) / new_tokens}


def batch_invariance(lm: FrozenLM, prompts, tokens: int, batch: int = 8) -> dict:
    """Greedy rows (``tokens`` new tokens each, EOS suppressed) decoded in one batch and, reversed, in
    batches of ``batch``: how many rows come out identical (a row's tokens must not depend on its
    batch mates)."""
    greedy = ActionSet([GREEDY])
    together = decode(lm, prompts, greedy, row_actions=0, token_budget=tokens, stop_token_ids=[]).tokens
    order = list(range(len(prompts)))[::-1]
    apart = {}
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        result = decode(lm, [prompts[i] for i in chunk], greedy, row_actions=0, token_budget=tokens, stop_token_ids=[])
        apart.update({i: result.tokens[slot] for slot, i in enumerate(chunk)})
    identical = sum(torch.equal(together[i], apart[i]) for i in range(len(prompts)))
    return {"rows": len(prompts), "tokens": tokens, "batch": batch, "identical": identical}


def markdown_table(summary: dict, batches: list[int]) -> str:
    """The figures of ``main_cuda`` as the Markdown table of ``docs/gpu.md`` (tok/s; "—" where missing)."""
    def rate(key: str) -> str:
        value = summary.get(key)
        return "—" if value is None else f"{value:,.0f}"

    def ratio(key: str, percent: bool = False) -> str:
        value = summary.get(key)
        return "—" if value is None else (f"{value:.1%}" if percent else f"{value:.2f}x")

    columns = ["loop", "loop_uncompiled", "loop_eager_step", "loop_variant", "mixed", "adapter", "hf_generate",
               "hf_static_compiled"]
    lines = [f"{summary.get('gpu')}, torch {summary.get('torch')}, shape {summary.get('shape')}, "
             f"{summary.get('dtype')}, {summary.get('new_tokens')} new tokens, tok/s", "",
             "| batch | " + " | ".join(columns) + " | loop / HF generate | loop / HF static compiled | floor | "
             "loop / floor | adapter over Mixed |",
             "| --- " * (len(columns) + 6) + "|"]
    for b in batches:
        cells = [rate(f"{c}_tok_s_b{b}") for c in columns]
        error = summary.get(f"hf_static_compiled_error_b{b}")
        if error:
            cells[-1] = "failed: " + error.replace("|", "/")[:120]
        lines.append(f"| b{b} | " + " | ".join(cells) + f" | {ratio(f'loop_vs_hf_generate_b{b}')} | "
                     f"{ratio(f'loop_vs_hf_static_compiled_b{b}')} | {rate(f'floor_tok_s_b{b}')} | "
                     f"{ratio(f'frac_floor_b{b}', True)} | {ratio(f'adapter_overhead_b{b}', True)} |")
    if summary.get("step_compile_failed"):
        lines += ["", f"the loop's step did not compile and ran uncompiled: {summary['step_compile_failed']}"]
    invariance = summary.get("batch_invariant_rows")
    if invariance:
        lines += ["", f"batch invariance: {invariance['identical']}/{invariance['rows']} greedy rows identical over "
                  f"{invariance['tokens']} tokens, one batch vs reversed batches of {invariance['batch']}"]
    agreement = summary.get("greedy_vs_hf")
    if agreement:
        lines += [f"greedy vs HF greedy: {agreement['identical']}/{agreement['rows']} rows identical over "
                  f"{agreement['tokens']} tokens, {agreement['near_ties']} of the others first differ at a near-tie"]
    return "\n".join(lines) + "\n"


def main_cuda(args) -> None:
    """Loop (CUDA graphs), loop with the eager step, loop + token adapter, HF generate() default and
    HF with a static cache compiled, against the memory floor; all on one GPU in one run."""
    from random_weights import random_llama

    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # float32: a dry run of this code on a CPU
    lm = random_llama(args.random_weights, args.tokenizer, dtype, str(device))
    lm.graphs_without_capture = device.type == "cpu"  # a dry run: the GPU's code path, run eagerly
    name = describe_device(device)
    eager = FrozenLM(lm.model, lm.tokenizer, dataclasses.replace(lm.spec, cuda_graphs=False))
    uncompiled = FrozenLM(lm.model, lm.tokenizer, dataclasses.replace(lm.spec, compile_step=False))
    variant = FrozenLM(lm.model, lm.tokenizer, dataclasses.replace(lm.spec, batch_invariant=False))
    for other in (uncompiled, variant):
        other.graphs_without_capture = lm.graphs_without_capture
    config = lm.model.config
    print(f"GPU: {name}; torch {torch.__version__}; shape {args.random_weights} "
          f"({sum(p.numel() for p in lm.model.parameters()) / 1e9:.3f}B parameters, {lm.dtype}, sdpa), random weights",
          flush=True)
    rate = copy_bytes_per_s(device, size=1 << 30 if device.type == "cuda" else 1 << 26)
    print(f"copy bandwidth {rate / 1e12:.2f} TB/s (read + write)", flush=True)
    summary: dict = {"gpu": name, "torch": torch.__version__,
                     "shape": args.random_weights, "dtype": str(dtype).removeprefix("torch."),
                     "parameters": sum(p.numel() for p in lm.model.parameters()),
                     "new_tokens": args.new_tokens, "repeats": args.repeats, "copy_tb_s": round(rate / 1e12, 3)}
    temperature_one = ActionSet([DecodingAction(temperature=1.0)])
    token_actions = ActionSet(PRESETS["math-token"])
    policy = TokenPolicy(
        TokenPolicyConfig(hidden_size=config.hidden_size, num_actions=4, token_budget=args.new_tokens)
    ).eval().to(device)
    compile_config = None
    if args.hf_compiled:
        from transformers import CompileConfig

        compile_config = CompileConfig(mode="reduce-overhead")

    if args.accuracy_problems:
        prompts = lm.encode_chat(prompt_mix(args.accuracy_problems))
        agreement = greedy_agreement(lm, prompts, args.accuracy_tokens, near_tie=0.0625)
        summary["greedy_vs_hf"] = agreement
        a = agreement
        print(f"greedy loop vs HF greedy on the same GPU and dtype: {a['identical']}/{a['rows']} rows identical over "
              f"{a['tokens']} tokens; of the others {a['near_ties']} differ first at a near-tie (HF logit gap <= "
              f"{a['near_tie_logit_gap']}); gaps {a['first_difference_gaps']}", flush=True)
    if args.invariance_rows:
        start = time.perf_counter()
        invariance = batch_invariance(lm, lm.encode_chat(prompt_mix(args.invariance_rows)), args.invariance_tokens)
        summary["batch_invariant_rows"] = invariance
        print(f"batch invariance: {invariance['identical']}/{invariance['rows']} greedy rows identical over "
              f"{invariance['tokens']} tokens, one batch vs reversed batches of {invariance['batch']} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    compiled_runs = {}
    for batch in [int(b) for b in args.batches.split(",") if b]:
        prompts = lm.encode_chat(prompt_mix(batch))
        lengths = [len(p) for p in prompts]

        def hf(static: bool = False, prompts=prompts, batch=batch) -> int:
            ids, mask = lm.pad(prompts)
            extra = {"cache_implementation": "static", "compile_config": compile_config} if static else {}
            with torch.inference_mode():
                lm.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                                  min_new_tokens=args.new_tokens, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                  pad_token_id=lm.tokenizer.pad_token_id, **extra)
            return batch * args.new_tokens

        def loop(model: FrozenLM, chooser=None, prompts=prompts) -> int:
            actions = temperature_one if chooser is None else token_actions
            fixed = 0 if chooser is None else None
            result = decode(model, prompts, actions, row_actions=fixed, chooser=chooser, token_budget=args.new_tokens,
                            stop_token_ids=[])
            return int(result.lengths.sum())

        runs = {
            "loop": lambda: loop(lm),
            "loop_uncompiled": lambda: loop(uncompiled),
            "loop_eager_step": lambda: loop(eager),
            "mixed": lambda: loop(lm, UniformChooser(len(token_actions))),
            "adapter": lambda: loop(lm, TokenPolicyChooser(policy)),
            "hf_generate": lambda: hf(),
        }
        if args.variant:
            runs["loop_variant"] = lambda: loop(variant)
        warm: dict[str, float] = {}
        for name, fn in runs.items():  # warm-up: graph captures, HF's compilation
            start = time.perf_counter()
            fn()
            sync(device)
            warm[name] = time.perf_counter() - start
        summary[f"warmup_s_b{batch}"] = {k: round(v, 2) for k, v in warm.items()}
        print(f"batch {batch}: warm-up seconds {summary[f'warmup_s_b{batch}']}", flush=True)
        rates: dict[str, float] = {}
        for r in range(args.repeats):
            order = list(runs.items())
            for name, fn in order if r % 2 == 0 else reversed(order):
                sync(device)
                start = time.perf_counter()
                tokens = fn()
                sync(device)
                rate_now = tokens / (time.perf_counter() - start)
                rates[name] = max(rates.get(name, 0.0), rate_now)
                print(f"batch {batch:4d} round {r + 1} {name:18s} {rate_now:10.0f} tok/s", flush=True)
        floor = batch * args.new_tokens / memory_floor_seconds(lm, lengths, args.new_tokens, rate)
        parts = step_breakdown(lm, prompts, args.new_tokens, device)
        parts["loop_step_ms"] = (1e3 * batch * args.new_tokens / rates["loop"] - parts["prefill_ms"]) / args.new_tokens
        summary[f"breakdown_ms_b{batch}"] = {k: round(v, 3) for k, v in parts.items()}
        print(f"batch {batch}: prefill {parts['prefill_ms']:.1f} ms; the LM's step alone {parts['lm_step_ms']:.2f} ms, "
              f"a loop step {parts['loop_step_ms']:.2f} ms (its prefill taken out)", flush=True)
        for name, value in rates.items():
            summary[f"{name}_tok_s_b{batch}"] = round(value, 1)
        figures = {
            f"loop_vs_hf_generate_b{batch}": rates["loop"] / rates["hf_generate"],
            f"loop_vs_eager_step_b{batch}": rates["loop"] / rates["loop_eager_step"],
            f"loop_vs_uncompiled_b{batch}": rates["loop"] / rates["loop_uncompiled"],
            f"adapter_overhead_b{batch}": 1 - rates["adapter"] / rates["mixed"],
            f"adapter_vs_loop_b{batch}": 1 - rates["adapter"] / rates["loop"],
            f"floor_tok_s_b{batch}": floor,
            f"frac_floor_b{batch}": rates["loop"] / floor,
        }
        summary.update({k: round(v, 3) for k, v in figures.items()})
        print(
            f"batch {batch}: loop {rates['loop']:.0f} tok/s = {figures[f'loop_vs_hf_generate_b{batch}']:.2f}x HF "
            f"generate() {rates['hf_generate']:.0f}; eager step {rates['loop_eager_step']:.0f} "
            f"(graphs {figures[f'loop_vs_eager_step_b{batch}']:.2f}x); adapter {rates['adapter']:.0f}: overhead "
            f"{figures[f'adapter_overhead_b{batch}']:.1%} over per-token Mixed, "
            f"{figures[f'adapter_vs_loop_b{batch}']:.1%} under the plain loop; memory floor {floor:.0f} tok/s, "
            f"loop = {figures[f'frac_floor_b{batch}']:.0%} of it",
            flush=True,
        )
        compiled_runs[batch] = (lambda hf=hf: hf(static=True), rates["loop"])
        summary["step_compile_failed"] = lm._graphed_decoder.compile_failed  # None: the loop's step compiled
        write_figures(args, summary)  # after every batch: the files hold every figure so far
    if compile_config is not None:  # last: its compilation takes a while (once per batch size) and may fail
        for batch, (run, loop_rate) in compiled_runs.items():
            summary.update(time_hf_compiled(run, batch, args.repeats, device, loop_rate))
            write_figures(args, summary)


def write_figures(args, summary: dict) -> None:
    """Print the figures so far as one JSON line, and write them to ``--json`` / ``--table`` if given."""
    print(json.dumps(summary), flush=True)
    batches = [int(b) for b in args.batches.split(",") if b]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    if args.table:
        with open(args.table, "w") as f:
            f.write(markdown_table(summary, batches))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--quick", action="store_true", help=f"sizes for <= 15 minutes on either CPU kind: {QUICK}")
    parser.add_argument("--batches", help=f"comma-separated batch sizes (empty: accuracy only); {FULL['batches']}")
    parser.add_argument("--new-tokens", type=int, help=f"default {FULL['new_tokens']}")
    parser.add_argument("--repeats", type=int, help=f"default {FULL['repeats']}")
    parser.add_argument(
        "--accuracy-problems", type=int, help=f"0 skips the accuracy check; default {FULL['accuracy_problems']}"
    )
    parser.add_argument("--accuracy-tokens", type=int, default=24)
    parser.add_argument(
        "--dtypes", default="auto", help="auto: fp32, plus bf16 where the CPU computes it natively; or e.g. fp32,bf16"
    )
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu", help="cpu (the CPU figures above) or cuda (the GPU run: main_cuda)")
    parser.add_argument("--random-weights", choices=("default", "1b", "tiny"), default="default",
                        help="cuda: the model shape, with random weights (random_weights.py)")
    parser.add_argument("--tokenizer", help="cuda: directory with the default model's tokenizer (random_weights.py)")
    parser.add_argument("--hf-compiled", action=argparse.BooleanOptionalAction, default=True,
                        help="cuda: also time HF generate() with a static cache compiled (reduce-overhead)")
    parser.add_argument("--gpu-table", action="store_true",
                        help="run the GPU table (main_cuda) on --device cpu too: a dry run of its code")
    parser.add_argument("--variant", action=argparse.BooleanOptionalAction, default=True,
                        help="GPU table: also time the loop with batch_invariant=False")
    parser.add_argument("--invariance-rows", type=int, default=96,
                        help="GPU table: greedy rows of the batch-invariance check (0: none)")
    parser.add_argument("--invariance-tokens", type=int, default=128)
    parser.add_argument("--json", help="GPU table: write the figures to this JSON file")
    parser.add_argument("--table", help="GPU table: write the figures to this Markdown file")
    args = parser.parse_args()
    if args.device != "cpu" or args.gpu_table:
        for key, value in {"batches": "32,128", "new_tokens": 128, "repeats": 2, "accuracy_problems": 32}.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        if args.tokenizer is None:
            args.tokenizer = locate_model("smollm2")
        main_cuda(args)
        return
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",") if b]  # "" runs the accuracy check only
    cpu = cpu_features()
    dtypes, skipped = timed_dtypes(args.dtypes, cpu)
    print(f"CPU: {cpu.describe()}", flush=True)
    for dt, why in skipped.items():
        print(f"skipping {dt}: {why}", flush=True)
    fast = dtypes[-1]  # the dtype Mixed and the adapter run in: bf16 where timed, else fp32

    keep_freed_memory()  # as the CLI runs (cpu_allocator); HF generate in this process gets it too
    lms = {"fp32": load_frozen_lm(ModelSpec(name_or_path=args.model, dtype="float32"))}
    if "bf16" in dtypes:
        lms["bf16"] = FrozenLM(
            copy.deepcopy(lms["fp32"].model).to(torch.bfloat16), lms["fp32"].tokenizer, lms["fp32"].spec
        )
    attention = lms["fp32"].model.config._attn_implementation
    sdpa_models = {}  # HF's default attention, for the HF peer only
    for dt, lm in lms.items():
        sdpa_models[dt] = copy.deepcopy(lm.model)
        sdpa_models[dt].set_attn_implementation("sdpa")
    sgemm_spec = dataclasses.replace(lms["fp32"].spec, linear_kernel="torch")
    lms["fp32_sgemm"] = FrozenLM(lms["fp32"].model, lms["fp32"].tokenizer, sgemm_spec)  # same weights
    config = lms["fp32"].model.config
    flops = flops_per_token(config)
    temperature_one = ActionSet([DecodingAction(temperature=1.0)])
    token_actions = ActionSet(PRESETS["math-token"])
    policy = TokenPolicy(
        TokenPolicyConfig(hidden_size=config.hidden_size, num_actions=4, token_budget=args.new_tokens)
    ).eval()
    summary: dict = {
        "cpu_model": cpu.model,
        "cpu_flags": cpu.relevant(),
        "native_bf16": cpu.native_bf16,
        "dtypes_timed": dtypes,
        "dtypes_skipped": skipped,
        "quick": args.quick,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "threads": args.threads,
        "flops_per_token": flops,
        "attention": attention,
    }
    read_rate = read_bytes_per_s()
    summary["read_gb_s"] = round(read_rate / 1e9, 1)

    for batch in batches:
        prompts = lms["fp32"].encode_chat(prompt_mix(batch))
        lengths = [len(p) for p in prompts]
        groups = prefill_groups(lengths)
        padding = {"one_width": padded_fraction(lengths), "grouped": padded_fraction(lengths, groups)}
        summary[f"prefill_padded_fraction_b{batch}"] = {k: round(v, 3) for k, v in padding.items()}
        summary[f"prefill_groups_b{batch}"] = len(groups)
        print(
            f"batch {batch}: prompts {min(lengths)}-{max(lengths)} tokens; padded share of the prefill "
            f"{padding['one_width']:.1%} at one width, {padding['grouped']:.1%} in {len(groups)} length groups "
            "(prefill_groups, as the loop prefills)",
            flush=True,
        )
        prefill_s = {"one_width": float("inf"), "grouped": float("inf")}
        with torch.inference_mode():
            for _ in range(3):  # interleaved, best of 3: a prefill takes seconds
                for way, cost in (("one_width", len(prompts) * max(lengths)), ("grouped", PREFILL_GROUP_COST_TOKENS)):
                    start = time.perf_counter()
                    lms[fast].start_decode(prompts, None, 1, group_cost=cost)
                    prefill_s[way] = min(prefill_s[way], time.perf_counter() - start)
        summary[f"prefill_s_{fast}_b{batch}"] = {way: round(v, 3) for way, v in prefill_s.items()}
        print(
            f"batch {batch}: prefill in {fast} {prefill_s['one_width']:.2f} s at one width, "
            f"{prefill_s['grouped']:.2f} s in groups ({prefill_s['one_width'] / prefill_s['grouped']:.2f}x)",
            flush=True,
        )

        # The runs below call these within this iteration; the defaults bind its prompts and batch.
        def hf(lm: FrozenLM, model=None, prompts=prompts, batch=batch) -> int:
            ids, mask = lm.pad(prompts)
            with torch.inference_mode():
                (lm.model if model is None else model).generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens,
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    pad_token_id=lm.tokenizer.pad_token_id,
                )
            return batch * args.new_tokens

        def loop(lm: FrozenLM, chooser=None, prompts=prompts) -> int:
            if chooser is None:
                result = decode(
                    lm, prompts, temperature_one, row_actions=0, token_budget=args.new_tokens, stop_token_ids=[]
                )
            else:
                result = decode(
                    lm, prompts, token_actions, chooser=chooser, token_budget=args.new_tokens, stop_token_ids=[]
                )
            return int(result.lengths.sum())

        runs = {
            "hf_fp32": lambda: hf(lms["fp32"]),
            "hf_fp32_sdpa": lambda: hf(lms["fp32"], sdpa_models["fp32"]),
            "loop_fp32": lambda: loop(lms["fp32"]),
            "loop_fp32_sgemm": lambda: loop(lms["fp32_sgemm"]),
        }
        if "bf16" in dtypes:
            runs.update({
                "hf_bf16": lambda: hf(lms["bf16"]),
                "hf_bf16_sdpa": lambda: hf(lms["bf16"], sdpa_models["bf16"]),
                "loop_bf16": lambda: loop(lms["bf16"]),
            })
        runs[f"mixed_{fast}"] = lambda: loop(lms[fast], UniformChooser(len(token_actions)))
        runs[f"adapter_{fast}"] = lambda: loop(lms[fast], TokenPolicyChooser(policy))
        rates: dict[str, list[float]] = {}
        for lm in lms.values():  # warm-up
            decode(lm, prompts[:4], temperature_one, row_actions=0, token_budget=4)
        for r in range(args.repeats):
            order = list(runs.items())
            for name, fn in order if r % 2 == 0 else reversed(order):  # no method is always last
                start = time.perf_counter()
                tokens = fn()
                rates.setdefault(name, []).append(tokens / (time.perf_counter() - start))
                print(f"batch {batch:4d} round {r + 1} {name:13s} {rates[name][-1]:8.1f} tok/s", flush=True)
        median = {name: statistics.median(v) for name, v in rates.items()}
        gflops = {
            dt: matmul_gflops(batch, config.hidden_size, config.intermediate_size, dtype, lms[dt].linear)
            for dt, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
            if dt in dtypes
        }
        limit = {dt: g * 1e9 / flops for dt, g in gflops.items()}
        top = max(gflops, key=gflops.get)  # the limits and the floor come from the fastest dtype that runs
        chain_s = matmul_chain_seconds(lms[top], batch)
        chain_limit = batch / chain_s
        floor = decode_floor_seconds(lms[top], lengths, args.new_tokens, chain_s, read_rate)
        floor_tok_s = batch * args.new_tokens / sum(floor.values())
        best = max(median[f"loop_{dt}"] for dt in dtypes)
        hf_best = {dt: max(median[f"hf_{dt}"], median[f"hf_{dt}_sdpa"]) for dt in dtypes}
        ratio = {dt: median[f"loop_{dt}"] / hf_best[dt] for dt in dtypes}
        adapter_overhead = 1 - median[f"adapter_{fast}"] / median[f"mixed_{fast}"]
        for name, value in median.items():
            summary[f"{name}_tok_s_b{batch}"] = round(value, 1)
        summary.update({f"loop_vs_hf_{dt}_b{batch}": round(ratio[dt], 3) for dt in dtypes})
        summary.update({f"matmul_gflops_{dt}_b{batch}": round(g, 1) for dt, g in gflops.items()})
        summary.update(
            {
                f"limit_dtype_b{batch}": top,
                f"onednn_vs_sgemm_fp32_b{batch}": round(median["loop_fp32"] / median["loop_fp32_sgemm"], 3),
                f"adapter_overhead_b{batch}": round(adapter_overhead, 3),
                f"actions_overhead_b{batch}": round(1 - median[f"mixed_{fast}"] / median[f"loop_{fast}"], 3),
                f"limit_tok_s_{top}_b{batch}": round(limit[top], 1),
                f"frac_{top}_limit_b{batch}": round(best / limit[top], 3),
                f"chain_limit_tok_s_{top}_b{batch}": round(chain_limit, 1),
                f"frac_{top}_chain_limit_b{batch}": round(best / chain_limit, 3),
                f"prompt_tokens_b{batch}": sum(lengths),
                f"floor_tok_s_{top}_b{batch}": round(floor_tok_s, 1),
                f"floor_parts_s_{top}_b{batch}": {part: round(v, 2) for part, v in floor.items()},
                f"frac_{top}_floor_b{batch}": round(best / floor_tok_s, 3),
                f"floor_vs_{top}_limit_b{batch}": round(floor_tok_s / limit[top], 3),
            }
        )
        ratios = ", ".join(f"{dt} {ratio[dt]:.2f}x" for dt in dtypes)
        print(
            f"batch {batch}: loop / faster HF generate {ratios} "
            f"(target >= 1.5x); adapter overhead over per-token Mixed {adapter_overhead:.1%} (target <= 5%); "
            f"matmul {gflops[top]:.0f} GFLOP/s {top} = {limit[top]:.0f} tok/s limit, "
            f"best loop {best:.0f} tok/s = {best / limit[top]:.0%} of it (target >= 50%); "
            f"the LM's whole matmul chain alone {chain_limit:.0f} tok/s, best loop = {best / chain_limit:.0%} of it",
            flush=True,
        )
        print(
            f"batch {batch}: floor of any loop in {top} (steps' matmuls {floor['steps']:.1f} s + prefill's "
            f"{floor['prefill']:.1f} s + KV reads {floor['attention']:.1f} s at {read_rate / 1e9:.0f} GB/s) = "
            f"{floor_tok_s:.0f} tok/s = {floor_tok_s / limit[top]:.0%} of the matmul limit; best loop = "
            f"{best / floor_tok_s:.0%} of the floor",
            flush=True,
        )

    if args.accuracy_problems:
        task = get_task("arithmetic")
        problems = task.load("test")[: args.accuracy_problems]
        texts = {}
        for dt, lm in lms.items():
            start = time.perf_counter()
            texts[dt] = greedy_texts(lm, problems, args.accuracy_tokens)
            accuracy = sum(task.reward(p, t) for p, t in zip(problems, texts[dt])) / len(problems)
            summary[f"greedy_accuracy_{dt}"] = round(accuracy, 4)
            print(
                f"greedy accuracy {dt}: {accuracy:.3f} on {len(problems)} test problems at "
                f"{args.accuracy_tokens} tokens ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        identical = sum(a == b for a, b in zip(texts["fp32"], texts["fp32_sgemm"])) / len(problems)
        print(f"fp32 greedy rows unchanged by the oneDNN kernel: {identical:.1%}", flush=True)
        summary.update({"accuracy_problems": len(problems), "accuracy_tokens": args.accuracy_tokens,
                        "greedy_rows_identical_onednn_vs_sgemm": round(identical, 4)})
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
