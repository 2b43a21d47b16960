"""Several decoders for the attempt policy, and what choosing among them is worth.

- ``decoder_arms``: the sampled arms of a sample table from an action set, in its order (a
  ``select-actions`` ``actions.json`` lists the coverage selection's picks in the order coverage
  chose them, so its first ``n`` sampled actions are the best ``n``-set by coverage); greedy is
  dropped (every table has it first).
- ``restrict_arms``: the same table with some arms only (the samples are the same: a policy
  restricted to one sampled arm reads exactly the attempts the full policy could read of it).
- ``decoder_ablation``: the policy that chooses each attempt's arm against the same policy
  restricted to its best single sampled arm, at matched compute, per training seed. Per seed, one
  restricted policy is trained per (sampled arm, price) on the same training table with the same
  settings; the best arm is the one whose restricted policies score highest on validation (their
  mean of ``correct - price * decodes`` over the prices, the quantity keep-best maximises); its
  policies over the prices form a curve, read at each full policy's mean decodes as the rules'
  curves are (``attempt.rule_at``: per problem, the same mixture of its two neighbouring points'
  correctness, so the paired 95% interval over problems stays paired).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.stats import paired_ci
from ..decoding.actions import GREEDY, DecodingAction, load_action_set
from ..policies.fixed_rules import vote
from ..training.attempt import AttemptTrainConfig
from .attempt import RuleCurve, Scored, drawn_table, rule_at, rule_compute, train_and_score
from .sample_table import CONFIDENCE_FEATURES, SampleTable

__all__ = ["decoder_arms", "table_arms", "restrict_arms", "SingleArmRuns", "single_arm_dir", "single_arm_runs",
           "decoder_ablation", "PLANTED_ARMS", "planted_decoder_table", "vote_with_arm", "choice_headroom",
           "format_decoder_ablation", "DECODER_ABLATION"]

DECODER_ABLATION = "decoder choice"
"""The name of the decoder-choice ablation's record."""


def decoder_arms(spec: str | Path, count: int | None = None) -> list[DecodingAction]:
    """The first ``count`` sampled actions of the action set ``spec`` (a preset name or an action
    JSON file, as ``decoding.actions.load_action_set`` reads), in its order, greedy dropped (None:
    all of them)."""
    sampled = [a for a in load_action_set(spec) if not a.is_greedy]
    if count is not None and not 1 <= count <= len(sampled):
        raise ValueError(f"{spec} holds {len(sampled)} sampled actions; asked for {count}")
    return sampled[:count] if count is not None else sampled


def table_arms(temperatures: Sequence[float], decoders: str | Path | None = None,
               count: int | None = None) -> list[DecodingAction]:
    """A table's arms: greedy, then the sampled ones (``decoders``' first ``count``, else one per
    temperature in ``temperatures``)."""
    if decoders is not None:
        return [GREEDY] + decoder_arms(decoders, count)
    return [GREEDY] + [DecodingAction(temperature=t) for t in temperatures]


def restrict_arms(table: SampleTable, arms: Sequence[str | int]) -> SampleTable:
    """``table`` with the arms ``arms`` only, in that order (answer ids and strings unchanged)."""
    index = [table.arm(a) for a in arms]
    header = {**table.header, "actions": [table.header["actions"][i] for i in index]}
    hidden = None if table.hidden is None else table.hidden[:, index]
    return SampleTable(header, list(table.problem_ids), table.answers[:, index], table.answer_strings,
                       table.rewards[:, index], table.tokens[:, index], table.confidence[:, index], hidden,
                       table.confidence_names)


def _first_arm(table: SampleTable) -> int:
    greedy = [i for i, a in enumerate(table.actions) if a.is_greedy]
    return greedy[0] if greedy else 0


def _validation_score(runs: Sequence[Scored]) -> float:
    return float(np.mean([s.val_accuracy - s.price * s.val_decodes for s in runs]))


def _curve(name: str, runs: Sequence[Scored]) -> RuleCurve:
    runs = sorted(runs, key=lambda s: s.decodes)
    return RuleCurve(name, np.array([s.decodes for s in runs]), np.array([s.accuracy for s in runs]),
                     np.array([s.outcome.correct.astype(np.float64) for s in runs]),
                     [{"price": s.price} for s in runs])


@dataclass
class SingleArmRuns:
    """One training seed's policies restricted to one sampled arm each."""

    best: str
    """The arm whose restricted policies score highest on validation."""
    scores: dict[str, float]
    """Each arm's validation score: the mean over prices of ``correct - price * decodes``."""
    by_arm: dict[str, list[Scored]]
    """Each arm's restricted policies, one per full policy of the seed, in their order."""


def single_arm_dir(out_dir: str | Path, arm_index: int, price: float, seed: int) -> Path:
    """Where :func:`single_arm_runs` keeps the policy restricted to the table's arm ``arm_index``."""
    return Path(out_dir) / f"arm-{arm_index}-price-{price:g}-seed-{seed}"


