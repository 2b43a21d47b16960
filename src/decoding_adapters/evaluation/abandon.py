"""The attempt policy with an abandon rule: replayed from a table with checkpoints, and live.

- ``replay``: the rule cuts the table's samples (``AbandonRule.apply``), the policy walks the cut
  table (``policies.attempt.walk``): its decisions, answers and tokens (a cut attempt counts the
  tokens it made before its checkpoint).
- ``abandon_decode``: the same on live problems (``decoding.attempts.sequential_attempts`` with the
  policy as decider and the rule as abandoner), each attempt seeded as the table seeds the same
  (problem, arm, sample), so on a table's problems it makes the replay's attempts, cuts included
  (``tests/evaluation/test_abandon_decode.py``).
- ``fit_for_policy``: the rule an attempt adapter carries (``attach-abandon``): the prefix verifier
  fitted on a training table's checkpoints, its thresholds tuned on a validation table for the
  fewest tokens at the policy's own accuracy (``training.abandon``), after checking that the tables
  hold the attempts the policy makes live (its arms, budget and stop).
"""

from __future__ import annotations

from typing import Sequence

from ..decoding.actions import DecodingAction
from ..decoding.attempts import AttemptsResult, sequential_attempts
from ..decoding.loop import row_seed
from ..decoding.protocol import STOP_AT_ANSWER, stored_stop
from ..decoding.rollouts import answer_stops, encode_problems
from ..policies.abandon import AbandonRule
from ..policies.attempt import AttemptInputs, AttemptLattice, AttemptOutcome, PolicyDecider, walk
from ..training.abandon import TOLERANCE, Tuned, train_prefix_verifier, tune_thresholds
from ..training.verifier import VerifierTrainConfig
from .sample_table import ConfidenceConfig, SampleTable

__all__ = ["replay", "abandon_decode", "fit_for_policy"]


def replay(policy, table: SampleTable, rule: AbandonRule | None = None) -> tuple[AttemptOutcome, SampleTable]:
    """The policy on ``table`` with ``rule`` cutting its samples (None: none cut): the outcome and the
    table as it read it."""
    seen = table if rule is None else rule.apply(table)
    return walk(policy, AttemptInputs.from_table(seen), AttemptLattice.of(policy.config)), seen


def abandon_decode(lm, task, problems, policy, actions: Sequence[DecodingAction], rule: AbandonRule | None, *,
                   token_budget: int, seed: int = 0, stop_at_answer: bool = STOP_AT_ANSWER,
                   confidence: ConfidenceConfig | None = None) -> AttemptsResult:
    """The attempt policy on live problems with ``rule`` cutting attempts at its checkpoints (module
    docstring): every attempt, the decisions, and where any attempt was cut (``cut_at``)."""
    cfg = policy.config
    names = [a.name for a in actions]
    if names != list(cfg.arms):
        raise ValueError(f"the policy's arms are {list(cfg.arms)}, got {names}")
    prompts, _ = encode_problems(lm, task, problems, seed=seed)
    return sequential_attempts(
        lm, prompts, list(actions), PolicyDecider(policy), first_arm=cfg.first_arm, distinct=cfg.distinct,
        max_attempts=cfg.max_attempts, token_budgets=[token_budget] * len(problems),
        seeds=lambda i, arm, j: row_seed(seed, problems[i].id, names[arm], j, "draft-table"),
        extract=lambda i, text: task.extract_answer(problems[i], text),
        stop_checks=answer_stops(task, problems, list(range(len(problems))), stop_at_answer),
        confidence=confidence or ConfidenceConfig(), with_hidden=cfg.hidden_size > 0, abandon=rule)


def fit_for_policy(policy, train: SampleTable, validation: SampleTable, *, stop_at_answer: bool,
                   config: VerifierTrainConfig | None = None, tolerance: float = TOLERANCE) -> Tuned:
    """The abandon rule for ``policy`` (module docstring): fitted on ``train``, thresholds tuned on
    ``validation`` for the fewest tokens per problem at the policy's accuracy without cutting, less
    ``tolerance``. Refused (ValueError) where a table holds no checkpoints, or attempts the policy
    does not make live: other arms, another token budget, another stop (``stop_at_answer``, the
    adapter's)."""
    cfg = policy.config
    for name, table in (("training", train), ("validation", validation)):
        if not table.checkpoint_every:
            raise ValueError(f"the {name} table stores no checkpoints: build it with checkpoints (--checkpoints M)")
        if list(table.arm_names) != list(cfg.arms):
            raise ValueError(f"the {name} table's arms are {list(table.arm_names)}, the policy's {list(cfg.arms)}")
        budget = int(table.header["token_budget"])
        if budget != cfg.token_budget:
            raise ValueError(f"the {name} table was decoded at a token budget of {budget}, the policy's is "
                             f"{cfg.token_budget}")
        if stored_stop(table.header) != stop_at_answer:
            raise ValueError(f"the {name} table's attempts {'end' if stored_stop(table.header) else 'do not end'} at "
                             f"their first answer, the adapter's {'do' if stop_at_answer else 'do not'}")
    if train.checkpoint_every != validation.checkpoint_every:
        raise ValueError(f"the tables' checkpoints differ: every {train.checkpoint_every} and "
                         f"{validation.checkpoint_every} tokens")
    rule = train_prefix_verifier(train, config)

    def evaluate(table: SampleTable) -> tuple[float, float]:
        outcome, _ = replay(policy, table)
        return float(outcome.correct.mean()), float(outcome.tokens.mean())

    return tune_thresholds(rule, validation, evaluate, tolerance=tolerance)
