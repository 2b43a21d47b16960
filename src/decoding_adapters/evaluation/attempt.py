"""The attempt policy against the fixed rules, at matched compute, from stored sample tables.

- ``rule_baselines``: every fixed rule (``evaluation.rules``) tuned on the validation table per
  compute level and re-scored on the test table, for each sampled arm read after the stopped greedy;
  each curve keeps every point's per-problem correctness.
- ``rule_at`` / ``strongest_rule``: a rule's accuracy at any mean compute by linear interpolation
  between its two neighbouring points (per problem: the same mixture of the two settings'
  correctness, so the paired interval stays paired; below its cheapest point, that point); the
  strongest rule at a compute is the one with the highest interpolated accuracy there, picked on
  the scoring table itself (each rule's settings were tuned on validation; which rule is strongest
  is the choice most favourable to the rules).
- ``train_and_score`` / ``price_curve``: train one policy per (price, seed) on a training table,
  keep-best on validation, score on the test table against the strongest rule at its own mean
  decodes, with a paired 95% interval over problems.
- ``thin_table_warning``: the one line that says a training table holds too few problems with both
  a right and a wrong attempt for the policy to learn from, and what the strongest rule reaches on
  validation (``strongest_on_validation``).
- ``ablation``: the same for each feature set (``training.attempt.FEATURE_SETS``), and how often
  the seeds' policies make the same decisions (``seed_agreement``).
- ``planted_attempt_table``: a world whose signal needs agreement and a hidden direction together
  (``planted_oracle``: the policy that knows the planted type).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.stats import paired_ci
from ..decoding.actions import GREEDY, DecodingAction
from ..decoding.attempts import sequential_attempts
from ..decoding.loop import row_seed
from ..decoding.protocol import STOP_AT_ANSWER, stored_stop
from ..decoding.rollouts import answer_stops, encode_problems
from ..policies.attempt import AttemptInputs, AttemptOutcome, PolicyDecider, walk
from ..policies.fixed_rules import RULES, RuleSetting, score_setting, vote
from ..policies.verifier import single_thread
from ..training.attempt import FEATURE_SETS, AttemptTrainConfig, AttemptTrainer, policy_config_from_table
from .rules import fit_calibrations, greedy_then, tune_rules
from .sample_table import (
    CONFIDENCE_FEATURES,
    TABLE_FORMAT,
    ConfidenceConfig,
    SampleTable,
)

__all__ = [
    "RuleCurve",
    "rule_baselines",
    "rule_at",
    "strongest_rule",
    "rule_compute",
    "strongest_on_validation",
    "THIN_TABLE_PROBLEMS",
    "informative_problems",
    "thin_table_warning",
    "Scored",
    "ATTEMPT_PARTS",
    "attempt_parts",
    "train_and_score",
    "price_curve",
    "crossfit_score",
    "ablation",
    "seed_agreement",
    "planted_attempt_table",
    "planted_oracle",
    "format_curve",
    "run_planted_attempt",
    "AttemptDecodeResult",
    "attempt_decode",
]


@dataclass
class RuleCurve:
    """One fixed rule on one draw sequence: its tuned points on the test table."""

    name: str
    decodes: np.ndarray
    """``[L]`` mean decodes per point, ascending."""
    accuracy: np.ndarray
    """``[L]``."""
    correct: np.ndarray
    """``[L, P]`` per-problem correctness of each point's setting."""
    settings: list[dict] = field(default_factory=list)
    val_accuracy: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """``[L]`` each point's accuracy on the validation table its setting was chosen on (empty: not known)."""
    val_decodes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """``[L]`` each point's mean decodes there."""


