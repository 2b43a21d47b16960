"""The methods an evaluation compares (``Method``: Greedy, Best, Mixed, adapters) and how an
evaluation samples and summarises (``EvalConfig``). See the package docstring."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Mapping, Sequence

import torch

from ..core.stats import check_int
from ..decoding.actions import DEFAULT_TOKEN_BUDGET, GREEDY, DecodingAction
from ..decoding.loop import DecodeResult
from ..decoding.protocol import STOP_AT_ANSWER, DecodingProtocol
from ..decoding.rollouts import RolloutRequest, Rollouts
from ..policies.kinds import (
    DRAFT_THEN_REDECODE,
    ONE_PER_PROMPT,
    PER_TOKEN,
    SEQUENTIAL_ATTEMPTS,
    AdapterKind,
    Decoding,
    adapter_kind,
    kind_names,
)
from ..policies.networks import AdapterConfig, load_adapter, resolve_policy_mode
from ..selection.best import BestStatic

__all__ = [
    "EvalConfig",
    "Method",
    "MethodKind",
    "method_kind",
    "GREEDY_ROWS",
    "FIXED_ACTION",
    "MIXTURE",
    "UNIFORM_PER_TOKEN",
    "OWN_ROLLOUT",
    "MethodRollout",
    "greedy_method",
    "greedy_to_budget_method",
    "GREEDY_TO_BUDGET",
    "ANSWER_ACCURACY",
    "FAMILIES",
    "static_method",
    "best_per_k_method",
    "best_static_method",
    "load_best_per_k",
    "mixed_method",
    "token_mixed_method",
    "sequence_mixture_of_token_actions",
    "best_token_action_method",
    "adapter_method",
    "adapter_role",
    "resolve_best_action",
    "policy_choices",
]

GREEDY_ROWS = Decoding("greedy rows", "its one action is greedy: one row stands for every sample and seed "
                      "(``EvalConfig.decode_deterministic_once``)")
FIXED_ACTION = Decoding("fixed action", "one fixed action per sample (or per k: the Best row), its rows shared "
                        "with every method that uses the action")
MIXTURE = Decoding("mixture", "a uniform mixture over its actions, drawn once per sample")
UNIFORM_PER_TOKEN = Decoding("uniform per token", "a uniform mixture over its actions, drawn at every token")
OWN_ROLLOUT = Decoding("own rollout", "it decodes its rows itself (``Method.rollout``)")


@dataclass(frozen=True)
class MethodKind:
    """What a kind of method is to an evaluation: the baselines' kinds below, and one per registered
    adapter kind (``adapter``: the ``policies.kinds`` object). ``decoding`` says how its rows are
    decoded; the runner maps it to its plan once (``evaluation.plans``), never testing a flag."""

    name: str
    decoding: Decoding
    """How its rows are decoded: a baseline's (above) or its adapter kind's (``AdapterKind.decoding``)."""
    static: bool = False
    """One fixed action per sample (greedy, static): rows keyed by action and shared; it may take an
    action per k and stop at the first answer."""
    greedy: bool = False
    """Its one action is greedy: a row stands for every sample and seed (``decode_deterministic_once``)."""
    mixed: bool = False
    """A uniform mixture over its actions (per sample, or per token with ``Method.per_token``)."""
    custom: bool = False
    """It decodes its rows itself (``Method.rollout``)."""
    adapter: AdapterKind | None = None
    """The adapter kind of an adapter method (it needs a policy and has a policy mode)."""
    per_token_decoding: Decoding | None = None
    """How its rows are decoded with ``Method.per_token`` (None: it cannot draw per token)."""
    family: str = "static"
    """Its methods' family unless they say otherwise (:data:`FAMILIES`)."""
    report_group: str | None = None
    """Which verdicts the report gives its methods (an adapter kind's ``report_group``); None: none."""


_BASELINE_KINDS = {k.name: k for k in (
    MethodKind("greedy", GREEDY_ROWS, static=True, greedy=True),
    MethodKind("static", FIXED_ACTION, static=True),
    MethodKind("mixed", MIXTURE, mixed=True, per_token_decoding=UNIFORM_PER_TOKEN),
    MethodKind("custom", OWN_ROLLOUT, custom=True),
)}


