"""What the trainers, the evaluation and the generator need from a frozen LM and from a task.

``FrozenLM`` (``models``) and every ``Task`` subclass (``tasks.base``) satisfy these protocols;
so must the test suite's fakes (``tests/conftest.py`` checks them), which keeps a fake from
drifting away from the real thing. The protocols are runtime-checkable: ``isinstance`` checks
that every member is present (not its signature).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, Sequence, runtime_checkable

import torch

if TYPE_CHECKING:  # type hints only
    from ..tasks.base import Problem
    from .kv_cache import RowKVCache

__all__ = ["LanguageModel", "VerifiableTask", "GraphableLM"]


@runtime_checkable
class LanguageModel(Protocol):
    """A frozen causal LM as the library outside the decode loop uses it."""

    spec: Any
    """How it was loaded (a ``ModelSpec``: ``name_or_path``, ``device``, ``dtype``)."""

    @property
    def hidden_size(self) -> int:
        """Width of the hidden states (the adapters' input size)."""

    @property
    def device(self) -> torch.device: ...

    def fingerprint(self) -> dict:
        """What an adapter must match to be loaded onto this LM (``hidden_size``, ``vocab_size``)."""

    def encode_chat(self, conversations: Sequence[list[dict]]) -> list[list[int]]:
        """Token ids of each chat, with the generation prompt."""

    def prompt_embeddings(self, prompts: Sequence[Sequence[int]], pooling: Literal["mean", "last"] = "mean",
                          batch_size: int = 32) -> torch.Tensor:
        """Pooled final hidden states ``[n, hidden_size]`` of each prompt."""


class GraphableLM(Protocol):
    """What ``cuda_graphs`` captures and replays of an LM: ``FrozenLM`` satisfies it. Named here so
    that ``cuda_graphs`` needs no import of ``models``, which imports ``cuda_graphs``."""

    model: Any
    """The loaded transformers model; its ``config`` sizes the static KV buffers."""

    _graphed_decoder: Any
    """The ``GraphedDecoder`` kept on the LM between decodes (None until the first)."""

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    def step_with_row_cache(self, tokens: torch.Tensor, positions: torch.Tensor,
                            cache: RowKVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """The lean one-token step (``FrozenLM.step_with_row_cache``): (hidden, logits) per live row."""


@runtime_checkable
class VerifiableTask(Protocol):
    """A task with a verifiable reward: problems by split, their prompts, and a 0/1 reward."""

    name: str

    def load(self, split: str) -> list[Problem]: ...

    def prompt(self, problem: Problem, cot: bool = False) -> list[dict[str, str]]: ...

    def reward(self, problem: Problem, completion: str) -> float: ...

    def reward_batch(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[float]: ...

    def extract_answer(self, problem: Problem, completion: str) -> str: ...