def rule_baselines(validation: SampleTable, test: SampleTable, rules: Sequence[str] = RULES,
                   verifier: tuple[np.ndarray, np.ndarray] | None = None) -> list[RuleCurve]:
    """Each rule's tuned curve on ``test`` for each sampled arm read after the stopped greedy;
    ``verifier`` (a verifier's scores ``[P, A, N]`` of both tables) gives the draws the column the
    verifier rules (``policies.fixed_rules.VERIFIER_RULES``, among ``rules``) read."""
    out = []
    greedy = any(a.is_greedy for a in validation.actions)
    scores = verifier or (None, None)
    for arm, action in zip(validation.arm_names, validation.actions):
        if action.is_greedy:
            continue
        first = "greedy" if greedy else None
        val = greedy_then(validation, arm, first, verifier=scores[0])
        tst = greedy_then(test, arm, first, verifier=scores[1])
        calibrations = fit_calibrations(val)
        curves = tune_rules(val, tst, rules=rules)
        for rule, curve in curves.items():
            points = sorted(curve["points"], key=lambda p: p["test"]["decodes"])
            if not points:
                continue
            correct = []
            for p in points:
                knobs = dict(p["setting"])
                name = knobs.pop("rule")
                scored = tst.score(score_setting(RuleSetting(name, tuple(knobs.items())), tst, calibrations))
                correct.append(scored.correct)
            out.append(RuleCurve(f"{rule} ({arm})", np.array([p["test"]["decodes"] for p in points]),
                                 np.array([p["test"]["accuracy"] for p in points]),
                                 np.array(correct, dtype=np.float64), [p["setting"] for p in points],
                                 np.array([p["validation"]["accuracy"] for p in points]),
                                 np.array([p["validation"]["decodes"] for p in points])))
    return out


def rule_at(curve: RuleCurve, decodes: float) -> tuple[float, np.ndarray]:
    """The rule's accuracy and per-problem (expected) correctness at ``decodes`` mean decodes."""
    d = curve.decodes
    if decodes <= d[0]:
        row = curve.correct[0]
    elif decodes >= d[-1]:
        row = curve.correct[-1]
    else:
        hi = int(np.searchsorted(d, decodes, side="right"))
        lo = hi - 1
        w = (decodes - d[lo]) / max(d[hi] - d[lo], 1e-12)
        row = (1 - w) * curve.correct[lo] + w * curve.correct[hi]
    return float(row.mean()), row


def rule_compute(curve: RuleCurve, decodes: float) -> float:
    """The mean decodes :func:`rule_at` reads ``curve`` at for ``decodes``: ``decodes`` itself where
    the curve spans it (matched compute), else the curve's nearest end (its cheapest point spends
    more; its last point spends less)."""
    return float(min(max(decodes, curve.decodes[0]), curve.decodes[-1]))


def strongest_rule(curves: Sequence[RuleCurve], decodes: float) -> tuple[str, float, np.ndarray]:
    """The rule with the highest interpolated accuracy at ``decodes``: its name, accuracy, correctness."""
    best = max(curves, key=lambda c: rule_at(c, decodes)[0])
    acc, row = rule_at(best, decodes)
    return best.name, acc, row


def strongest_on_validation(curves: Sequence[RuleCurve]) -> tuple[str, float, float] | None:
    """The rule that reaches the highest validation accuracy at its curve's end (a rule's setting at
    a higher compute level is chosen among more settings, so its end is its best on validation): its
    name, that accuracy and its mean decodes there (ties: fewer decodes); None without validation points."""
    points = [(c.name, float(a), float(d)) for c in curves for a, d in zip(c.val_accuracy, c.val_decodes)]
    return max(points, key=lambda t: (t[1], -t[2]), default=None)


THIN_TABLE_PROBLEMS = 100
"""Fewer training problems than this with both a right and a wrong attempt, and the attempt policy's
table is too thin to learn from: warned. Only those problems say which attempt to trust (where every
attempt is right or every one wrong, any answer scores the same). The smallest tables the policy
was measured to beat the fixed rules from held about 120 such problems (docs/attempt.md's smoke run:
150 fitted problems, +5 to +8 points with the hidden summary); none below 100 was."""


def informative_problems(table: SampleTable) -> tuple[int, int]:
    """``(solved, mixed)``: the problems of ``table`` with a right attempt, and those with both a right
    and a wrong one, over its distinct attempts (the greedy arm's one, every sampled arm's samples)."""
    right = np.concatenate([table.correct[:, a, :int(d)] for a, d in enumerate(table.distinct)], axis=1)
    return int(right.any(1).sum()), int((right.any(1) & ~right.all(1)).sum())


