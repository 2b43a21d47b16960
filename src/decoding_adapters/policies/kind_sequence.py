"""The sequence-level adapter as a kind: one action per prompt from the prompt embedding (and the
parallel budget B), chosen before decoding; all B completions of the prompt use it."""

from __future__ import annotations

from .kinds import AdapterKind, register_kind
from .networks import SequencePolicy, SequencePolicyConfig

__all__ = ["SequenceKind", "SEQUENCE"]


class SequenceKind(AdapterKind):
    name = "sequence"
    label = "sequence-level"
    level = "sequence"
    context = "the prompt embedding e (and the parallel budget B)"
    trainer = "train-sequence"
    default_policy_mode = "argmax"

    def policy_config(self, policy: dict) -> SequencePolicyConfig:
        return SequencePolicyConfig(**policy)

    def build_policy(self, policy: dict) -> SequencePolicy:
        return SequencePolicy(SequencePolicyConfig(**policy))

    def input_width(self, config, hidden_size: int) -> int | None:
        return hidden_size

    def policy_input_width(self, config) -> int:
        return config.policy.get("embed_dim")

    def method_name(self, role: str) -> str:
        return f"Seq {role}"

    def card_inputs(self, config) -> str:
        budget = (" and the parallel budget B (x = [e ; g(B)])" if config.policy.get("use_budget", True)
                  else " (x = e, no budget)")
        pooling = config.embedding.get("pooling", "mean")
        return f"one action per prompt from the LM's prompt embedding e ({pooling}-pooled final hidden state){budget}"

    def card_usage(self, config, name: str) -> list[str]:
        return [
            "from decoding_adapters import Adapter",
            "",
            f'adapter = Adapter.from_pretrained("{name}", lm="base")  # its own base model, for prompt embeddings',
            'configs = adapter.generation_config(["What is 2+3?"], n=4, max_new_tokens=256)  # transformers',
            'params = adapter.sampling_params(["What is 2+3?"], n=4, max_tokens=256)          # vLLM',
        ]


SEQUENCE = register_kind(SequenceKind())