def method_kind(name: str) -> MethodKind:
    """The method kind called ``name``: a baseline's, or that of a registered adapter kind."""
    if name in _BASELINE_KINDS:
        return _BASELINE_KINDS[name]
    if name in kind_names():
        kind = adapter_kind(name)
        return MethodKind(name, kind.decoding, adapter=kind, family="learned", report_group=kind.report_group)
    raise ValueError(f"unknown method kind {name!r}")

MethodRollout = Callable[[Rollouts, RolloutRequest, int], DecodeResult]
"""How a method that produces its answers its own way decodes them: ``(rollouts over the method's
actions, the rows to answer, evaluation seed) -> DecodeResult`` with one row per requested row, in
request order (``request.row_seeds`` keep the evaluation's common random numbers). The result's
``texts`` are the answers scored. Its per-row ``decodes`` and ``generated_tokens`` must count every
pass the answer cost: a greedy draft and a conditional re-decode reports ``decodes`` 1 where the
draft was kept and 2 where it re-decoded, and the tokens of both passes. The evaluation aggregates
them into ``decodes_per_problem`` / ``tokens_per_problem`` (``aggregate.subset_cost``). Helpers:
``decoding.rollouts.take_rows`` and ``concat_results`` build the merged result."""

ANSWER_ACCURACY = "answer_accuracy"
"""The metric of the answer a user gets: ``answer_accuracy@k`` at B = k, and ``answer_accuracy``
(in eval_details' ``per_problem``) at the method's own B, the smallest k evaluated."""

GREEDY_TO_BUDGET = "Greedy to the budget"
"""Display name of the one control that ignores the protocol's stop: greedy decoded to EOS or the
token budget (what the stop alone gains is Greedy minus this)."""

FAMILIES = ("static", "fixed rule", "learned")
"""What a method is to the report: ``static`` (one fixed way of decoding: Greedy, Best, Mixed, a
static action), ``fixed rule`` (a hand-written rule over samples or a draft: a confidence threshold,
a random gate, a vote), ``learned`` (an adapter)."""


# ---- configuration and methods -------------------------------------------------------------------


@dataclass(frozen=True)
class EvalConfig:
    """How an evaluation samples and summarises."""

    k_values: tuple[int, ...] = (1, 2, 4, 8)
    """Parallel budgets k reported as pass@k; n = max(k) samples per problem and seed."""
    seeds: int = 3
    """Independent repetitions (different row seeds) of the whole evaluation."""
    token_budget: int = DEFAULT_TOKEN_BUDGET
    """Max new tokens per sample."""
    cot_ratio: float = 0.0
    """Fraction of prompts given a chain-of-thought instruction (fixed per problem, as in training)."""
    seed: int = 0
    """Base seed of the row seeds and of the CoT assignment."""
    confidence: float = 0.95
    """Level of the confidence intervals."""
    stop_at_answer: bool = STOP_AT_ANSWER
    """End every sample at its task's first complete answer; off: decode to EOS or the budget.
    The protocol every method is scored under (``Task.answer_complete``, checked after every token,
    so the tokens after the answer are never generated; a method may say otherwise:
    ``Method.stop_at_answer``). A task without a notion of a complete answer is decoded to its end
    either way."""
    keep_trajectories: int = 64
    """Trajectories kept per method (seed 0, spread over problems first) for plots and traces."""
    decode_deterministic_once: bool = True
    """Decode a deterministic row once and let it stand for every sample and seed: greedy, and a
    token adapter in argmax mode whose chosen actions were all greedy for a prompt (its output then
    depends on no seed). False decodes every sample of them: the same outcomes at n x seeds times
    the cost (a check)."""

    def __post_init__(self) -> None:
        ks = tuple(sorted({check_int("k", k) for k in self.k_values}))
        if not ks or ks[0] < 1:
            raise ValueError(f"k_values must be positive integers, got {self.k_values}")
        object.__setattr__(self, "k_values", ks)
        if self.seeds < 1 or self.token_budget < 1 or self.keep_trajectories < 0:
            raise ValueError("seeds and token_budget must be >= 1, keep_trajectories >= 0")
        if not 0.0 <= self.cot_ratio <= 1.0:
            raise ValueError(f"cot_ratio must be in [0, 1], got {self.cot_ratio}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")

    @property
    def n(self) -> int:
        """Samples per problem and seed."""
        return max(self.k_values)

    @property
    def metrics(self) -> list[str]:
        """pass@k (needs a verifier to pick among k samples), ``answer_accuracy@k`` (the one answer
        the method returns from B = k samples, no verifier: ``Method.answer_rule``), mean length."""
        return ([f"pass@{k}" for k in self.k_values] + [f"{ANSWER_ACCURACY}@{k}" for k in self.k_values]
                + ["mean_length"])

    @property
    def protocol(self) -> DecodingProtocol:
        """The token budget and the stop at the first answer as one object (validated there)."""
        return DecodingProtocol(self.token_budget, self.stop_at_answer)