def single_arm_runs(train: SampleTable, validation: SampleTable, test: SampleTable, config: AttemptTrainConfig,
                    full: Sequence[Scored], baselines: Sequence[RuleCurve],
                    out_dir: str | Path | None = None) -> dict[int, SingleArmRuns]:
    """Per training seed of ``full``, the policy restricted to each sampled arm at each of the seed's
    prices (trained on ``train`` restricted to greedy and that arm, keep-best on ``validation``,
    scored on ``test``), and the best arm on validation (module docstring). With ``out_dir`` each
    policy is kept there (:func:`single_arm_dir`; a killed run continues from its checkpoint)."""
    first = _first_arm(train)
    sampled = [name for i, name in enumerate(train.arm_names) if i != first]
    if len(sampled) < 2:
        raise ValueError(f"the decoder-choice ablation needs two or more sampled arms; the table has {sampled}")
    tables = {arm: [restrict_arms(t, [first, train.arm_names.index(arm)]) for t in (train, validation, test)]
              for arm in sampled}
    out = {}
    for seed in sorted({s.seed for s in full}):
        prices = [s.price for s in full if s.seed == seed]
        by_arm = {arm: [_restricted(tables[arm], replace(config, price=price, seed=seed), baselines,
                                    None if out_dir is None else
                                    single_arm_dir(out_dir, train.arm_names.index(arm), price, seed))
                        for price in prices] for arm in sampled}
        scores = {arm: _validation_score(runs) for arm, runs in by_arm.items()}
        out[seed] = SingleArmRuns(max(sampled, key=lambda arm: scores[arm]), scores, by_arm)  # ties: the first arm
    return out


def _restricted(tables: Sequence[SampleTable], config: AttemptTrainConfig, baselines: Sequence[RuleCurve],
                where: Path | None) -> Scored:
    resume = where is not None and (where / "train_log.jsonl").is_file()
    return train_and_score(*tables, config, baselines, where, resume=resume)


def decoder_ablation(train: SampleTable, validation: SampleTable, test: SampleTable, config: AttemptTrainConfig,
                     full: Sequence[Scored], baselines: Sequence[RuleCurve],
                     runs: dict[int, SingleArmRuns] | None = None) -> dict:
    """The full policies ``full`` (trained on ``train`` with ``config`` at each price and seed, scored
    on ``test``) against the same policy restricted to its best single sampled arm (module
    docstring; ``runs``: :func:`single_arm_runs`' output when already trained). Returns the
    ablation's record: one row per full policy (its seed and price, the best arm, each arm's
    validation score, both accuracies at the full policy's mean decodes, the paired difference), in
    the order of ``full``, and the restricted policies' own records."""
    runs = runs if runs is not None else single_arm_runs(train, validation, test, config, full, baselines)
    rows, single = {}, []
    for seed, run in runs.items():
        curve = _curve(f"restricted to {run.best}", run.by_arm[run.best])
        single += [{**s.record(), "arm": arm} for arm, scored in run.by_arm.items() for s in scored]
        for i, s in ((i, s) for i, s in enumerate(full) if s.seed == seed):
            accuracy, row = rule_at(curve, s.decodes)
            diff = paired_ci(s.outcome.correct.astype(np.float64).tolist(), row.tolist())
            read_at = rule_compute(curve, s.decodes)
            rows[i] = {"seed": seed, "price": s.price, "best_arm": run.best, "arm_validation_score": run.scores,
                       "policy": {"accuracy": s.accuracy, "decodes": s.decodes, "tokens": s.tokens,
                                  "parts": list(s.parts)},
                       "single_arm": {"accuracy": accuracy, "decodes": read_at, "parts": ["verifier", "stop"]},
                       "matched_compute": abs(read_at - s.decodes) <= 1e-9, "difference": list(diff)}
    return {"name": DECODER_ABLATION, "parts": ["verifier", "stop", "decoder"], "against": ["verifier", "stop"],
            "arms": list(next(iter(runs.values())).by_arm), "problems": int(test.shape[0]),
            "rows": [rows[i] for i in range(len(full))], "single_arm_policies": single}


def format_decoder_ablation(record: dict) -> str:
    """One line per full policy of :func:`decoder_ablation`'s record: its accuracy against the
    single-arm policy's at its compute, and the paired difference in points."""
    lines = []
    for row in record["rows"]:
        d, lo, hi = (100 * x for x in row["difference"])
        mine, single = row["policy"], row["single_arm"]
        where = "" if row["matched_compute"] else f" (its curve read at {single['decodes']:.2f} decodes)"
        lines.append(f"price {row['price']:<6g} seed {row['seed']}: choosing the decoder "
                     f"{100 * mine['accuracy']:5.1f}% at {mine['decodes']:.2f} decodes; "
                     f"restricted to {row['best_arm']} (best on validation) "
                     f"{100 * single['accuracy']:5.1f}%{where}; difference {d:+.1f} [{lo:+.1f}, {hi:+.1f}]")
    return "\n".join(lines)


# ---- a planted world where the choice of decoder pays, and the head-room of a table -------------------

