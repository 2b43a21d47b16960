"""Draft-gated methods and their controls, scored on a both-arms table (``training.draft.DraftTable``).

Every method here answers from the same stored rows of each problem (the greedy draft and ``n``
samples per re-decode action), so comparisons are paired and cost no further decoding. Per problem
and parallel budget B each method gives: ``pass`` (pass@B, unbiased over the stored samples where
it draws them), ``majority`` (whether the most common answer of its B answers is right: what a user
who gets one answer sees), ``decodes`` and ``tokens`` (sequences and tokens generated, the draft
counted).

Methods (the draft is one of the B answers wherever a method decodes it):
- **static**: greedy (one decode at any B) or B samples of one action;
- **gated** (``gated_rows``): per problem keep the draft or re-decode with a chosen action (the
  Draft-gated adapter, the confidence threshold, the prompt-fed control all choose this way);
- **random gate** (``random_gate_rows``): re-decodes a share q of problems at random (its expected
  outcome, exact);
- **confidence threshold** (``threshold_choices``): ReASC's single-sample stage, re-decode where the
  draft's confidence is below a threshold (tuned on validation, ``tune_threshold``, or set to match
  another method's re-decode rate, ``threshold_for_rate``);
- **confidence-weighted vote** (``weighted_vote_rows``): DeepConf's offline rule, the draft and B - 1
  samples voting with their mean max-probability as weight;
- **agreement stopping** (``agreement_rows``): Adaptive-Consistency, drafts then samples one at a
  time until two answers agree or B are drawn.

The same gates run inside ``evaluate`` (live decoding, the evaluation table): ``draft_choices`` makes
the draft pass and each draft-gated method's choice per (seed, problem, k); ``ThresholdGate`` and
``RandomGate`` are the controls as policies (``threshold_gate_method``, ``random_gate_method``).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..core.stats import mean_ci, pass_at_k
from ..decoding.actions import GREEDY, ActionSet, DecodingAction
from ..decoding.loop import decode, row_seed
from ..policies.draft import (
    CONFIDENCE_FEATURES,
    KEEP_DRAFT,
    DraftContextConfig,
    DraftSummary,
    draft_context,
    redecode_rows,
    summarise_draft,
)
from .methods import Method, policy_choices

__all__ = [
    "MethodRows",
    "static_rows",
    "gated_rows",
    "random_gate_rows",
    "threshold_choices",
    "threshold_for_rate",
    "tune_threshold",
    "weighted_vote_rows",
    "agreement_rows",
    "summarise_rows",
    "paired_difference",
    "ThresholdGate",
    "RandomGate",
    "threshold_gate_method",
    "random_gate_method",
    "draft_summaries",
    "draft_choices",
    "draft_compute",
]


@dataclass
class MethodRows:
    """Per-problem outcomes of one method at one parallel budget (lists aligned with the problems)."""

    name: str
    budget: int
    passed: list[float] = field(default_factory=list)
    majority: list[float] = field(default_factory=list)
    decodes: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)
    redecoded: list[float] = field(default_factory=list)
    """Share of the problem re-decoded (gated methods: 0 or 1; the random gate: q)."""

    def add(self, passed: float, majority: float, decodes: float, tokens: float, redecoded: float = 0.0) -> None:
        self.passed.append(float(passed))
        self.majority.append(float(majority))
        self.decodes.append(float(decodes))
        self.tokens.append(float(tokens))
        self.redecoded.append(float(redecoded))


def _vote(answers: Sequence[tuple[str, float, float]]) -> float:
    """Whether the winning answer of ``(answer, reward, weight)`` triples is right: weights summed per
    non-empty answer, ties to the earliest; no answer at all is wrong."""
    totals: dict[str, float] = defaultdict(float)
    for answer, _, weight in answers:
        if answer:
            totals[answer] += weight
    if not totals:
        return 0.0
    top = max(totals.values())
    winner = next(a for a, _, _ in answers if a and totals[a] == top)
    return max(r for a, r, _ in answers if a == winner)


def _draft(record: dict) -> tuple[str, float, float]:
    d = record["draft"]
    return d["answer"], float(d["reward"]), float(d["confidence"][CONFIDENCE_FEATURES.index("max_prob_mean")])


def _samples(record: dict, action: str) -> list[dict]:
    return record["samples"][action]


def static_rows(table, ids: Sequence[str], action: str | None, budget: int, name: str = "") -> MethodRows:
    """Greedy (``action`` None: one decode whatever B) or B samples of ``action``."""
    rows = MethodRows(name or (action or "greedy"), budget)
    for pid in ids:
        record = table.records[pid]
        if action is None:
            _, reward, _ = _draft(record)
            rows.add(reward, reward, 1, record["draft"]["length"])
            continue
        samples = _samples(record, action)
        n, c = len(samples), sum(s["reward"] >= 0.5 for s in samples)
        first = samples[:budget]
        majority = _vote([(s["answer"], s["reward"], 1.0) for s in first])
        mean_length = sum(s["length"] for s in samples) / n
        # a budget beyond the stored samples scores all of them (pass@n)
        rows.add(pass_at_k(n, c, min(budget, n)), majority, budget, budget * mean_length)
    return rows


def gated_rows(table, ids: Sequence[str], choices: Sequence[int], actions: Sequence[str], budget: int,
               name: str) -> MethodRows:
    """Keep the draft (choice 0) or re-decode with ``actions[choice - 1]``: at B = 1 the re-decode
    is the answer, above the draft and B - 1 samples are."""
    rows = MethodRows(name, budget)
    for pid, choice in zip(ids, choices):
        record = table.records[pid]
        answer, reward, _ = _draft(record)
        draft_tokens = record["draft"]["length"]
        if int(choice) == KEEP_DRAFT:
            rows.add(reward, reward, 1, draft_tokens)
            continue
        samples = _samples(record, actions[int(choice) - 1])
        extra = redecode_rows(budget)
        n, c = len(samples), sum(s["reward"] >= 0.5 for s in samples)
        mean_length = sum(s["length"] for s in samples) / n
        if budget == 1:
            passed, majority = c / n, c / n
        else:
            passed = 1 - (1 - reward) * (1 - pass_at_k(n, c, min(extra, n)))
            majority = _vote([(answer, reward, 1.0)] + [(s["answer"], s["reward"], 1.0) for s in samples[:extra]])
        rows.add(passed, majority, 1 + extra, draft_tokens + extra * mean_length, 1.0)
    return rows


def random_gate_rows(table, ids: Sequence[str], share: float, action: str, budget: int, name: str) -> MethodRows:
    """The expected outcome of re-decoding a random ``share`` of problems with ``action``."""
    keep = gated_rows(table, ids, [KEEP_DRAFT] * len(ids), [action], budget, name)
    redo = gated_rows(table, ids, [1] * len(ids), [action], budget, name)
    rows = MethodRows(name, budget)
    for i in range(len(ids)):
        mix = [(1 - share) * getattr(keep, f)[i] + share * getattr(redo, f)[i]
               for f in ("passed", "majority", "decodes", "tokens")]
        rows.add(*mix, redecoded=share)
    return rows


def confidence_of(table, ids: Sequence[str], feature: str = "max_prob_mean") -> torch.Tensor:
    """``[P]`` one confidence summary number of each draft (higher: surer, except entropies and
    length, which are negated so that every feature reads "higher is surer")."""
    index = CONFIDENCE_FEATURES.index(feature)
    values = torch.tensor([table.records[i]["draft"]["confidence"][index] for i in ids], dtype=torch.float64)
    return -values if feature in ("entropy_mean", "entropy_max", "length_fraction") else values


def threshold_choices(confidence: torch.Tensor, threshold: float, action_index: int = 1) -> list[int]:
    """Re-decode (with policy output ``action_index``) where the confidence is below ``threshold``."""
    return [action_index if float(c) < threshold else KEEP_DRAFT for c in confidence]


def threshold_for_rate(confidence: torch.Tensor, rate: float) -> float:
    """The threshold that re-decodes (about) a share ``rate`` of these drafts, the least confident."""
    if rate <= 0:
        return -math.inf
    if rate >= 1:
        return math.inf
    ordered = confidence.sort().values
    cut = int(round(rate * len(ordered)))
    if cut == 0:
        return -math.inf
    if cut >= len(ordered):
        return math.inf
    return float((ordered[cut - 1] + ordered[cut]) / 2)


def tune_threshold(table, ids: Sequence[str], action: str, *, max_decodes: float = 1.5,
                   features: Sequence[str] = CONFIDENCE_FEATURES[:4]) -> dict:
    """The confidence feature and threshold with the best pass@1 on these problems among those that
    spend at most ``max_decodes`` per problem (ties: fewer decodes). Returns ``{feature, threshold,
    pass, decodes}``."""
    best = None
    for feature in features:
        confidence = confidence_of(table, ids, feature)
        candidates = sorted({float(c) for c in confidence}) + [math.inf]
        for threshold in [-math.inf] + candidates:
            choices = threshold_choices(confidence, threshold)
            rows = gated_rows(table, ids, choices, [action], 1, "threshold")
            decodes = sum(rows.decodes) / len(ids)
            if decodes > max_decodes + 1e-9:
                continue
            key = (sum(rows.passed) / len(ids), -decodes)
            if best is None or key > best[0]:
                best = (key, {"feature": feature, "threshold": threshold, "pass": key[0], "decodes": decodes})
    return best[1]


def weighted_vote_rows(table, ids: Sequence[str], action: str, budget: int, name: str) -> MethodRows:
    """DeepConf's offline rule: the draft and B - 1 samples of ``action`` vote, each weighted by its
    mean max-probability; ``passed`` is pass@B of the same answers."""
    rows = MethodRows(name, budget)
    for pid in ids:
        record = table.records[pid]
        answer, reward, weight = _draft(record)
        samples = _samples(record, action)[: budget - 1]
        votes = [(answer, reward, weight)] + [(s["answer"], s["reward"], s["confidence"]) for s in samples]
        rows.add(max(r for _, r, _ in votes), _vote(votes), len(votes),
                 record["draft"]["length"] + sum(s["length"] for s in samples))
    return rows


def agreement_rows(table, ids: Sequence[str], action: str, budget: int, name: str) -> MethodRows:
    """Adaptive-Consistency's stopping: the draft, then samples of ``action`` one at a time, until
    some answer has two votes or B answers are in; the majority of those answers is the answer."""
    rows = MethodRows(name, budget)
    for pid in ids:
        record = table.records[pid]
        answer, reward, _ = _draft(record)
        votes, tokens = [(answer, reward, 1.0)], record["draft"]["length"]
        for sample in _samples(record, action)[: budget - 1]:
            if max(Counter(a for a, _, _ in votes if a).values(), default=0) >= 2:
                break
            votes.append((sample["answer"], sample["reward"], 1.0))
            tokens += sample["length"]
        rows.add(max(r for _, r, _ in votes), _vote(votes), len(votes), tokens, float(len(votes) > 1))
    return rows


def paired_difference(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Mean and 95% interval of ``a - b`` per problem, in points."""
    mean, low, high = mean_ci([100 * (x - y) for x, y in zip(a, b)])
    return [round(v, 1) for v in (mean, low, high)]


