"""The draft-gated adapter as a kind: a greedy draft first, then, from the draft's summary and the
parallel budget B, keep it (output 0) or re-decode with one action (``draft.draft_gated_decode``).
Its policy is the sequence policy over another context."""

from __future__ import annotations

from .draft import DraftContextConfig
from .kinds import DRAFT_THEN_REDECODE, KEEP_DRAFT_NAME, AdapterKind, register_kind
from .networks import SequencePolicy, SequencePolicyConfig

__all__ = ["DraftKind", "DRAFT"]

_SEEN = {"confidence": "its confidence summary (token entropy and max-probability, length, stopped at EOS)",
         "mean": "its confidence summary and the mean hidden state over it",
         "hidden": "its confidence summary and its mean and last hidden states",
         "prompt": "the prompt embedding instead (the control that sees what a sequence adapter sees)"}


class DraftKind(AdapterKind):
    name = "draft"
    label = "draft-gated"
    level = "sequence"
    context = "a summary of its own greedy draft (``draft.DraftContextConfig``), and B"
    trainer = "train-draft"
    decoding = DRAFT_THEN_REDECODE
    default_policy_mode = "argmax"

    def policy_config(self, policy: dict) -> SequencePolicyConfig:
        return SequencePolicyConfig(**policy)

    def build_policy(self, policy: dict) -> SequencePolicy:
        return SequencePolicy(SequencePolicyConfig(**policy))

    report_group = "draft"  # judged against Greedy, Best and the fixed rules at its own compute

    def outputs(self, num_actions: int) -> int:
        return 1 + num_actions  # keep the draft, then one per re-decode action

    def output_names(self, action_names: list[str]) -> list[str]:
        return [KEEP_DRAFT_NAME] + list(action_names)

    def check(self, config) -> None:
        if config.draft is None:
            raise ValueError("a draft-gated adapter (and only one) needs the 'draft' field")

    def check_fingerprint(self, config) -> None:
        """Nothing to check: its context width depends on the hidden size through its feature set
        (``check_lm`` checks it against the LM it is used with)."""

    @staticmethod
    def draft_context(config) -> DraftContextConfig:
        """What the policy reads of the draft (``adapter.json``'s ``draft``)."""
        return DraftContextConfig(**config.draft)

    def input_width(self, config, hidden_size: int) -> int | None:
        return self.draft_context(config).dim(hidden_size)

    def policy_input_width(self, config) -> int:
        return config.policy.get("embed_dim")

    def role(self, config) -> str:
        return "draft-gated, prompt-fed" if (config.draft or {}).get("features") == "prompt" else "draft-gated"

    def method_name(self, role: str) -> str:
        return "Draft-gated (prompt)" if role.endswith("prompt-fed") else "Draft-gated"

    def card_inputs(self, config) -> str:
        draft = config.draft or {}
        what = _SEEN.get(draft.get("features"), "?")
        return (f"a greedy draft first ({draft.get('token_budget')} tokens), then, from {what} and the parallel "
                "budget B: keep the draft (policy output 0) or re-decode with action k of the table below (output "
                "k + 1); the draft is one of the B answers")

    def card_usage(self, config, name: str) -> list[str]:
        return [
            "from decoding_adapters import Adapter",
            "",
            f'gen = Adapter.from_pretrained("{name}", lm="base").generator()  # draft, choose, re-decode',
            'out = gen.generate(["What is 2+3?"], parallel_budget=1)[0]',
            "print(out.completions[0], out.draft_kept, out.decodes)",
        ]


DRAFT = register_kind(DraftKind())