@dataclass
class Method:
    """One column of the comparison."""

    name: str
    """Unique display name (the key in results.json)."""
    kind: str
    """'greedy', 'static', 'mixed', 'custom' or an adapter kind (:func:`method_kind`)."""
    actions: list[DecodingAction]
    """greedy/static: the one action (with ``k_actions``: the distinct actions it uses); mixed: the set
    drawn from; adapters: the policy's outputs in order."""
    role: str = ""
    """Column in the paper's tables: greedy, best, mixed, w/o budget, w/ budget, entropy-only."""
    level: Literal["static", "sequence", "token"] = "static"
    """Which table the method belongs to (static baselines appear in both)."""
    policy: torch.nn.Module | None = None
    adapter: AdapterConfig | None = None
    source: str | None = None
    """Adapter directory, if any."""
    seed_policies: list[torch.nn.Module] | None = None
    """One adapter per evaluation seed (e.g. trained with seeds 0, 1, 2): seed s uses
    ``seed_policies[s % len]``; None means ``policy`` for every seed."""
    policy_mode: str | None = None
    """Adapters: 'sample' (draw from pi) or 'argmax'; None: the adapter's stored mode (the mode it is
    served with by default, ``policies.default_policy_mode``)."""
    seen_hashes: set[str] = field(default_factory=set)
    """Adapters: content hashes of the problems they were trained or selected on (all seeds'
    adapters): ``evaluate`` refuses to score them there unless told to."""
    per_token: bool = False
    """mixed only: draw the action uniformly at *every token* (the paper's token-level Mixed,
    ``UniformChooser``) instead of once per sample (the per-sequence mixture)."""
    k_actions: dict[int, DecodingAction] | None = None
    """greedy/static only: the action whose samples give pass@k, for each k (the Best row: the best
    static strategy at each k, chosen on validation); None: ``actions[0]`` for every k."""
    draft_context: dict | None = None
    """draft only: the ``policies.draft.DraftContextConfig`` fields of what ``policy`` reads (default:
    the adapter's). ``policy`` is anything with ``choose(contexts, budgets, deterministic=...,
    uniform=...)``: the adapter, or a control's gate (``evaluation.draft``)."""
    stop_at_answer: bool | None = None
    """End each sample at its first complete answer: None follows the evaluation
    (``EvalConfig.stop_at_answer``); an adapter says what it was trained with (``AdapterConfig``);
    False is the "to the budget" control."""
    family: str | None = None
    """``static``, ``fixed rule`` or ``learned`` (:data:`FAMILIES`); None: learned for an adapter,
    static otherwise."""
    rollout: MethodRollout | None = None
    """custom only: how the method decodes its rows (e.g. a draft, then a conditional re-decode);
    its rows are its own, never shared with another method."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a method needs a name")
        kind = self.method_kind  # an unknown kind raises here
        if self.per_token and kind.per_token_decoding is None:
            raise ValueError(f"method {self.name!r}: only a mixed method can draw its action per token")
        if self.family is None:
            self.family = kind.family
        if self.family not in FAMILIES:
            raise ValueError(f"method {self.name!r}: family must be one of {FAMILIES}, got {self.family!r}")
        if not self.actions:
            raise ValueError(f"method {self.name!r} has no actions")
        _CHECKS[self.decoding](self)

    @property
    def method_kind(self) -> MethodKind:
        """The kind object the evaluation asks (:func:`method_kind`)."""
        return method_kind(self.kind)

    @property
    def adapter_kind(self) -> AdapterKind | None:
        """An adapter method's adapter kind (None for a baseline)."""
        return self.method_kind.adapter

    @property
    def decoding(self) -> Decoding:
        """How its rows are decoded: its kind's, or its kind's per-token form (``per_token``)."""
        kind = self.method_kind
        return kind.per_token_decoding if self.per_token else kind.decoding

    @property
    def chooses_per_prompt(self) -> bool:
        """An adapter that picks one action per prompt before decoding (rows shared by action)."""
        return self.decoding is ONE_PER_PROMPT

    @property
    def decodes_per_token(self) -> bool:
        """Whether a chooser picks this method's action at every token (token adapters, per-token Mixed)."""
        return self.decoding in (PER_TOKEN, UNIFORM_PER_TOKEN)

    @property
    def action_names(self) -> list[str]:
        return [a.name for a in self.actions]

    def action_for_k(self, k: int) -> DecodingAction:
        """greedy/static: the action whose samples give pass@k."""
        if self.k_actions is None:
            return self.actions[0]
        try:
            return self.k_actions[k]
        except KeyError:
            chosen = ", ".join(map(str, self.k_actions))
            raise ValueError(f"{self.name} has no action for pass@{k} (it has one for k in {chosen})") from None

    def stops(self, cfg: EvalConfig) -> bool:
        """Whether this method's samples end at their first complete answer in an evaluation ``cfg``."""
        return cfg.stop_at_answer if self.stop_at_answer is None else bool(self.stop_at_answer)

    @property
    def answer_rule(self) -> str:
        """How the method turns its B samples into the one answer a user gets (no verifier)."""
        return _ANSWER_RULES.get(self.decoding, _vote_rule)(self)

    def policy_for(self, seed: int) -> torch.nn.Module | None:
        return self.seed_policies[seed % len(self.seed_policies)] if self.seed_policies else self.policy

    @property
    def all_policies(self) -> list[torch.nn.Module]:
        return list(self.seed_policies or ([self.policy] if self.policy is not None else []))

    def describe(self) -> dict:
        """JSON-friendly description (eval_details.json ``methods``)."""
        out = {
            "kind": self.kind,
            "role": self.role,
            "level": self.level,
            "actions": self.action_names,
            "action_dicts": [a.to_dict() for a in self.actions],
            "source": self.source,
            "per_token": self.per_token,
            "policy_mode": self.policy_mode,
            "family": self.family,
            "answer_rule": self.answer_rule,
        }
        if self.adapter is not None:
            out["adapter_policy"] = dict(self.adapter.policy)
        if self.k_actions is not None:
            out["k_actions"] = {str(k): a.name for k, a in self.k_actions.items()}
        if self.stop_at_answer is not None:
            out["stop_at_answer"] = bool(self.stop_at_answer)
        return out


