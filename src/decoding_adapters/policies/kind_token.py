"""The token-level adapter as a kind: an action at every generated token from the LM's hidden state
(and the remaining token budget), or from the entropy of the base distribution alone (the
entropy-only ablation), drawn inside the decode loop (``networks.TokenPolicyChooser``)."""

from __future__ import annotations

from ..decoding.actions import DEFAULT_TOKEN_BUDGET
from .kinds import PER_TOKEN, AdapterKind, register_kind
from .networks import TokenPolicy, TokenPolicyConfig

__all__ = ["TokenKind", "TOKEN"]


class TokenKind(AdapterKind):
    name = "token"
    label = "token-level"
    level = "token"
    context = "the LM's hidden state h_t at every token (and the remaining token budget b_t)"
    trainer = "train-token"
    decoding = PER_TOKEN
    default_policy_mode = "sample"

    def policy_config(self, policy: dict) -> TokenPolicyConfig:
        return TokenPolicyConfig(**policy)

    def build_policy(self, policy: dict) -> TokenPolicy:
        return TokenPolicy(TokenPolicyConfig(**policy))

    @staticmethod
    def reads_hidden(config) -> bool:
        """Whether the policy reads hidden states (False: the entropy-only ablation)."""
        return config.policy.get("features", "hidden") == "hidden"

    def runs_on_logits(self, policy: dict) -> bool:
        """The entropy-only ablation reads the entropy of the base distribution, nothing else."""
        return policy.get("features", "hidden") == "entropy"

    def input_width(self, config, hidden_size: int) -> int | None:
        return hidden_size if self.reads_hidden(config) else None

    def policy_input_width(self, config) -> int:
        return config.policy.get("hidden_size")

    def role(self, config) -> str:
        return "entropy-only" if not self.reads_hidden(config) else super().role(config)

    def method_name(self, role: str) -> str:
        return f"Token {role}"

    def card_inputs(self, config) -> str:
        p = config.policy
        feature = ("the LM's final hidden state h_t" if self.reads_hidden(config)
                   else "the entropy of the base next-token distribution")
        budget = (f" and the remaining token budget b_t (b = {p.get('token_budget')})" if p.get("use_budget", True)
                  else "")
        return f"one action per generated token from {feature}{budget}"

    def card_usage(self, config, name: str) -> list[str]:
        budget = config.policy.get("token_budget", DEFAULT_TOKEN_BUDGET)
        return [
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "from decoding_adapters import Adapter",
            "",
            f'adapter = Adapter.from_pretrained("{name}")',
            "# the base model's directory (`decoding-adapters model-path --adapter DIR` prints it)",
            'tok = AutoTokenizer.from_pretrained(adapter.base_model_path, padding_side="left")',
            "model = AutoModelForCausalLM.from_pretrained(adapter.base_model_path)",
            'chat = [[{"role": "user", "content": "What is 2+3?"}]]',
            'inputs = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)',
            f"with adapter.logits_processor(model, tokenizer=tok, token_budget={budget}) as lp:",
            f"    out = model.generate(**inputs, max_new_tokens={budget}, **lp.generate_kwargs())",
            'print(tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
        ]


TOKEN = register_kind(TokenKind())