def thin_table_warning(train: SampleTable, baselines: Sequence[RuleCurve], more: str) -> str | None:
    """One line when ``train`` holds fewer than :data:`THIN_TABLE_PROBLEMS` problems with both a
    right and a wrong attempt, with what the strongest rule of ``baselines`` reaches on validation
    and ``more`` (how to give the policy more: the caller's options); None otherwise."""
    solved, mixed = informative_problems(train)
    if mixed >= THIN_TABLE_PROBLEMS:
        return None
    best = strongest_on_validation(baselines)
    reach = (f" (the strongest on validation: {best[0]}, {100 * best[1]:.1f}% at {best[2]:.2f} decodes per problem)"
             if best else "")
    return (f"the attempt policy's training table has a right attempt on {solved} of {train.shape[0]} problems and "
            f"both a right and a wrong one on {mixed}: too few (under {THIN_TABLE_PROBLEMS}) to learn which attempt "
            f"to trust, so expect it no better than the fixed rules{reach}; {more}")


@dataclass
class Scored:
    """One trained policy on the test table against the strongest rule at its compute."""

    price: float
    seed: int
    features: tuple[str, ...]
    accuracy: float
    decodes: float
    tokens: float
    rule: str
    rule_accuracy: float
    difference: tuple[float, float, float]
    """Policy minus the strongest rule, (mean, low, high) of the paired 95% interval over problems."""
    outcome: AttemptOutcome = field(repr=False)
    val_accuracy: float = float("nan")
    val_decodes: float = float("nan")
    rule_decodes: float = float("nan")
    """The mean decodes the rule's accuracy was read at (:func:`rule_compute`): ``decodes`` where matched."""
    parts: tuple[str, ...] = ("verifier", "stop")
    """Which learned parts the policy uses (:func:`attempt_parts`)."""

    @property
    def matched(self) -> bool:
        """Whether the rule was read at the policy's own compute (its curve spans it)."""
        return abs(self.rule_decodes - self.decodes) <= 1e-9

    def record(self) -> dict:
        return {"price": self.price, "seed": self.seed, "features": list(self.features), "accuracy": self.accuracy,
                "decodes": self.decodes, "tokens": self.tokens, "strongest_rule": self.rule,
                "rule_accuracy": self.rule_accuracy, "rule_decodes": self.rule_decodes,
                "matched_compute": self.matched, "difference": list(self.difference),
                "validation": {"accuracy": self.val_accuracy, "decodes": self.val_decodes},
                "parts": list(self.parts)}


ATTEMPT_PARTS = ("verifier", "stop", "decoder", "abandon")
"""The learned parts an attempt method may use: the per-attempt weight that picks the answer
(``verifier``), when to stop (``stop``), which arm the next attempt uses (``decoder``), cutting an
attempt short (``abandon``)."""


def attempt_parts(config) -> tuple[str, ...]:
    """The parts an attempt policy of ``config`` (``AttemptPolicyConfig``) uses: always its weight and
    its stop; ``decoder`` when it has more than one arm to draw after the first attempt."""
    drawn_after = [a for a in range(len(config.arms)) if a != config.first_arm or config.distinct[a] > 1]
    return ("verifier", "stop") + (("decoder",) if len(drawn_after) > 1 else ())


def _rule_decodes(baselines: Sequence[RuleCurve], name: str, decodes: float) -> float:
    return rule_compute(next(c for c in baselines if c.name == name), decodes)