# ---- what each way of decoding requires of a method, and how it answers ---------------------------


def _no_rollout(m: Method) -> None:
    if m.rollout is not None:
        raise ValueError(f"method {m.name!r}: a custom method needs a rollout, and only a custom one takes it")


def _check_fixed(m: Method) -> None:
    """greedy/static: one action, or the distinct actions of ``k_actions`` in k order."""
    _no_rollout(m)
    if m.k_actions is None:
        if len(m.actions) != 1:
            raise ValueError(f"static method {m.name!r} needs exactly one action")
        return
    if not m.k_actions:
        raise ValueError(f"method {m.name!r}: only a static method takes an action per k")
    m.k_actions = {int(k): m.k_actions[k] for k in sorted(m.k_actions)}
    if list(dict.fromkeys(m.k_actions.values())) != list(m.actions):
        raise ValueError(f"method {m.name!r}: actions must be the distinct k_actions in k order")


def _no_k_actions(m: Method) -> None:
    """Neither an action per k (static methods only) nor a rollout (custom methods only)."""
    _no_rollout(m)
    if m.k_actions is not None:
        raise ValueError(f"method {m.name!r}: only a static method takes an action per k")


def _check_rollout(m: Method) -> None:
    if m.k_actions is not None:
        raise ValueError(f"method {m.name!r}: only a static method takes an action per k")
    if m.rollout is None:
        raise ValueError(f"method {m.name!r}: a custom method needs a rollout, and only a custom one takes it")