PLANTED_ARMS = (DecodingAction(temperature=0.3), DecodingAction(temperature=0.7), DecodingAction(temperature=1.0))
"""The planted world's sampled arms (names only: the table is drawn, not decoded)."""


def planted_decoder_table(problems: int, seed: int = 0, samples: int = 4, hidden_size: int = 8,
                          right_own: float = 0.6, right_other: float = 0.15, greedy_right: float = 0.3,
                          hidden_shift: float = 1.5, wrong_answers: int = 4) -> tuple[SampleTable, np.ndarray]:
    """A sample table (greedy, then ``samples`` of each of :data:`PLANTED_ARMS`) of problems of three
    planted types, and the types ``[P]``: on a problem of type t a sample of arm t is right with
    ``right_own``, of another arm with ``right_other``; greedy is right with ``greedy_right`` (else
    a uniform wrong answer, as every wrong sample). Every attempt's hidden state is standard normal
    plus ``hidden_shift`` along its problem type's own fixed random direction (the problem's type is
    readable from greedy's hidden state); the confidence columns are noise. Every arm is as good as
    another on average: only a policy that reads the type and draws its arm gains."""
    gen = np.random.default_rng(seed)
    directions = np.random.default_rng(54321).normal(size=(len(PLANTED_ARMS), hidden_size))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    types = gen.integers(0, len(PLANTED_ARMS), size=problems)
    arms = 1 + len(PLANTED_ARMS)
    shape = (problems, arms, samples)
    right = np.zeros(shape, bool)
    right[:, 0, :] = (gen.random(problems) < greedy_right)[:, None]
    own = (np.arange(1, arms)[None, :] == types[:, None] + 1)  # [P, arms - 1]
    chance = np.where(own, right_own, right_other)[:, :, None]
    right[:, 1:, :] = gen.random((problems, arms - 1, samples)) < chance
    answers = np.where(right, 0, gen.integers(1, wrong_answers + 1, size=shape))
    confidence = gen.normal(size=shape + (len(CONFIDENCE_FEATURES),))
    hidden = gen.normal(size=shape + (hidden_size,)) + hidden_shift * directions[types][:, None, None, :]
    tokens = gen.integers(8, 40, size=shape)
    table = drawn_table("planted-decoders", seed, (GREEDY, *PLANTED_ARMS), answers, right, confidence, hidden,
                        tokens, wrong_answers + 1)
    return table, types


def vote_with_arm(table: SampleTable, arm_of_problem: np.ndarray, samples: Sequence[int]) -> np.ndarray:
    """``[P]`` bool: the majority answer of the stopped greedy and the samples ``samples`` (their
    indices) of each problem's arm ``arm_of_problem[p]`` is right (ties: the answer drawn first)."""
    rows = np.arange(table.shape[0])
    drawn = np.concatenate([table.answers[:, 0, :1],  # [P, 1 + len(samples)]: greedy, then the arm's samples
                            table.answers[rows[:, None], np.asarray(arm_of_problem)[:, None], list(samples)]], axis=1)
    leader = vote(drawn)  # -1: no attempt stated an answer
    right = table.answer_correct()  # [P, K]: answer id k of problem p is right
    return (leader >= 0) & right[rows, leader.clip(min=0)]


def choice_headroom(validation: SampleTable, test: SampleTable, extra: Sequence[int],
                    types: np.ndarray | None = None) -> list[dict]:
    """What choosing each problem's arm could add over the best single arm, at 1 + ``k`` decodes for
    each ``k`` of ``extra`` (the stopped greedy and the first ``k`` samples of one arm, majority
    vote): the best single arm is the one whose vote is right most often on ``validation``; the
    oracle draws each test problem's own arm, ``types`` (a planted world's) or, without them, the
    arm whose *other* samples (indices ``k`` on) are right most often on that problem (cross-fitted:
    the arm is chosen on samples the vote does not read). Returns per ``k``: decodes, the best
    single arm's and the oracle's accuracy, and the paired difference."""
    first = _first_arm(test)
    sampled = [i for i in range(len(test.arm_names)) if i != first]
    right = test.correct  # [P, A, N]: each sample is right
    rows = []
    for k in extra:
        reads = list(range(k))
        val_acc = {a: vote_with_arm(validation, np.full(validation.shape[0], a), reads).mean() for a in sampled}
        best = max(sampled, key=lambda a: val_acc[a])  # ties: the first arm
        single = vote_with_arm(test, np.full(test.shape[0], best), reads)
        if types is not None:
            oracle_arm = np.asarray([sampled[int(t)] for t in types])
        else:
            held = right[:, sampled, k:].mean(-1)  # [P, sampled]: share right among the samples not read
            oracle_arm = np.asarray(sampled)[held.argmax(1)]
        oracle = vote_with_arm(test, oracle_arm, reads)
        rows.append({"decodes": 1 + k, "best_single_arm": test.arm_names[best], "single": float(single.mean()),
                     "oracle": float(oracle.mean()),
                     "difference": list(paired_ci(oracle.astype(float).tolist(), single.astype(float).tolist()))})
    return rows
