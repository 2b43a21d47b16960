"""The attempt policy as a kind: sequential attempts (``decoding.attempts``), the stopped greedy
first, then, after each attempt, stop and answer (a learned weighting of the answers so far) or one
more attempt with the arm the policy picks (``attempt.PolicyDecider``, the live form of ``walk``)."""

from __future__ import annotations

from .attempt import AttemptPolicy, AttemptPolicyConfig, PolicyDecider, attempt_card_lines
from .kinds import SEQUENTIAL_ATTEMPTS, AdapterKind, register_kind

__all__ = ["AttemptKind", "ATTEMPT"]


class AttemptKind(AdapterKind):
    name = "attempt"
    label = "attempt-policy"
    level = "sequence"
    context = ("what the attempts so far show: each one's confidence summary (and hidden-state summary), its "
               "answer and the agreement between answers, the attempts made and left")
    trainer = "train-attempt"
    decoding = SEQUENTIAL_ATTEMPTS
    default_policy_mode = "argmax"

    def policy_config(self, policy: dict) -> AttemptPolicyConfig:
        return AttemptPolicyConfig.from_dict(policy)

    def build_policy(self, policy: dict) -> AttemptPolicy:
        return AttemptPolicy(AttemptPolicyConfig.from_dict(policy))

    def outputs(self, num_actions: int) -> int:
        return 1 + num_actions  # stop, then one per arm

    def output_names(self, action_names: list[str]) -> list[str]:
        return ["stop"] + list(action_names)

    def input_width(self, config, hidden_size: int) -> int | None:
        return hidden_size if "hidden" in config.policy.get("features", ()) else None

    def policy_input_width(self, config) -> int:
        return config.policy.get("hidden_size", 0)

    def attempt_plan(self, config) -> dict:
        cfg = self.policy_config(config.policy)
        return {"first_arm": cfg.first_arm, "distinct": list(cfg.distinct), "max_attempts": cfg.max_attempts,
                "with_hidden": cfg.hidden_size > 0}

    def decider(self, policy, config) -> PolicyDecider:
        return PolicyDecider(policy)

    def role(self, config) -> str:
        return "attempt policy"

    def method_name(self, role: str) -> str:
        return "Attempt policy"

    def card_inputs(self, config) -> str:
        return attempt_card_lines(config)

    def card_usage(self, config, name: str) -> list[str]:
        return [
            "from decoding_adapters import Adapter",
            "",
            f'gen = Adapter.from_pretrained("{name}", lm="base").generator()  # attempts until the policy stops',
            'out = gen.generate(["What is 2+3?"])[0]',
            "print(out.completions[0], out.decodes, out.stopped_by)",
        ]


ATTEMPT = register_kind(AttemptKind())