def _check_adapter(m: Method) -> None:
    """An adapter needs its policy; its mode is the call's, else the adapter's stored one."""
    _no_k_actions(m)
    if m.policy is None:
        raise ValueError(f"adapter method {m.name!r} needs a policy")
    stored = m.adapter.policy_mode if m.adapter is not None else None
    m.policy_mode = resolve_policy_mode(m.policy_mode or stored, m.kind)


def _check_draft(m: Method) -> None:
    """A draft-gated adapter also needs what its gate reads (default: its adapter's draft context)."""
    _no_k_actions(m)
    if m.policy is None:
        raise ValueError(f"adapter method {m.name!r} needs a policy")
    if m.draft_context is None:
        if m.adapter is None or m.adapter.draft is None:
            raise ValueError(f"draft-gated method {m.name!r} needs a draft_context")
        m.draft_context = dict(m.adapter.draft)
    _check_adapter(m)


def _refuse_attempts(m: Method) -> None:
    _no_k_actions(m)
    label = m.method_kind.adapter.label
    raise ValueError(f"method {m.name!r}: a {label} adapter decodes sequential attempts, which "
                     "the pass@k runner does not score; score it on sample tables (train-attempt, rules, or "
                     "the study's fixed-rules stage) or use it with generate / serve")


_CHECKS: dict[Decoding, Callable[[Method], None]] = {
    GREEDY_ROWS: _check_fixed,
    FIXED_ACTION: _check_fixed,
    MIXTURE: _no_k_actions,
    UNIFORM_PER_TOKEN: _no_k_actions,
    OWN_ROLLOUT: _check_rollout,
    ONE_PER_PROMPT: _check_adapter,
    PER_TOKEN: _check_adapter,
    DRAFT_THEN_REDECODE: _check_draft,
    SEQUENTIAL_ATTEMPTS: _refuse_attempts,
}
"""What each way of decoding requires of a method's fields (``Method.__post_init__`` calls it)."""


def _vote_rule(m: Method) -> str:
    return "B = 1: its sample; B > 1: a majority vote over its B samples' answers (ties: the earliest)"


def _greedy_rule(m: Method) -> str:
    return "its one (deterministic) sample" if m.k_actions is None else _vote_rule(m)


def _draft_rule(m: Method) -> str:
    return ("the draft where kept; where re-decoded, at B = 1 the re-decode, at B > 1 a majority vote "
            "over the draft and B - 1 re-decodes (ties: the draft)")


_ANSWER_RULES = {GREEDY_ROWS: _greedy_rule, DRAFT_THEN_REDECODE: _draft_rule}
"""``Method.answer_rule`` where it is not a vote over the B samples."""


def greedy_method(name: str = "Greedy") -> Method:
    return Method(name, "greedy", [GREEDY], role="greedy")


def greedy_to_budget_method(name: str = GREEDY_TO_BUDGET) -> Method:
    """Greedy decoded to EOS or the token budget whatever the evaluation's stop (role 'greedy to
    the budget'): the control that measures what the protocol's stop alone gains. On a task whose
    answers are never complete before the end (code) it equals Greedy."""
    return Method(name, "greedy", [GREEDY], role="greedy to the budget", stop_at_answer=False)


