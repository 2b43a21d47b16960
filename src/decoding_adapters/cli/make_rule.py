"""``make-rule``: write a fixed answer rule as an adapter with no weights (kind ``rule``), usable
wherever an adapter is (``generate``, ``serve``, ``Adapter.from_pretrained``).

    decoding-adapters make-rule --rule esc --window 2 --arm 0.5 --out runs/esc

The rule reads the stopped greedy, then samples at temperature ``--arm`` until it stops (at most
``--max-draws`` attempts where it has that knob); only the knobs the rule reads may be given
(``policies.fixed_rules.RULE_KNOBS``). ReASC and CGES read a calibrated confidence: give
``--calibration slope,intercept,mean,scale`` (``rules --adapter-out`` writes a tuned rule with the
calibration fitted on its validation table). The task (``--task``, ``--data``, ...) is recorded:
it says what an answer is and where an attempt ends. Every knob is checked before anything is
written; a non-empty ``--out`` is refused unless ``--force``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields
from typing import Literal

from ..decoding.actions import GREEDY, DecodingAction
from ..decoding.protocol import STOP_AT_ANSWER
from ..lm.models import DEFAULT_MODEL
from ..policies.bounds import check_rule_fields
from ..policies.fixed_rules import RULE_KNOBS, RULES
from ..policies.kind_rule import save_rule_adapter
from ..tasks import task_record
from .common import add_task_arguments, build_task, check_adapter_out
from .config_args import add_config_arguments, build_config

RuleName = Literal["self_consistency", "esc", "adaptive_consistency", "deepconf_offline", "deepconf_online", "reasc",
                   "cges", "confidence_threshold"]


@dataclass(frozen=True)
class MakeRuleOptions:
    """fixed rule adapter"""

    rule: RuleName
    """the rule (see docs/rules.md)"""
    out: str
    """adapter directory to write"""
    arm: float = 0.5
    """temperature of the attempts after the stopped greedy"""
    window: int | None = None
    """ESC: draws per window"""
    max_draws: int | None = None
    """attempts at most (the greedy included); default 8 for the rules that read it"""
    n: int | None = None
    """self-consistency, DeepConf offline: attempts"""
    threshold: float | None = None
    """Adaptive-Consistency, ReASC: the Beta criterion; CGES: the posterior; confidence threshold: the confidence"""
    single_threshold: float | None = None
    """ReASC: the first attempt's confidence above which it alone answers"""
    eta: float | None = None
    """DeepConf: the percent of most confident attempts kept"""
    consensus: float | None = None
    """DeepConf online: the leader's share of the kept weight that stops"""
    warmup: int | None = None
    """DeepConf online: attempts that set the bar"""
    redecodes: int | None = None
    """confidence threshold: attempts after a draft below the threshold"""
    with_draft: bool = False
    """confidence threshold: the draft votes with its re-decodes"""
    feature: str | None = None
    """the confidence column a confidence rule reads (e.g. group_conf_min, max_prob_mean)"""
    calibration: tuple[float, ...] | None = None
    """ReASC, CGES: slope,intercept,mean,scale of the confidence's calibration"""
    stop_at_answer: bool = STOP_AT_ANSWER
    """each attempt ends at its first complete answer (the protocol); off: decoded to the budget"""
    model: str = DEFAULT_MODEL
    """the base model generate / serve load by default (a rule has no weights: any model works with --model)"""
    force: bool = False
    """write into a --out that already holds files (an adapter there is replaced)"""

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown rule {self.rule!r}; choose from {list(RULES)}")
        if not 0 < self.arm <= 1e6:  # NaN fails both comparisons
            raise ValueError(f"--arm is a sampling temperature > 0, got {self.arm}")
        if self.calibration is not None and len(self.calibration) != 4:
            raise ValueError("--calibration takes four numbers: slope,intercept,mean,scale")
        # each number in range, one line naming its option, before the adapter is built or written
        check_rule_fields({"settings": self._given(), "calibration": self.calibration_record}, _option)

    @property
    def calibration_record(self) -> dict | None:
        """``--calibration`` as the adapter records it."""
        if self.calibration is None:
            return None
        return dict(zip(("slope", "intercept", "mean", "scale"), self.calibration))

    def _given(self) -> dict:
        """The knobs given on the command line (every rule's, ``--with-draft`` aside: a flag)."""
        every_knob = {k for names in RULE_KNOBS.values() for k in names} - {"with_draft"}
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in every_knob and getattr(self, f.name) is not None}

    def settings(self) -> dict:
        """The rule's knobs; a knob given that the rule does not read is refused."""
        knobs = RULE_KNOBS[self.rule]
        given = self._given()
        extra = sorted(set(given) - set(knobs))
        if extra:
            raise ValueError(f"{self.rule} does not read {', '.join('--' + e.replace('_', '-') for e in extra)}; "
                             f"it reads {', '.join('--' + k.replace('_', '-') for k in knobs)}")
        settings = {}
        for k in knobs:
            if k == "with_draft":
                settings[k] = self.with_draft
            elif k == "max_draws" and k not in given:
                settings[k] = 8
            elif k in given:
                settings[k] = given[k]
            else:
                raise ValueError(f"{self.rule} needs --{k.replace('_', '-')}")
        return settings


def _option(field: str) -> str:
    """A rule field as this command's option: ``settings.max_draws`` -> ``--max-draws``,
    ``calibration.scale`` -> ``--calibration scale``."""
    group, _, key = field.partition(".")
    if group == "calibration":
        return f"--calibration {key}".rstrip()
    return "--" + (key or group).replace("_", "-")


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, MakeRuleOptions)
    add_task_arguments(p, exclude=("max_problems", "cot_ratio"))


def run_cli(args) -> int:
    options = build_config(MakeRuleOptions, args)
    settings = options.settings()
    check_adapter_out(options.out, options.force)
    task = build_task(args)
    actions = [GREEDY.to_dict(), DecodingAction(temperature=options.arm).to_dict()]
    path = save_rule_adapter(options.out, options.rule, settings, actions, calibration=options.calibration_record,
                             task=task.name, task_options=task_record(task), stop_at_answer=options.stop_at_answer,
                             base_model=options.model)
    print(json.dumps({"out": str(path), "rule": options.rule, "settings": settings}))
    return 0
