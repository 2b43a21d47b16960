"""How the runner decodes and scores each way a method decodes (``Method.decoding``): one plan
object per way, found once by :func:`plan_for`; the runner calls the plan and never tests a kind.

A plan says:

- what it decides before any row is decoded (``choose``: a sequence adapter's action per prompt, a
  draft-gated adapter's keep-or-re-decode per prompt, after the draft pass);
- which rows give each k's samples (``sample_keys``) and which of them are shared fixed-action rows
  (``static_actions``) or rows of its own, decoded with a chooser or its own rollout
  (``rollouts``, ``row_decoder``);
- how one problem's rows become pass@k, answer accuracy and mean length (``problem_values``) and
  what an answer cost (``cost``);
- what eval_details records of it besides the common fields (``add_details``, ``action_usage``,
  ``output_actions``).

A new way of decoding adds a plan here and an entry in ``_PLANS``."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..core.stats import pass_at_k
from ..decoding.actions import GREEDY, ActionSet, DecodingAction
from ..decoding.loop import DecodeResult, row_seed
from ..decoding.rollouts import RolloutRequest, Rollouts, answer_stops
from ..policies.draft import CONFIDENCE_FEATURES
from ..policies.kinds import DRAFT_THEN_REDECODE, ONE_PER_PROMPT, PER_TOKEN, Decoding
from ..policies.networks import TokenPolicyChooser, UniformChooser
from .aggregate import answer_accuracy, draft_answer_accuracy, draft_cost, draft_pass, subset_cost
from .draft import draft_choices, draft_compute, draft_summaries
from .keys import Key, TokenKey, mixed_action, static_key
from .methods import (
    ANSWER_ACCURACY,
    FIXED_ACTION,
    GREEDY_ROWS,
    MIXTURE,
    OWN_ROLLOUT,
    UNIFORM_PER_TOKEN,
    EvalConfig,
    Method,
    policy_choices,
)
from .store import RowStore

__all__ = ["Setup", "Plan", "plan_for", "sequence_choices"]

RolloutsFactory = Callable[..., Rollouts]
"""``(action_set, per_token) -> Rollouts``; ``per_token`` is True when a chooser will drive it."""


@dataclass
class Setup:
    """What the plans' ``choose`` read: the encoded prompts and the draft pass's summaries (one
    greedy decode per stop setting, shared by every draft-gated method)."""

    lm: object
    task: object
    prompts: list
    problems: list
    cfg: EvalConfig
    batch_rows: int
    store: RowStore
    summaries: dict


def _canon(action: DecodingAction) -> DecodingAction:
    """Every greedy action is the one greedy row."""
    return GREEDY if action.is_greedy else action


class Plan:
    """A method whose samples are shared fixed-action rows (the base of every plan)."""

    def choose(self, method: Method, setup: Setup) -> list | None:
        """``[seed][problem][k index]`` what the method decides before decoding; None: nothing."""
        return None

    def sample_keys(self, method: Method, cfg: EvalConfig, s: int, i: int, pid: str, choices) -> list[list[Key]]:
        """For each k (in ``cfg.k_values`` order) the n keys of the samples pass@k is computed from."""
        raise NotImplementedError

    def shown_samples(self, cfg: EvalConfig) -> int:
        """How many samples of a problem are distinct generations (the trajectories kept)."""
        return cfg.n

    def output_actions(self, method: Method) -> list[DecodingAction]:
        """The actions of its rows, in output order (``actions`` in eval_details' trajectories)."""
        return list(method.actions)

    def static_actions(self, method: Method, choices) -> list[DecodingAction]:
        """The actions of the shared rows it uses (none for rows of its own)."""
        return self.output_actions(method)

    def rollouts(self, method: Method, factory: RolloutsFactory) -> Rollouts | None:
        """The engine of its own rows; None: its rows are the shared ones."""
        return None

    def problem_values(self, method: Method, cfg: EvalConfig, s: int, i: int, pid: str, choices,
                       store: RowStore) -> dict[str, float]:
        """pass@k, answer accuracy at B = k and mean length of one problem in one seed."""
        out, lengths = {}, []
        for k, keys in zip(cfg.k_values, self.sample_keys(method, cfg, s, i, pid, choices)):
            out[f"{ANSWER_ACCURACY}@{k}"] = answer_accuracy(keys, k, store)
            c = int(round(sum(store.correct[key] >= 0.5 for key in keys)))
            out[f"pass@{k}"] = pass_at_k(cfg.n, c, k)
            lengths.append(statistics.fmean(store.length[key] for key in keys))
        out["mean_length"] = statistics.fmean(lengths)
        return out

    def cost(self, sources: Sequence, costs, k: int) -> tuple[float, float]:
        """``(decodes, tokens)`` of an answer at B = k from its n samples' sources (``subset_cost``)."""
        return subset_cost(sources, costs, k)

    def action_usage(self, method: Method, keys: list[Key], store: RowStore) -> list[float]:
        """Share of each of its output actions over its samples (``keys``: every row it used)."""
        counts = Counter(_canon(k.action) for k in keys)
        return [counts.get(a, 0) / max(len(keys), 1) for a in map(_canon, self.output_actions(method))]

    def add_details(self, method: Method, details: dict, cfg: EvalConfig, problems, choices, store: RowStore) -> None:
        """Record what eval_details holds of this way of decoding besides the common fields."""


class FixedPlan(Plan):
    """greedy / static / Best: one action per sample (with ``k_actions``: that k's action)."""

    def __init__(self, deterministic: bool = False):
        self.deterministic = deterministic
        """Greedy: with ``decode_deterministic_once`` one row stands for every sample."""

    def sample_keys(self, method, cfg, s, i, pid, choices):
        n, once, stop = cfg.n, cfg.decode_deterministic_once, method.stops(cfg)
        return [[static_key(method.action_for_k(k), s, i, j, once, stop) for j in range(n)] for k in cfg.k_values]

    def shown_samples(self, cfg):
        return 1 if self.deterministic and cfg.decode_deterministic_once else cfg.n


class MixturePlan(Plan):
    """A uniform mixture drawn once per sample (a hash of the row picks the action)."""

    def sample_keys(self, method, cfg, s, i, pid, choices):
        once, stop = cfg.decode_deterministic_once, method.stops(cfg)
        keys = [static_key(mixed_action(method.actions, cfg.seed, s, pid, j), s, i, j, once, stop)
                for j in range(cfg.n)]
        return [keys] * len(cfg.k_values)


class PromptChoicePlan(Plan):
    """A sequence adapter: one action per prompt and k from the prompt embedding, before decoding."""

    def choose(self, method, setup):
        return sequence_choices(method, setup.lm, setup.prompts, setup.cfg, setup.problems)

    def sample_keys(self, method, cfg, s, i, pid, choices):
        once, stop = cfg.decode_deterministic_once, method.stops(cfg)
        chosen = choices[method.name][s][i]  # [k index]
        return [[static_key(chosen[ki], s, i, j, once, stop) for j in range(cfg.n)] for ki in range(len(cfg.k_values))]

    def static_actions(self, method, choices):
        return [a for per_seed in choices[method.name] for per_problem in per_seed for a in per_problem]

    def add_details(self, method, details, cfg, problems, choices, store):
        by_seed = [[[method.actions.index(a) for a in per_problem] for per_problem in per_seed]
                   for per_seed in choices[method.name]]
        details["sequence_choices"][method.name] = {
            "k_values": list(cfg.k_values),
            "actions": by_seed[0],  # [problem][k index]: seed 0's adapter (the choices figure)
            "actions_by_seed": by_seed,  # [seed][problem][k index]
        }


class DraftPlan(Plan):
    """A draft-gated adapter: the greedy draft, kept (output 0) or followed by n samples of the
    chosen re-decode action; scored as the draft plus conditional re-decodes, both passes counted."""

    def choose(self, method, setup):
        cfg, stop = setup.cfg, method.stops(setup.cfg)
        if stop not in setup.summaries:  # the draft pass: one greedy decode that records hidden states
            checks = answer_stops(setup.task, setup.problems, range(len(setup.problems)), stop)
            setup.summaries[stop] = draft_summaries(setup.lm, setup.prompts, cfg.token_budget, setup.batch_rows,
                                                    checks)
        setup.store.draft_confidence[method.name] = setup.summaries[stop].confidence
        return draft_choices(method, setup.lm, setup.prompts, cfg, setup.problems, setup.summaries[stop])

    def sample_keys(self, method, cfg, s, i, pid, choices):
        once, stop = cfg.decode_deterministic_once, method.stops(cfg)
        draft = static_key(GREEDY, s, i, 0, once, stop)
        out = []
        for c in choices[method.name][s][i]:  # per k: the draft alone (kept), or the draft then n samples
            redecodes = [] if c == 0 else [static_key(method.actions[c - 1], s, i, j, once, stop)
                                           for j in range(cfg.n)]
            out.append([draft, *redecodes])
        return out

    def output_actions(self, method):
        return [GREEDY, *method.actions]

    def problem_values(self, method, cfg, s, i, pid, choices, store):
        out, lengths = {}, []
        for k, keys in zip(cfg.k_values, self.sample_keys(method, cfg, s, i, pid, choices)):
            out[f"{ANSWER_ACCURACY}@{k}"] = draft_answer_accuracy(keys, k, store)
            out[f"pass@{k}"], answer_keys = draft_pass(keys, k, cfg.n, store)
            lengths.append(statistics.fmean(store.length[key] for key in answer_keys))
        out["mean_length"] = statistics.fmean(lengths)
        return out

    def cost(self, sources, costs, k):
        return draft_cost(sources, costs, k)

    def add_details(self, method, details, cfg, problems, choices, store):
        details.setdefault("draft", {})[method.name] = draft_details(method, cfg, problems, choices, store)


class OwnRowsPlan(Plan):
    """A method whose rows are its own (never shared): a chooser at every token (a token adapter,
    per-token Mixed) or its own rollout (a custom method)."""

    def sample_keys(self, method, cfg, s, i, pid, choices):
        return [[TokenKey(method.name, s, i, j) for j in range(cfg.n)]] * len(cfg.k_values)

    def static_actions(self, method, choices):
        return []

    per_token = True
    """A chooser drives its rows at every token (what the rollouts factory is told)."""

    def rollouts(self, method, factory):
        return factory(ActionSet(method.actions), self.per_token)

    def row_decoder(self, method: Method, s: int, rollouts: Rollouts):
        """``(chooser, run)`` for seed ``s``: the chooser ``rollouts.run`` takes, or a ``run(request)``
        that decodes a request its own way (then the chooser is None)."""
        raise NotImplementedError

    def replicates_deterministic(self, method: Method, cfg: EvalConfig) -> bool:
        """Whether a row that depends on no seed is decoded once and stands for the others."""
        return False

    def action_usage(self, method, keys, store):
        counts = store.token_counts.get(method.name, Counter())
        total = sum(counts.values()) or 1
        return [counts.get(a, 0) / total for a in range(len(method.actions))]


class PolicyChooserPlan(OwnRowsPlan):
    """A token adapter: its policy picks the action at every token (a draw, or its argmax)."""

    def row_decoder(self, method, s, rollouts):
        return TokenPolicyChooser(method.policy_for(s), deterministic=method.policy_mode == "argmax"), None

    def replicates_deterministic(self, method, cfg):
        return cfg.decode_deterministic_once and method.policy_mode == "argmax"


class UniformChooserPlan(OwnRowsPlan):
    """The per-token Mixed: a uniform draw at every token."""

    def row_decoder(self, method, s, rollouts):
        return UniformChooser(len(method.actions)), None


class RolloutPlan(OwnRowsPlan):
    """A custom method: ``Method.rollout`` decodes every sample its own way."""

    per_token = False

    def row_decoder(self, method, s, rollouts):
        def run(request: RolloutRequest) -> DecodeResult:
            return method.rollout(rollouts, request, s)

        return None, run


_PLANS: dict[Decoding, Plan] = {
    GREEDY_ROWS: FixedPlan(deterministic=True),
    FIXED_ACTION: FixedPlan(),
    MIXTURE: MixturePlan(),
    UNIFORM_PER_TOKEN: UniformChooserPlan(),
    OWN_ROLLOUT: RolloutPlan(),
    ONE_PER_PROMPT: PromptChoicePlan(),
    PER_TOKEN: PolicyChooserPlan(),
    DRAFT_THEN_REDECODE: DraftPlan(),
}
"""The plan of each way of decoding an evaluation scores (sequential attempts are refused by
``Method`` and scored from sample tables instead)."""


def plan_for(method: Method) -> Plan:
    """The plan of ``method``'s way of decoding."""
    try:
        return _PLANS[method.decoding]
    except KeyError:
        raise ValueError(f"method {method.name!r}: the runner has no plan for {method.decoding.name}") from None


def sequence_choices(method: Method, lm, prompts, cfg: EvalConfig, problems) -> list[list[list[DecodingAction]]]:
    """``[seed][problem][k index]``: the action the sequence adapter (of that seed) picks for budget
    k: its argmax (policy_mode 'argmax', the same in every seed) or a draw from pi with the uniform
    of ``row_seed(cfg.seed, seed, problem id, k, "policy")`` (policy_mode 'sample')."""
    pooling = (method.adapter.embedding or {}).get("pooling", "mean") if method.adapter else "mean"
    emb = lm.prompt_embeddings(prompts, pooling=pooling)

    def uniform_for(seed: int, problem, k: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(row_seed(cfg.seed, seed, problem.id, k, "policy"))
        return torch.rand((), generator=generator)

    indices = policy_choices(method, emb, problems, cfg, uniform_for)
    return [[[method.actions[i] for i in per_k] for per_k in per_seed] for per_seed in indices]


def draft_details(m: Method, cfg: EvalConfig, problems, choices, store: RowStore) -> dict:
    """A draft-gated method's choices ``[seed][problem][k index]`` (0 keeps the draft), its compute
    per k (decodes and tokens per problem, the draft counted; re-decoded share), what its gate read
    (``confidence``: per problem id, the draft's confidence summary) and every re-decode outcome the
    evaluation decoded (``redecode_outcomes[seed][problem][action]``: the mean correctness of that
    action's samples, whichever method decoded them; None where none did), so that a gate at another
    re-decode share can be re-scored from the file."""
    once, stop = cfg.decode_deterministic_once, m.stops(cfg)

    def rows(a: DecodingAction, i: int, seeds) -> list[Key]:  # every sample of action a on problem i in seeds
        return [static_key(a, s, i, j, once, stop) for s in seeds for j in range(cfg.n)]

    lengths = [store.length[static_key(GREEDY, 0, i, 0, once, stop)] for i in range(len(problems))]
    redecode = []  # [problem][action]: the mean length of the action's decoded samples (0 where none was)
    for i in range(len(problems)):
        redecode.append([_known_mean(store.length, rows(a, i, range(cfg.seeds)), 0.0) for a in m.actions])
    outcomes = []  # [seed][problem][action]: the mean correctness of its decoded samples (None where none was)
    for s in range(cfg.seeds):
        per_problem = []
        for i in range(len(problems)):
            per_problem.append([_known_mean(store.correct, rows(a, i, [s]), None) for a in m.actions])
        outcomes.append(per_problem)
    confidence = store.draft_confidence.get(m.name)
    read = {}  # problem id -> the draft's confidence summary its gate read
    if confidence is not None:
        for p, row in zip(problems, confidence.tolist()):
            read[p.id] = dict(zip(CONFIDENCE_FEATURES, map(float, row)))
    return {"k_values": list(cfg.k_values), "choices_by_seed": choices[m.name],
            **draft_compute(choices[m.name], cfg, lengths, redecode),
            "confidence": read, "redecode_outcomes": outcomes}


def _known_mean(values: dict, keys: list[Key], missing):
    """The mean of ``values`` over the ``keys`` it has; ``missing`` where it has none."""
    known = [values[key] for key in keys if key in values]
    return statistics.fmean(known) if known else missing
