"""A fixed answer rule as a kind with no weights: ESC, self-consistency, Adaptive-Consistency,
DeepConf, ReASC, CGES or the confidence threshold (``policies.fixed_rules``), decoding sequential
attempts (``decoding.attempts``): the first arm (the stopped greedy), then samples of one arm until
the rule stops, the answer the rule's.

``adapter.json``'s ``policy`` names the rule, its settings (the knobs of
``evaluation.rules``' settings dicts, e.g. ``{"window": 2, "max_draws": 8}`` for ESC), the first
arm's and the later draws' indices into ``actions``, and, for ReASC and CGES, the calibration of
the confidence column they read (``Calibration``'s four numbers, fitted on validation draws). Made
with ``decoding-adapters make-rule`` (or ``rules --adapter-out``: the tuned rule at a compute level).

Live, a rule's decision after draw s reads only draws <= s: after each round the rule runs over
the draws so far followed by placeholder draws (no answer, no confidence) up to its budget; the
problem stops where the rule reads no further than the draws made (``RuleDecider``)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from torch import nn

from ..decoding.confidence import CONFIDENCE_FEATURES
from ..decoding.protocol import STOP_AT_ANSWER
from .adapter_files import AdapterConfig, save_adapter
from .bounds import check_rule_fields
from .fixed_rules import RULE_KNOBS, RULE_LABELS, RULES, Calibration, Draws, RuleSetting, score_setting
from .kinds import SEQUENTIAL_ATTEMPTS, AdapterKind, register_kind

__all__ = ["RuleConfig", "RulePolicy", "RuleDecider", "RuleKind", "RULE", "rule_policy", "save_rule_adapter"]

_NEEDS_CALIBRATION = ("reasc", "cges")


@dataclass(frozen=True)
class RuleConfig:
    """A fixed rule at one setting, and the arms it reads (``adapter.json``'s ``policy``)."""

    rule: str
    """One of ``fixed_rules.RULES``."""
    settings: dict
    """The rule's knobs (``RuleSetting``'s, without ``rule``)."""
    num_actions: int
    """Arms listed in ``actions``."""
    first_arm: int = 0
    """Index of the first draw's arm (the stopped greedy)."""
    arm: int = 1
    """Index of the arm of every later draw."""
    calibration: dict | None = None
    """ReASC and CGES: ``Calibration``'s slope, intercept, mean and scale for the column they read."""

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"no rule {self.rule!r}; choose from {list(RULES)}")
        # every number in range first: the placeholder run below allocates max_draws columns
        check_rule_fields({"settings": self.settings, "calibration": self.calibration})
        if not isinstance(self.settings, dict) or set(self.settings) != set(RULE_KNOBS[self.rule]):
            raise ValueError(f"{self.rule} reads the settings {list(RULE_KNOBS[self.rule])}, got "
                             f"{sorted(self.settings) if isinstance(self.settings, dict) else self.settings!r}")
        if not (0 <= self.first_arm < self.num_actions and 0 <= self.arm < self.num_actions):
            raise ValueError(f"first_arm and arm must index the {self.num_actions} listed actions")
        if self.rule in _NEEDS_CALIBRATION and self.calibration is None:
            raise ValueError(f"{self.rule} reads a calibrated confidence: give its calibration (make it with "
                             "`rules --adapter-out`, which fits it on the validation table)")
        feature = self.settings.get("feature")
        if feature is not None and feature not in CONFIDENCE_FEATURES:
            raise ValueError(f"feature must be one of {list(CONFIDENCE_FEATURES)}, got {feature!r}")
        try:  # the rule on placeholder draws: a missing or impossible knob fails here, not mid-request
            score_setting(self.setting, _placeholder(1, self.max_draws), self.calibrations)
        except (KeyError, ValueError, TypeError) as err:
            raise ValueError(f"{self.rule} settings {self.settings} are incomplete or out of range: {err}") from None

    @property
    def setting(self) -> RuleSetting:
        return RuleSetting(self.rule, tuple(self.settings.items()))

    @property
    def max_draws(self) -> int:
        """Draws the rule reads at most (its budget)."""
        k = self.settings
        if "max_draws" in k:
            return int(k["max_draws"])
        if "n" in k:
            return int(k["n"])
        return 1 + int(k.get("redecodes", 1))

    @property
    def calibrations(self) -> dict[str, Calibration]:
        if self.calibration is None or "feature" not in self.settings:
            return {}
        return {self.settings["feature"]: Calibration(**self.calibration)}

    @property
    def label(self) -> str:
        knobs = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        return f"{RULE_LABELS[self.rule]} ({knobs})"


def _placeholder(problems: int, draws: int) -> Draws:
    return Draws(np.full((problems, draws), -1), np.zeros((problems, draws)),
                 np.full((problems, draws, len(CONFIDENCE_FEATURES)), np.nan), tuple(CONFIDENCE_FEATURES),
                 np.zeros((problems, 1), bool))


class RulePolicy(nn.Module):
    """The rule as the adapter's policy: no parameters (an empty ``adapter.safetensors``)."""

    def __init__(self, config: RuleConfig):
        super().__init__()
        self.config = config


def _reason(rule: str, draws: int, budget: int) -> str:
    """Why a rule stopped after ``draws`` of at most ``budget``."""
    if rule in ("confidence_threshold", "reasc") and draws == 1:
        return "confident"
    if draws >= budget or rule in ("self_consistency", "deepconf_offline", "confidence_threshold"):
        return "budget"
    return "confident" if rule == "cges" else "agreement"


