"""Arguments and builders shared by the sub-commands (model, task, rollouts, output)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .models import DEFAULT_MODEL, ModelSpec

__all__ = [
    "add_model_arguments",
    "add_task_arguments",
    "add_rollout_arguments",
    "build_lm",
    "build_task",
    "build_rollouts",
    "parse_int_list",
    "write_json",
]


def parse_int_list(text: str) -> list[int]:
    """``"1,2,4,8"`` -> ``[1, 2, 4, 8]`` with a clear error."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("frozen LM")
    g.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"'{DEFAULT_MODEL}' (embedded SmolLM2-135M-Instruct), a .gguf file, a local HF directory or a hub id")
    g.add_argument("--device", default="cpu", help="torch device (cpu, cuda, auto)")
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])


def add_task_arguments(p: argparse.ArgumentParser, max_problems: bool = True) -> None:
    g = p.add_argument_group("task")
    g.add_argument("--task", default="arithmetic", help="registered task name (arithmetic, math, gsm8k, humaneval, codecontests)")
    g.add_argument("--data", default=None, help="JSONL data path for tasks that read files (math, gsm8k, codecontests)")
    g.add_argument("--cot-ratio", type=float, default=0.0, help="fraction of prompts that get a chain-of-thought instruction (paper: 0.3)")
    g.add_argument("--system-prompt", default=None, help="system prompt preset (e.g. qwen3-math-nothink) or literal text")
    if max_problems:  # trainers have their own --max-train-prompts / --val-problems
        g.add_argument("--max-problems", type=int, default=None, help="use at most this many problems of the split")


def add_rollout_arguments(p: argparse.ArgumentParser, token_budget: int = 32) -> None:
    g = p.add_argument_group("rollouts")
    g.add_argument("--token-budget", type=int, default=token_budget, help="max new tokens per completion (b)")
    g.add_argument("--batch-rows", type=int, default=64, help="rows decoded together in one batch")
    g.add_argument("--backend", default="hf", choices=["hf", "ray", "vllm"], help="rollout engine")
    g.add_argument("--workers", type=int, default=1, help="Ray workers (backend ray)")
    g.add_argument("--ray-address", default=None, help="join an existing Ray cluster instead of starting a local one")
    g.add_argument("--seed", type=int, default=0)


def build_lm(args):
    from .models import load_frozen_lm

    return load_frozen_lm(ModelSpec(name_or_path=args.model, device=args.device, dtype=args.dtype))


def task_options(args) -> dict:
    """The ``get_task`` keyword options given on the command line (Ray workers rebuild the task from them)."""
    options = {}
    if args.data is not None:
        options["data"] = args.data
    if args.system_prompt is not None:
        options["system_prompt"] = args.system_prompt
    return options


def build_task(args):
    from .tasks import get_task

    return get_task(args.task, **task_options(args))


def build_rollouts(args, lm, action_set):
    from .rollouts import make_rollouts

    return make_rollouts(args.backend, lm, action_set, batch_rows=args.batch_rows, workers=args.workers,
                         ray_address=args.ray_address, model_spec=lm.spec)


def write_json(path: str | Path, obj) -> Path:
    """Write JSON atomically (temp file + rename), so a kill never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    tmp.replace(path)
    return path
