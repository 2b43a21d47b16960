"""How much a token budget cuts off: mean generation length and the fraction of rows stopped by the
budget instead of EOS, for greedy decoding on a split (the token adapters are trained and evaluated
at a budget where greedy is not truncated, chosen on validation, never test).

Greedy decoding is deterministic and a row's first ``b`` tokens do not depend on the budget, so one
decode at the largest candidate budget gives the statistics of every smaller budget: at budget
``b`` a row is *truncated* when it has not produced EOS within its first ``b`` tokens, and its
length is ``min(length, b)``. ``greedy_truncation`` also scores each row's first ``b`` tokens, so a
budget that cuts rows can be told from one that cuts answers (a truncated row may well have given
its answer before the talk that the budget stops).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Sequence

from ..decoding.actions import GREEDY, ActionSet
from ..decoding.loop import DecodeResult, row_seed
from ..decoding.rollouts import HFRollouts, RolloutRequest, Rollouts, answer_stops, encode_problems

__all__ = ["TruncationStats", "truncation_stats", "truncation_table", "greedy_truncation", "choose_token_budget"]


@dataclass(frozen=True)
class TruncationStats:
    """Greedy generation lengths at one token budget."""

    token_budget: int
    """The budget b these figures hold for."""
    rows: int
    """Rows decoded (one per problem for greedy)."""
    mean_length: float
    """Mean generated tokens, EOS included, each row capped at b."""
    truncated_fraction: float
    """Fraction of rows without EOS within their first b tokens (stopped by the budget)."""
    max_length: int
    """Longest capped row."""
    greedy_reward: float | None = None
    """Mean task reward of the rows cut at b (greedy accuracy at this budget); None if not scored."""

    def to_dict(self) -> dict:
        return asdict(self)


def truncation_stats(result: DecodeResult, token_budget: int) -> TruncationStats:
    """The figures at budget ``token_budget`` (<= the budget ``result`` was decoded with) of a decode."""
    decoded_at = int(result.token_budgets.max()) if result.token_budgets.numel() else 0
    if not 1 <= token_budget <= max(decoded_at, 1):
        raise ValueError(f"token_budget must be in [1, {decoded_at}] (the budget decoded with), got {token_budget}")
    if len(result.lengths) == 0:
        raise ValueError("no rows to measure")
    ended = result.stopped_at_eos  # [N] ended on its own: at EOS, or at its first complete answer
    if result.stopped_by_check is not None:
        ended = ended | result.stopped_by_check
    ended = ended & (result.lengths <= token_budget)  # ... within the first b tokens
    capped = result.lengths.clamp(max=token_budget)
    return TruncationStats(
        token_budget=token_budget,
        rows=len(capped),
        mean_length=float(capped.float().mean()),
        truncated_fraction=float((~ended).float().mean()),
        max_length=int(capped.max()),
    )


def truncation_table(result: DecodeResult, budgets: Sequence[int]) -> list[TruncationStats]:
    """``truncation_stats`` at each of ``budgets`` (sorted ascending)."""
    return [truncation_stats(result, b) for b in sorted(set(budgets))]


def greedy_truncation(
    lm, task, problems, budgets: Sequence[int], *, rollouts: Rollouts | None = None, batch_rows: int = 128,
    stop_at_answer: bool,
) -> list[TruncationStats]:
    """Decode ``problems`` greedily once at ``max(budgets)`` and return the figures at every budget,
    each with the task reward of the rows cut at that budget. With ``stop_at_answer`` (the
    protocol's: the caller passes its own) a row ends at its first complete answer, which is not a
    cut by the budget."""
    if not problems:
        raise ValueError("no problems to measure truncation on")
    if not budgets or min(budgets) < 1:
        raise ValueError(f"budgets must be positive integers, got {list(budgets)}")
    rollouts = rollouts or HFRollouts(lm, ActionSet([GREEDY]), batch_rows)
    greedy = next((i for i, a in enumerate(rollouts.action_set.actions) if a.is_greedy), None)
    if greedy is None:
        raise ValueError("the rollout engine's action set has no greedy action")
    prompts, _ = encode_problems(lm, task, problems)
    request = RolloutRequest(
        prompts=prompts,
        prompt_of_row=list(range(len(problems))),
        row_seeds=[row_seed("truncation", p.id) for p in problems],
        token_budget=max(budgets),
        row_actions=[greedy] * len(problems),
        stop_checks=answer_stops(task, problems, range(len(problems)), stop_at_answer),
    )
    result = rollouts.run(request)
    table = []
    for stats in truncation_table(result, budgets):
        cut = [result.tokens[i, : min(int(n), stats.token_budget)].tolist() for i, n in enumerate(result.lengths)]
        texts = lm.tokenizer.batch_decode(cut, skip_special_tokens=True)
        rewards = task.reward_batch(problems, texts)
        table.append(replace(stats, greedy_reward=sum(rewards) / len(rewards)))
    return table


def choose_token_budget(stats: Sequence[TruncationStats], max_truncated: float = 0.02) -> int:
    """The smallest budget whose greedy truncated fraction is <= ``max_truncated`` (the largest
    measured budget when none is)."""
    if not stats:
        raise ValueError("no truncation figures to choose from")
    if not 0.0 <= max_truncated <= 1.0:
        raise ValueError(f"max_truncated must be in [0, 1], got {max_truncated}")
    ordered = sorted(stats, key=lambda s: s.token_budget)
    fitting = [s.token_budget for s in ordered if s.truncated_fraction <= max_truncated]
    return fitting[0] if fitting else ordered[-1].token_budget