class RuleDecider:
    """The rule deciding live sequential attempts (``decoding.attempts``; module docstring)."""

    def __init__(self, config: RuleConfig):
        self.config = config

    def _run(self, state, rows: list[int]):
        answers, tokens, conf, lengths = state.sequence(rows)
        budget = max(self.config.max_draws, answers.shape[1])
        draws = _placeholder(len(rows), budget)
        s = answers.shape[1]
        draws.answers[:, :s] = answers.numpy()
        draws.answers[:, :s][np.arange(s)[None, :] >= lengths.numpy()[:, None]] = -1
        draws.tokens[:, :s] = tokens.numpy()
        c = min(conf.shape[-1], draws.features.shape[-1])
        draws.features[:, :s, :c] = conf[..., :c].numpy()  # NaN (no answer's tokens): the least confident
        return score_setting(self.config.setting, draws, self.config.calibrations), lengths.numpy()

    def decide(self, state, rows: list[int]) -> list[tuple[int | None, str]]:
        result, made = self._run(state, rows)
        out = []
        for r in range(len(rows)):
            used = int(result.decodes[r])
            if used <= made[r]:
                out.append((None, _reason(self.config.rule, used, self.config.max_draws)))
            else:
                out.append((self.config.arm, ""))
        return out

    def answer(self, state, rows: list[int]) -> list[int]:
        result, _ = self._run(state, rows)
        return [int(a) for a in result.answers]


class RuleKind(AdapterKind):
    name = "rule"
    label = "fixed-rule"
    level = "sequence"
    context = "the answers (and confidences) of the attempts so far, read by a fixed rule: no weights"
    trainer = "make-rule"
    decoding = SEQUENTIAL_ATTEMPTS
    default_policy_mode = "argmax"

    def policy_config(self, policy: dict) -> RuleConfig:
        return RuleConfig(**policy)

    def build_policy(self, policy: dict) -> RulePolicy:
        return RulePolicy(RuleConfig(**policy))

    def outputs(self, num_actions: int) -> int:
        return num_actions

    def input_width(self, config, hidden_size: int) -> int | None:
        return None

    def policy_input_width(self, config) -> int:
        return 0

    def attempt_plan(self, config) -> dict:
        cfg = self.policy_config(config.policy)
        budget = cfg.max_draws
        distinct = [1 if a.is_greedy else budget for a in config.action_list]
        return {"first_arm": cfg.first_arm, "distinct": distinct, "max_attempts": budget, "with_hidden": False}

    def decider(self, policy, config) -> RuleDecider:
        return RuleDecider(self.policy_config(config.policy))

    def role(self, config) -> str:
        return "fixed rule"

    def method_name(self, role: str) -> str:
        return "Fixed rule"

    def card_inputs(self, config) -> str:
        cfg = self.policy_config(config.policy)
        names = [a.name for a in config.action_list]
        return (f"no weights: the fixed rule {cfg.label} over the stopped `{names[cfg.first_arm]}` and then samples "
                f"of `{names[cfg.arm]}`, at most {cfg.max_draws} attempts")

    def card_usage(self, config, name: str) -> list[str]:
        return [
            "from decoding_adapters import Adapter",
            "",
            f'gen = Adapter.from_pretrained("{name}", lm="<your model>").generator()  # attempts until the rule stops',
            'out = gen.generate(["What is 2+3?"])[0]',
            "print(out.completions[0], out.decodes, out.stopped_by)",
        ]


def rule_policy(rule: str, settings: dict, num_actions: int, first_arm: int = 0, arm: int = 1,
                calibration: Calibration | dict | None = None) -> dict:
    """``adapter.json``'s ``policy`` of a rule adapter (checked by building its ``RuleConfig``)."""
    if isinstance(calibration, Calibration):
        calibration = asdict(calibration)
    # a tuned threshold of +-inf (never / always) as the largest number adapter.json holds
    settings = {k: (math.copysign(1e12, v) if isinstance(v, float) and math.isinf(v) else v)
                for k, v in settings.items()}
    config = RuleConfig(rule, dict(settings), num_actions, first_arm, arm, calibration)
    return {k: v for k, v in asdict(config).items()}


def save_rule_adapter(directory: str | Path, rule: str, settings: dict, actions: Sequence[dict], *,
                      first_arm: int = 0, arm: int = 1, calibration: Calibration | dict | None = None,
                      task: str = "", task_options: dict | None = None, token_budget: int | None = None,
                      stop_at_answer: bool = STOP_AT_ANSWER, training: dict | None = None,
                      base_model: str = "") -> Path:
    """Write a rule adapter (``adapter.json``, an empty ``adapter.safetensors``, the model card):
    ``rule`` at ``settings`` over ``actions[first_arm]`` then samples of ``actions[arm]``. ``task``:
    whose answers it reads and where an attempt ends (its ``task_options`` as ``tasks.task_record``
    gives them); ``base_model``: the LM ``Adapter.from_pretrained(dir, lm="base")`` loads (any LM
    works: the rule has no weights and no fingerprint)."""
    policy = rule_policy(rule, settings, len(actions), first_arm, arm, calibration)
    config = AdapterConfig(kind=RULE.name, policy=policy, actions=list(actions), base_model=base_model,
                           base_fingerprint={},
                           token_budget=token_budget, task=task, task_options=task_options,
                           training=dict(training or {}), stop_at_answer=stop_at_answer)
    return save_adapter(directory, RulePolicy(RuleConfig(**policy)), config)


RULE = register_kind(RuleKind())