def static_method(action: DecodingAction, name: str = "Best", role: str = "best") -> Method:
    return Method(name, "greedy" if action.is_greedy else "static", [action], role=role)


def best_per_k_method(k_actions: Mapping[int, DecodingAction], name: str = "Best", role: str = "best") -> Method:
    """A static row whose pass@k comes from the samples of ``k_actions[k]``: the Best row when the
    best static strategy differs between metrics (greedy at pass@1, a sampler at pass@8)."""
    for k, a in k_actions.items():
        if not isinstance(a, DecodingAction):
            raise ValueError(f"pass@{k}: {a!r} is not a DecodingAction")
    actions = list(dict.fromkeys(k_actions[k] for k in sorted(k_actions)))
    kind = "greedy" if all(a.is_greedy for a in actions) else "static"
    return Method(name, kind, actions, role=role, k_actions=dict(k_actions))


def best_static_method(best: BestStatic, actions: Sequence[DecodingAction], name: str = "Best",
                       role: str = "best") -> Method:
    """The Best row from a ``selection.best.BestStatic`` (its names resolved among ``actions``)."""
    by_name = {a.name: a for a in actions}
    return best_per_k_method({k: by_name[best.name_for(k)] for k in best.k_values}, name, role)


def load_best_per_k(spec: str | Path | Mapping) -> dict[int, DecodingAction] | None:
    """``{k: action}`` from select-actions' ``actions.json`` (a path or its parsed dict), key
    ``best_per_k``; None when it has none."""
    data = json.loads(Path(spec).read_text()) if not isinstance(spec, Mapping) else spec
    best = data.get("best_per_k") if isinstance(data, Mapping) else None
    if not best:
        return None
    return {int(k): DecodingAction.from_dict(best["actions"][name]) for k, name in best["best"].items()}


def mixed_method(actions: Sequence[DecodingAction], name: str = "Mixed", level: str = "static") -> Method:
    """A uniform mixture drawn once per sample (per sequence): the sequence-level Mixed."""
    return Method(name, "mixed", list(actions), role="mixed", level=level)


def token_mixed_method(actions: Sequence[DecodingAction], name: str = "Mixed (per token)") -> Method:
    """The paper's token-level Mixed: a fixed uniform mixture over the token action set drawn at
    every token (``UniformChooser``), role 'mixed', level 'token'."""
    return Method(name, "mixed", list(actions), role="mixed", level="token", per_token=True)


def sequence_mixture_of_token_actions(actions: Sequence[DecodingAction]) -> Method:
    """The token action set mixed once per sample: its own row, not the token-level Mixed."""
    name = "Mixed per sequence (token actions)"
    return Method(name, "mixed", list(actions), role="mixed per sequence", level="token")


def best_token_action_method(action: DecodingAction) -> Method:
    """The best single action of the token action set (chosen on validation, never on test)."""
    return Method(
        f"Best token action ({action.name})", "greedy" if action.is_greedy else "static", [action],
        role="best token action", level="token",
    )


def adapter_role(config: AdapterConfig) -> str:
    """'entropy-only', 'w/ budget' or 'w/o budget' from an adapter's policy config; 'draft-gated'
    (or 'draft-gated, prompt-fed', the control) for a draft-gated adapter."""
    return config.adapter_kind.role(config)


def adapter_method(
    directory: str | Path | Sequence[str | Path], lm=None, name: str | None = None, policy_mode: str | None = None
) -> Method:
    """Load the adapter in ``directory`` (checked against ``lm``) as a method. A list of directories
    (the same adapter trained with different seeds) gives one adapter per evaluation seed.
    ``policy_mode``: 'sample' or 'argmax' (None: the adapter's stored mode)."""
    directories = [directory] if isinstance(directory, (str, Path)) else list(directory)
    loaded = [load_adapter(d, lm) for d in directories]
    policy, config = loaded[0]
    for _, other in loaded[1:]:
        if (other.kind, other.actions, adapter_role(other)) != (config.kind, config.actions, adapter_role(config)):
            raise ValueError(f"adapters {directories} differ in kind, actions or variant: they cannot share a method")
    role = adapter_role(config)
    name = name or config.adapter_kind.method_name(role)
    return Method(
        name,
        config.kind,
        config.action_list,
        role=role,
        level=config.adapter_kind.level,
        policy=policy,
        adapter=config,
        source=", ".join(map(str, directories)),
        seed_policies=[p for p, _ in loaded] if len(loaded) > 1 else None,
        policy_mode=policy_mode,
        stop_at_answer=_one_stop(loaded, directories),
        seen_hashes=set().union(*(c.seen_hashes for _, c in loaded)),
    )