def train_and_score(train: SampleTable, validation: SampleTable, test: SampleTable, config: AttemptTrainConfig,
                    baselines: Sequence[RuleCurve], out_dir: str | Path | None = None, resume: bool = False,
                    **meta) -> Scored:
    """Train one policy (``config``), keep-best on ``validation``, score it on ``test``; the adapter
    is written to ``out_dir`` when given (``resume``: continue a run there)."""
    policy_config = policy_config_from_table(train, config)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = AttemptTrainer(config, policy_config, AttemptInputs.from_table(train),
                                 AttemptInputs.from_table(validation), out_dir or tmp,
                                 actions=train.header["actions"], stop_at_answer=stored_stop(train.header), **meta)
        trainer.train(resume=resume)
    with single_thread():  # scored as it was trained: the same decisions whatever the thread count
        outcome = walk(trainer.policy, AttemptInputs.from_table(test), trainer.lattice)
    decodes = float(outcome.attempts.mean())
    name, acc, row = strongest_rule(baselines, decodes)
    mine = outcome.correct.astype(np.float64)
    diff = paired_ci(mine.tolist(), row.tolist()) if len(mine) > 1 else (float(mine.mean() - acc), math.nan, math.nan)
    return Scored(config.price, config.seed, policy_config.features, float(mine.mean()), decodes,
                  float(outcome.tokens.mean()), name, acc, diff, outcome,
                  trainer.last_validation.get("val_accuracy", math.nan),
                  trainer.last_validation.get("val_attempts", math.nan), _rule_decodes(baselines, name, decodes),
                  attempt_parts(policy_config))


def crossfit_score(train: SampleTable, validation: SampleTable, config: AttemptTrainConfig, folds: int,
                   baselines: Sequence[RuleCurve]) -> Scored:
    """The policy scored out of sample on every training problem: ``folds`` contiguous folds, each
    scored by a policy trained on the others (keep-best on ``validation``), the outcomes pooled in
    the table's order and compared with ``baselines`` scored on the whole training table (the rules
    are tuned on validation, so the training problems are out of sample for them too)."""
    p = train.shape[0]
    edges = np.linspace(0, p, folds + 1).round().astype(int)
    parts: list[tuple[np.ndarray, AttemptOutcome]] = []
    vals = []
    with tempfile.TemporaryDirectory() as tmp:
        for f in range(folds):
            held = np.arange(edges[f], edges[f + 1])
            rest = np.setdiff1d(np.arange(p), held)
            policy_config = policy_config_from_table(train, config)
            trainer = AttemptTrainer(config, policy_config, AttemptInputs.from_table(train.subset(rest)),
                                     AttemptInputs.from_table(validation), Path(tmp) / f"fold-{f}",
                                     actions=train.header["actions"])
            trainer.train()
            parts.append((held, walk(trainer.policy, AttemptInputs.from_table(train.subset(held)), trainer.lattice)))
            vals.append(trainer.last_validation)
    outcome = AttemptOutcome(np.concatenate([o.answers for _, o in parts]),
                             np.concatenate([o.attempts for _, o in parts]),
                             np.concatenate([o.tokens for _, o in parts]), [x for _, o in parts for x in o.paths],
                             [x for _, o in parts for x in o.stopped_by],
                             np.concatenate([o.correct for _, o in parts]))
    decodes = float(outcome.attempts.mean())
    name, acc, row = strongest_rule(baselines, decodes)
    mine = outcome.correct.astype(np.float64)
    return Scored(config.price, config.seed, policy_config.features, float(mine.mean()), decodes,
                  float(outcome.tokens.mean()), name, acc, paired_ci(mine.tolist(), row.tolist()), outcome,
                  float(np.mean([v.get("val_accuracy", math.nan) for v in vals])),
                  float(np.mean([v.get("val_attempts", math.nan) for v in vals])),
                  _rule_decodes(baselines, name, decodes), attempt_parts(policy_config))


def price_curve(train: SampleTable, validation: SampleTable, test: SampleTable, config: AttemptTrainConfig,
                prices: Sequence[float], seeds: Sequence[int], baselines: Sequence[RuleCurve],
                out_dir: str | Path | None = None, resume: bool = False, **meta) -> list[Scored]:
    """One policy per (price, seed); adapters under ``out_dir/price-<p>-seed-<s>`` when given."""
    out = []
    for price in prices:
        for seed in seeds:
            where = None if out_dir is None else Path(out_dir) / f"price-{price:g}-seed-{seed}"
            out.append(train_and_score(train, validation, test, replace(config, price=price, seed=seed),
                                       baselines, where, resume, **meta))
    return out


