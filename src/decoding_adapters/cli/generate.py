"""``generate``: decode prompts with a trained adapter (``Adapter(...).generator()``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field

from ..decoding.actions import DEFAULT_TOKEN_BUDGET
from ..policies.kinds import adapter_kind, kind_names
from ..policies.networks import POLICY_MODES
from ..serving.adapter import Adapter
from ..serving.generator import AdaptiveGenerator, format_generations
from .common import add_model_arguments
from .config_args import add_config_arguments


def _adapter_help() -> str:
    """``--adapter``'s help: the command that writes each adapter kind."""
    writers = list(dict.fromkeys(adapter_kind(name).trainer for name in kind_names()))
    return f"adapter directory (written by {', '.join(writers[:-1])} or {writers[-1]})"


ADAPTER_HELP = _adapter_help()
"""The ``--adapter`` help of ``generate`` and ``serve``."""


@dataclass(frozen=True)
class GenerateOptions:
    """generation"""

    adapter: str = field(metadata={"help": ADAPTER_HELP})
    data: str | None = None
    """a draft-gated adapter's task data, where the files it records (adapter.json) are gone: as train-draft's
    --data"""
    token_budget: int | None = field(
        default=None,
        metadata={
            "help": f"max new tokens per completion (default: {DEFAULT_TOKEN_BUDGET} for every adapter, as in serve; "
            "give a token adapter's training budget to decode as it was trained)"
        },
    )
    parallel_budget: int = 1
    """completions per prompt (B)"""
    seed: int = 0
    """seed of the completions"""
    policy_mode: str | None = None
    """how the adapter picks actions: sample or argmax (default: the adapter's stored policy_mode, the mode
    evaluate reports: sample for token adapters, argmax for sequence adapters)"""
    json: bool = False
    """print one JSON document instead of readable text"""


def deterministic_from_mode(policy_mode: str | None) -> bool | None:
    """--policy-mode as the generator's ``deterministic_policy`` (None: the adapter's stored mode)."""
    if policy_mode is None:
        return None
    if policy_mode not in POLICY_MODES:
        raise ValueError(f"--policy-mode must be one of {list(POLICY_MODES)}, got {policy_mode!r}")
    return policy_mode == "argmax"


def add_generator_model_arguments(p: argparse.ArgumentParser) -> None:
    """--model / --device / --dtype, where --model defaults to the adapter's own base model (shared with serve)."""
    add_model_arguments(p, defaults={"name_or_path": None})


def generator_from_args(args) -> AdaptiveGenerator:
    """The adapter in ``--adapter`` on ``--model`` (default: its own base model), as a generator."""
    lm = args.name_or_path or "base"
    adapter = Adapter.from_pretrained(args.adapter, lm=lm, device=args.device, dtype=args.dtype)
    return adapter.generator(data=getattr(args, "data", None))


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompts", nargs="+", metavar="PROMPT", help="prompt text(s), each sent as one user message")
    add_config_arguments(p, GenerateOptions)
    add_generator_model_arguments(p)


def run_cli(args) -> int:
    gen = generator_from_args(args)
    outs = gen.generate(
        args.prompts,
        token_budget=args.token_budget,
        parallel_budget=args.parallel_budget,
        seed=args.seed,
        deterministic_policy=deterministic_from_mode(args.policy_mode),
    )
    if args.json:
        print(json.dumps({"adapter": gen.describe(), "generations": [g.to_dict() for g in outs]}, indent=2))
    else:
        print(format_generations(gen, outs))
    return 0