def _one_stop(loaded, directories) -> bool:
    """The stop the adapters of one method were trained with (they must agree)."""
    stops = {bool(c.stop_at_answer) for _, c in loaded}
    if len(stops) > 1:
        raise ValueError(f"adapters {directories} differ in stop_at_answer: they cannot share a method")
    return stops.pop()


def resolve_best_action(spec, actions: Sequence[DecodingAction]) -> DecodingAction | None:
    """The Best action from ``spec``: an index into ``actions``, an action name, a DecodingAction
    dict, ``{"index": i}`` / ``{"action": {...}}``, or a JSON file whose ``best_single`` is any of
    these. Returns None when a file has no ``best_single``."""
    if isinstance(spec, DecodingAction):
        return spec
    if isinstance(spec, (str, Path)) and Path(spec).is_file():
        data = json.loads(Path(spec).read_text())
        if not isinstance(data, dict) or data.get("best_single") is None:
            return None
        file_actions = [DecodingAction.from_dict(d) for d in data.get("actions", [])] or list(actions)
        return resolve_best_action(data["best_single"], file_actions)
    if isinstance(spec, str):
        text = spec.strip()
        if text.lstrip("-").isdigit():
            return resolve_best_action(int(text), actions)
        if text.startswith("{"):
            return resolve_best_action(json.loads(text), actions)
        for a in actions:
            if a.name == text:
                return a
        raise ValueError(f"best action {spec!r} is not an index, a name in {[a.name for a in actions]}, JSON or a file")
    if isinstance(spec, int):
        if not 0 <= spec < len(actions):
            raise ValueError(f"best action index {spec} is out of range for {len(actions)} actions")
        return actions[spec]
    if isinstance(spec, dict):
        if "index" in spec:
            return resolve_best_action(int(spec["index"]), actions)
        if "action" in spec:
            return resolve_best_action(spec["action"], actions)
        if "name" in spec and not set(spec) & {"do_sample", "temperature"}:
            return resolve_best_action(str(spec["name"]), actions)
        return DecodingAction.from_dict(
            {k: v for k, v in spec.items() if k in ("do_sample", "temperature", "top_k", "top_p", "min_p")}
        )
    raise ValueError(f"cannot read a best action from {spec!r}")


def policy_choices(method: Method, context: torch.Tensor, problems: Sequence, cfg: EvalConfig,
                   uniform_for: Callable[[int, object, int], torch.Tensor]) -> list[list[list[int]]]:
    """``[seed][problem][k index]``: the output index the sequence-shaped policy of ``method`` (of
    that seed) picks for parallel budget k from ``context`` ``[n_problems, in_dim]``: its argmax
    (policy_mode 'argmax', the same in every seed), or an inverse-CDF draw from pi with the uniform
    ``uniform_for(seed, problem, k)`` (a 0-d tensor; policy_mode 'sample')."""
    out = []
    for s in range(cfg.seeds):
        policy = method.policy_for(s)
        per_k = []
        for k in cfg.k_values:
            budgets = torch.full((len(problems),), k)
            if method.policy_mode == "sample":
                uniform = torch.stack([uniform_for(s, p, k) for p in problems])
                per_k.append(policy.choose(context, budgets, deterministic=False, uniform=uniform)[0].tolist())
            else:
                per_k.append(policy.choose(context, budgets)[0].tolist())
        out.append([[int(per_k[ki][i]) for ki in range(len(cfg.k_values))] for i in range(len(problems))])
    return out