def seed_agreement(outcomes: Sequence[AttemptOutcome]) -> float:
    """Share of problems on which every seed's policy makes the same decisions (the same attempts in
    the same order, so the same stop)."""
    if len(outcomes) < 2:
        return 1.0
    same = [all(o.paths[i] == outcomes[0].paths[i] for o in outcomes[1:]) for i in range(len(outcomes[0].paths))]
    return float(np.mean(same))


def ablation(train: SampleTable, validation: SampleTable, test: SampleTable, config: AttemptTrainConfig,
             prices: Sequence[float], seeds: Sequence[int], baselines: Sequence[RuleCurve],
             feature_sets: dict[str, tuple[str, ...]] | None = None) -> list[dict]:
    """Each feature set at each price over ``seeds``: the policy against the strongest rule at its
    compute, per seed, and the seeds' decision agreement."""
    rows = []
    for name, features in (feature_sets or FEATURE_SETS).items():
        for price in prices:
            scored = price_curve(train, validation, test, replace(config, features=features), [price], seeds,
                                 baselines)
            rows.append({"features": name, "price": price, "seeds": [s.record() for s in scored],
                         "seed_agreement": seed_agreement([s.outcome for s in scored])})
    return rows


def format_curve(scored: Sequence[Scored]) -> str:
    """One line per trained policy: its accuracy and compute against the strongest rule there, "at
    matched compute" only where the rule's curve spans the policy's compute (else what the rule spends)."""
    lines = []
    for s in scored:
        d, lo, hi = s.difference
        if s.matched or math.isnan(s.rule_decodes):
            rule = f"strongest rule at matched compute {s.rule} {100 * s.rule_accuracy:5.1f}%"
        else:
            spends = "more" if s.rule_decodes > s.decodes else "less"
            end = "cheapest" if spends == "more" else "last"
            rule = (f"strongest rule {s.rule} {100 * s.rule_accuracy:5.1f}%, which spends {spends}: "
                    f"{s.rule_decodes:.2f} decodes at its {end} point")
        lines.append(f"price {s.price:<6g} seed {s.seed}: {100 * s.accuracy:5.1f}% at {s.decodes:.2f} decodes "
                     f"({s.tokens:.0f} tokens); {rule}; difference {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]")
    return "\n".join(lines)


# ---- the planted attempt world --------------------------------------------------------------------------


def planted_attempt_table(problems: int, seed: int = 0, samples: int = 8, hidden_size: int = 8,
                          wrong_answers: int = 4, hidden_shift: float = 1.5,
                          confidence_signal: float = 0.3) -> tuple[SampleTable, np.ndarray]:
    """A sample table (greedy, then ``samples`` of T=0.5) of two planted problem types, and the
    types ``[P]``. Answer 0 is right, answer 1 the trap, 2.. other wrong answers.

    - type 0 (voting helps): greedy right with probability 0.35 (else a uniform wrong answer); a
      sample right with 0.55, each wrong answer with 0.45 / ``wrong_answers``.
    - type 1 (a trap the sampler falls into): greedy right with 0.8 (else the trap); a sample says
      the trap with 0.5, the right answer with 0.3, another wrong answer with 0.2.

    Every attempt's hidden state is standard normal plus ``hidden_shift`` times +-1 (the type) along
    one fixed random direction; its confidence columns are standard normal plus
    ``confidence_signal`` on right attempts (weak, and the same in both types). No fixed rule reads
    the hidden state, and neither agreement nor confidence says which type a problem is: stopping
    at greedy on type 1 and voting on type 0 needs both."""
    gen = np.random.default_rng(seed)
    direction = np.random.default_rng(12345).normal(size=hidden_size)
    direction /= np.linalg.norm(direction)
    arms = [GREEDY, DecodingAction(temperature=0.5)]
    types = (gen.random(problems) < 0.5).astype(np.int64)
    shape = (problems, 2, samples)
    answers = np.zeros(shape, np.int64)
    w = wrong_answers
    g_right = np.where(types == 1, 0.8, 0.35)
    u = gen.random(problems)
    other = gen.integers(1, w + 1, size=problems)
    answers[:, 0, :] = np.where(u < g_right, 0, np.where(types == 1, 1, other))[:, None]
    s_probs = np.zeros((problems, w + 1))
    s_probs[types == 0] = [0.55] + [0.45 / w] * w
    s_probs[types == 1] = [0.3, 0.5] + [0.2 / (w - 1)] * (w - 1)
    cdf = s_probs.cumsum(1)
    draws = gen.random((problems, samples))
    answers[:, 1, :] = (draws[:, :, None] > cdf[:, None, :]).sum(-1).clip(max=w)
    right = answers == 0
    c = len(CONFIDENCE_FEATURES)
    confidence = gen.normal(size=shape + (c,)) + confidence_signal * right[..., None]
    sign = (2.0 * types - 1.0)[:, None, None, None]
    hidden = gen.normal(size=shape + (hidden_size,)) + hidden_shift * sign * direction
    tokens = gen.integers(8, 40, size=shape)
    return drawn_table("planted-attempt", seed, arms, answers, right, confidence, hidden, tokens, w + 1), types


