"""Rollout throughput of a vLLM engine against the project's own loop, side by side in one run.

Both generate the same rollouts: ``--batch`` rows (distinct arithmetic prompts, chat template
applied), one sampled action (T = 1), exactly ``--new-tokens`` tokens per row (EOS ignored), in
``--dtype``. The loop is ``decode()`` as the ``hf`` backend runs it; vLLM gets the ``SamplingParams``
that ``--backend vllm`` sends for the same rows (``sampling_params_dict``, plus ``ignore_eos``),
all rows in one ``LLM.generate`` call. Without a CUDA GPU that is vLLM's CPU build (``make
test-vllm`` installs it in ``.venv-vllm``), with ``VLLMConfig``'s CPU settings.

Threads: vLLM's CPU engine runs ``OMP_NUM_THREADS`` threads (it drops to one when unset), so the
script sets it to ``--threads`` before vLLM starts. The engine runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as in the vLLM lane), so the loop runs with the same
threads and core binding. Rounds alternate the order of the two; the median of ``--repeats``
rounds is kept. Shared machines are noisy: compare the ratio, measured side by side, rather than
the absolute rates.

Last line: one JSON object with every figure.

    .venv-vllm/bin/python benchmarks/vllm_throughput.py [--batch 64] [--new-tokens 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="rows (distinct prompts) per rollout call")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per row")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the median is kept")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for each side")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read by vLLM's CPU worker at start
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process

    import torch
    import vllm

    from decoding_adapters.decoding.actions import ActionSet, DecodingAction
    from decoding_adapters.decoding.loop import decode, row_seed
    from decoding_adapters.decoding.rollouts import encode_problems
    from decoding_adapters.decoding.vllm_rollouts import VLLMConfig, sampling_params_dict, shared_engine
    from decoding_adapters.lm.models import ModelSpec, load_frozen_lm
    from decoding_adapters.tasks import get_task

    spec = ModelSpec(dtype=args.dtype)
    lm = load_frozen_lm(spec)
    task = get_task("arithmetic")
    problems = task.load("validation")[: args.batch]
    prompts, _ = encode_problems(lm, task, problems)
    prompts = (prompts * (args.batch // len(prompts) + 1))[: args.batch]
    action = DecodingAction(temperature=1.0)
    seeds = [row_seed(0, i) for i in range(args.batch)]
    llm = shared_engine(spec, VLLMConfig(dtype=args.dtype, max_model_len=max(map(len, prompts)) + args.new_tokens))
    params = [vllm.SamplingParams(**sampling_params_dict(action, args.new_tokens, seed), ignore_eos=True)
              for seed in seeds]
    inputs = [{"prompt_token_ids": p} for p in prompts]

    torch.set_num_threads(args.threads)  # after the engine's start, which sets its own count

    def run_loop() -> int:
        result = decode(lm, prompts, ActionSet([action]), row_actions=0, token_budget=args.new_tokens,
                        row_seeds=seeds, stop_token_ids=[])
        return int(result.lengths.sum())

    def run_vllm() -> int:
        outputs = llm.generate(inputs, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)

    runs = {"loop": run_loop, "vllm": run_vllm}
    for run in runs.values():  # warm-up: first calls allocate and load kernels
        run()
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for round_index in range(args.repeats):
        order = list(runs) if round_index % 2 == 0 else list(reversed(runs))
        for name in order:
            start = time.perf_counter()
            tokens = runs[name]()
            seconds = time.perf_counter() - start
            assert tokens == args.batch * args.new_tokens, (name, tokens)
            rates[name].append(tokens / seconds)
            print(f"round {round_index}: {name:5s} {tokens / seconds:8.1f} tok/s ({seconds:.1f} s)", flush=True)
    median = {name: statistics.median(values) for name, values in rates.items()}
    ratio = median["vllm"] / median["loop"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"vLLM {vllm.__version__} ({device}) vs the loop, batch {args.batch} x {args.new_tokens} tokens, "
          f"{args.dtype}, {torch.get_num_threads()} threads: {median['vllm']:.1f} vs {median['loop']:.1f} tok/s, "
          f"ratio vllm/loop = {ratio:.2f}")
    print(json.dumps({"vllm_version": vllm.__version__, "device": device, "batch": args.batch,
                      "new_tokens": args.new_tokens, "dtype": args.dtype, "threads": args.threads,
                      "repeats": args.repeats, "tok_s": rates, "median_tok_s": median, "ratio_vllm_over_loop": ratio}))


if __name__ == "__main__":  # a spawned engine core (VLLM_ENABLE_V1_MULTIPROCESSING=1) re-imports this module
    main()
