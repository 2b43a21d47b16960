"""Helpers shared by test folders: a tiny base model on disk and untrained adapters for it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.policies.networks import (
    AdapterConfig,
    SequencePolicy,
    SequencePolicyConfig,
    TokenPolicy,
    TokenPolicyConfig,
    save_adapter,
)


def save_tiny_base(lm, directory: Path) -> Path:
    """The tiny model as an HF directory, so ``from_pretrained`` can load it from ``base_model``."""
    if not (directory / "config.json").exists():
        lm.model.save_pretrained(directory)
        lm.tokenizer.save_pretrained(directory)
    return directory


def make_adapter(directory: Path, lm, kind: str, base_model: str | None = None, seed: int = 0,
                 stop_at_answer: bool = False, task: str = "") -> Path:
    """Save an untrained sequence or token adapter for ``lm`` into ``directory``. Without the stop
    by default: the serving tests compare its rows with a plain decode to the budget (parity)."""
    torch.manual_seed(seed)
    if kind == "sequence":
        actions = ActionSet(PRESETS["math"])
        policy = SequencePolicy(SequencePolicyConfig(embed_dim=lm.hidden_size, num_actions=len(actions)))
    else:
        actions = ActionSet(PRESETS["math-token"])
        policy = TokenPolicy(TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=len(actions), token_budget=8))
    config = AdapterConfig(kind=kind, policy=dataclasses.asdict(policy.config), actions=actions.to_json(),
                           base_model=base_model or "tiny", base_fingerprint=lm.fingerprint(),
                           parallel_budgets=[1, 2, 4, 8], stop_at_answer=stop_at_answer, task=task)
    save_adapter(directory, policy, config)
    return directory