def drawn_table(task: str, seed: int, arms: Sequence[DecodingAction], answers: np.ndarray, right: np.ndarray,
                confidence: np.ndarray, hidden: np.ndarray, tokens: np.ndarray, answer_ids: int) -> SampleTable:
    """A sample table drawn, not decoded (a planted world's), from its ``[P, A, N]`` arrays
    (``confidence`` and ``hidden`` with a last axis): arm 0 is greedy, its first slot's reading
    repeated in every slot as a decoded table holds it; answers are ids ``0 .. answer_ids - 1``."""
    for values in (answers, confidence, hidden, tokens):
        values[:, 0, :] = values[:, 0, :1]
    problems, _, samples = answers.shape
    header = {"format": TABLE_FORMAT, "version": 1, "task": task, "split": f"planted-{seed}", "model": {},
              "actions": [a.to_dict() for a in arms], "samples": samples, "token_budget": 48, "seed": seed,
              "stop_at_answer": True, "confidence": {"features": list(CONFIDENCE_FEATURES)}, "hidden": True}
    strings = [[str(i) for i in range(answer_ids)] for _ in range(problems)]
    return SampleTable(header, [f"{task}/{seed}/{i}" for i in range(problems)], answers.astype(np.int32), strings,
                       right.astype(np.float32), tokens.astype(np.int32), confidence.astype(np.float32),
                       hidden.astype(np.float16))


def planted_oracle(table: SampleTable, types: np.ndarray) -> RuleCurve:
    """The policy that knows each problem's planted type: greedy alone on type 1, the majority of
    greedy and the first m samples on type 0 (ties to greedy), for m = 0..N: its curve on ``table``."""
    draws = greedy_then(table, 1)
    correct_k = table.answer_correct()
    points, rows = [], []
    for m in range(draws.length):
        majority = vote(draws.answers, upto=1 + m)
        chosen = np.where(types == 1, draws.answers[:, 0], majority)
        padded = np.concatenate([correct_k, np.zeros((len(types), 1), bool)], axis=1)
        row = padded[np.arange(len(types)), np.where(chosen >= 0, chosen, correct_k.shape[1])].astype(np.float64)
        points.append(1 + m * float((types == 0).mean()))
        rows.append(row)
    return RuleCurve("oracle (knows the type)", np.array(points), np.array([r.mean() for r in rows]), np.array(rows))