def summarise_rows(rows: MethodRows, against: dict[str, MethodRows] | None = None) -> dict:
    """Means (pass and majority in points) and paired differences against each of ``against``."""
    n = len(rows.passed)
    out = {"pass": round(100 * sum(rows.passed) / n, 1), "majority": round(100 * sum(rows.majority) / n, 1),
           "decodes_per_problem": round(sum(rows.decodes) / n, 3), "tokens_per_problem": round(sum(rows.tokens) / n, 1),
           "redecode_share": round(sum(rows.redecoded) / n, 3)}
    for label, other in (against or {}).items():
        if other is not rows:
            out[f"pass_vs_{label}"] = paired_difference(rows.passed, other.passed)
            if rows.budget > 1:
                out[f"majority_vs_{label}"] = paired_difference(rows.majority, other.majority)
    return out


# ---- inside evaluate: the draft pass, the choices, the controls as policies -----------------------


class ThresholdGate:
    """ReASC's single-sample stage as a policy over the draft's confidence summary: re-decode (with
    output ``action``) where confidence feature ``feature`` reads less sure than ``threshold``
    (entropies and length: above it)."""

    def __init__(self, feature: str, threshold: float, action: int = 1, num_outputs: int = 2):
        if feature not in CONFIDENCE_FEATURES:
            raise ValueError(f"feature must be one of {CONFIDENCE_FEATURES}, got {feature!r}")
        self.feature, self.threshold, self.action, self.num_outputs = feature, float(threshold), action, num_outputs

    def choose(self, contexts: torch.Tensor, budgets: torch.Tensor, *, deterministic: bool = True,
               uniform: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        values = contexts[:, CONFIDENCE_FEATURES.index(self.feature)].double()
        sure = -values if self.feature in ("entropy_mean", "entropy_max", "length_fraction") else values
        choice = torch.where(sure < self.threshold, self.action, KEEP_DRAFT)
        return choice, torch.nn.functional.one_hot(choice, self.num_outputs).float()

    def eval(self) -> "ThresholdGate":
        return self

    def train(self, mode: bool = True) -> "ThresholdGate":
        return self

    training = False


class RandomGate(ThresholdGate):
    """The random control at exactly a share: of the P problems it is shown together (every problem
    of one seed and k), re-decode the ``round(share * P)`` whose own uniforms (keyed by seed, problem
    and k, whatever the order) are the smallest. A seeded choice of exactly that many, so the control
    spends the compared method's share, not a Bernoulli draw per problem that misses it by chance."""

    def __init__(self, share: float, action: int = 1, num_outputs: int = 2):
        if not 0 <= share <= 1:
            raise ValueError(f"share must be in [0, 1], got {share}")
        self.share, self.action, self.num_outputs = float(share), action, num_outputs

    def choose(self, contexts, budgets, *, deterministic: bool = True, uniform=None):
        if uniform is None:
            raise ValueError("the random gate needs one uniform number per problem")
        uniform = uniform.reshape(-1)  # [P]
        count = int(round(self.share * len(uniform)))
        chosen = torch.argsort(uniform, stable=True)[:count]  # ties: the earlier problem
        choice = torch.full((len(uniform),), KEEP_DRAFT, dtype=torch.long)
        choice[chosen] = self.action
        return choice, torch.nn.functional.one_hot(choice, self.num_outputs).float()


def threshold_gate_method(action: DecodingAction, feature: str, threshold: float,
                          name: str = "Confidence threshold", stop_at_answer: bool | None = None) -> Method:
    """The tuned confidence threshold (chosen on validation) as an evaluation row (a fixed rule).
    ``stop_at_answer``: the draft and the re-decodes end at their first complete answer (None: as
    the evaluation says; pass the adapter's when it is compared to one)."""
    return Method(name, "draft", [action], role="confidence threshold", level="sequence",
                  policy=ThresholdGate(feature, threshold), policy_mode="argmax",
                  draft_context={"features": "confidence"}, stop_at_answer=stop_at_answer, family="fixed rule")


def random_gate_method(action: DecodingAction, share: float, name: str = "Random gate",
                       stop_at_answer: bool | None = None) -> Method:
    """A gate that re-decodes a random ``share`` of problems (drawn per seed, problem and k): a fixed rule."""
    return Method(name, "draft", [action], role="random gate", level="sequence", policy=RandomGate(share),
                  policy_mode="sample", draft_context={"features": "confidence"}, stop_at_answer=stop_at_answer,
                  family="fixed rule")


def draft_summaries(lm, prompts, token_budget: int, batch_rows: int = 64,
                    answer_complete: Sequence | None = None) -> DraftSummary:
    """The greedy draft's summary of every prompt (the draft pass, in chunks of ``batch_rows``).
    ``answer_complete``: per prompt, the check that ends its draft at its first complete answer
    (None: drafts run to EOS or the budget)."""
    parts = []
    for start in range(0, len(prompts), batch_rows):
        checks = None if answer_complete is None else list(answer_complete[start:start + batch_rows])
        result = decode(lm, prompts[start:start + batch_rows], ActionSet([GREEDY]), row_actions=0,
                        token_budget=token_budget, record_features=True, stop_checks=checks)
        parts.append(summarise_draft(result))
    return DraftSummary.cat(parts)


def draft_choices(method: Method, lm, prompts, cfg, problems, summary: DraftSummary | None = None) -> list:
    """``[seed][problem][k index]`` the policy output (0 keeps the draft) of a draft-gated method for
    parallel budget k: its argmax, or a draw with the uniform of ``row_seed(cfg.seed, seed, problem
    id, k, "policy")`` (policy_mode 'sample', also what a random gate reads)."""
    context = DraftContextConfig(**{**method.draft_context, "token_budget": cfg.token_budget})
    if context.features == "prompt":
        pooling = context.pooling
        x = draft_context(None, context, lm.prompt_embeddings(prompts, pooling=pooling))
    else:
        x = draft_context(summary if summary is not None else draft_summaries(lm, prompts, cfg.token_budget),
                          context)

    def uniform_for(seed: int, problem, k: int) -> torch.Tensor:  # what a random gate reads too
        return torch.tensor((row_seed(cfg.seed, seed, problem.id, k, "policy") % 2**24) / 2**24)

    return policy_choices(method, x, problems, cfg, uniform_for)


def draft_compute(choices: list, cfg, lengths: Sequence[float], redecode_lengths: Sequence[Sequence[float]]) -> dict:
    """Per k: decodes and generated tokens per problem (the draft counted) and the re-decoded share,
    averaged over seeds and problems. ``lengths[i]``: the draft's tokens; ``redecode_lengths[i][a]``:
    the mean tokens of a sample of re-decode action a on problem i."""
    out = {"decodes_per_problem": {}, "tokens_per_problem": {}, "redecode_share": {}}
    for ki, k in enumerate(cfg.k_values):
        decodes, tokens, redone = [], [], []
        for per_seed in choices:
            for i, per_k in enumerate(per_seed):
                c = per_k[ki]
                extra = 0 if c == KEEP_DRAFT else redecode_rows(k)
                decodes.append(1 + extra)
                tokens.append(lengths[i] + (extra * redecode_lengths[i][c - 1] if extra else 0.0))
                redone.append(float(extra > 0))
        for key, values in (("decodes_per_problem", decodes), ("tokens_per_problem", tokens),
                            ("redecode_share", redone)):
            out[key][str(k)] = sum(values) / max(len(values), 1)
    return out