def run_planted_attempt(seed: int, price: float = 0.02, features: Sequence[str] = ("confidence", "hidden", "agreement"),
                        sizes: tuple[int, int, int] = (400, 200, 400), steps: int = 150,
                        rules: Sequence[str] = RULES, baselines: Sequence[RuleCurve] | None = None) -> dict:
    """The planted attempt world for one seed: train on ``sizes[0]`` problems, keep-best on
    ``sizes[1]``, score on ``sizes[2]`` (three tables drawn from the seed). ``recovered``: the share
    of the oracle's margin over the strongest fixed rule, both at the policy's mean decodes;
    ``rule_shares``: each fixed rule's (and the policy's) share of the oracle's margin over the
    stopped greedy alone, at the same compute."""
    train, _ = planted_attempt_table(sizes[0], seed=3 * seed + 1000)
    validation, _ = planted_attempt_table(sizes[1], seed=3 * seed + 1001)
    test, types = planted_attempt_table(sizes[2], seed=3 * seed + 1002)
    baselines = list(baselines) if baselines is not None else rule_baselines(validation, test, rules)
    config = AttemptTrainConfig(features=tuple(features), price=price, steps=steps, seed=seed, val_every=25)
    scored = train_and_score(train, validation, test, config, baselines)
    oracle, _ = rule_at(planted_oracle(test, types), scored.decodes)
    greedy = float(test.correct[:, test.arm("greedy"), 0].mean())
    margin = oracle - scored.rule_accuracy
    shares = {c.name: (rule_at(c, scored.decodes)[0] - greedy) / max(oracle - greedy, 1e-9) for c in baselines}
    shares["policy"] = (scored.accuracy - greedy) / max(oracle - greedy, 1e-9)
    return {"seed": seed, "price": price, "features": list(features), "accuracy": scored.accuracy,
            "decodes": scored.decodes, "oracle": oracle, "strongest_rule": scored.rule,
            "rule_accuracy": scored.rule_accuracy, "greedy": greedy,
            "recovered": (scored.accuracy - scored.rule_accuracy) / margin if margin > 1e-9 else float("nan"),
            "difference": list(scored.difference), "rule_shares": shares}


# ---- the live decode ------------------------------------------------------------------------------------


@dataclass
class AttemptDecodeResult:
    """``attempt_decode``'s outcome per problem."""

    answers: list[str]
    """The chosen answer string ("" when no attempt held one)."""
    texts: list[list[str]]
    """Every attempt's text, in order."""
    paths: list[list[int]]
    """The arm of each attempt, in order (the first: the greedy arm)."""
    tokens: list[int]
    """Generated tokens over every attempt."""
    stopped_by: list[str]
    """'policy' (it chose to stop) or 'budget' (no attempt or arm was left)."""

    @property
    def decodes(self) -> list[int]:
        return [len(p) for p in self.paths]


def attempt_decode(lm, task, problems, policy, actions: Sequence[DecodingAction], *, token_budget: int,
                   seed: int = 0, stop_at_answer: bool = STOP_AT_ANSWER,
                   confidence=None) -> AttemptDecodeResult:
    """Use the attempt policy on live problems: the stopped greedy first, then, round by round, one
    more attempt of the arm the policy picks for each problem still going, until every problem has
    stopped (``decoding.attempts.sequential_attempts`` with the policy as its decider). ``actions``:
    the arms in the policy's order. Each attempt is decoded with the seed the sample table gives the
    same (problem, arm, sample) (``row_seed(seed, problem id, action name, j, "draft-table")``), so on
    the problems of a table built with the same settings it makes the attempts ``walk`` reads there."""
    cfg = policy.config
    actions = list(actions)
    if [a.name for a in actions] != list(cfg.arms):
        raise ValueError(f"the policy's arms are {list(cfg.arms)}, got {[a.name for a in actions]}")
    prompts, _ = encode_problems(lm, task, problems, seed=seed)
    names = [a.name for a in actions]
    stops = answer_stops(task, problems, list(range(len(problems))), stop_at_answer)
    result = sequential_attempts(
        lm, prompts, actions, PolicyDecider(policy), first_arm=cfg.first_arm, distinct=cfg.distinct,
        max_attempts=cfg.max_attempts, token_budgets=[token_budget] * len(problems),
        seeds=lambda i, arm, j: row_seed(seed, problems[i].id, names[arm], j, "draft-table"),
        extract=lambda i, text: task.extract_answer(problems[i], text), stop_checks=stops,
        confidence=confidence or ConfidenceConfig(), with_hidden=cfg.hidden_size > 0)
    return AttemptDecodeResult(result.answers, result.texts, result.paths, result.tokens, result.stopped_by)
