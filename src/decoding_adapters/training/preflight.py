"""The pre-flight check every trainer runs before step 1: decode a few training problems with the
start policy's prior action (greedy), score them, and refuse (or, forced, only warn) when nothing
is solved, since every reward would then be 0 and the policy would learn nothing."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ..decoding.actions import GREEDY, ActionSet
from ..decoding.loop import decode
from ..decoding.rollouts import encode_problems

log = logging.getLogger(__name__)

__all__ = ["PREFLIGHT_PROBLEMS", "NothingSolvedError", "Preflight", "preflight_check", "greedy_preflight_rows"]

PREFLIGHT_PROBLEMS = 8
"""Training problems the pre-flight check decodes greedily (the start policy's prior action)."""


class NothingSolvedError(ValueError):
    """The pre-flight check found no solved row: training would learn from rewards that are all 0."""


@dataclass(frozen=True)
class Preflight:
    """What the pre-flight check saw before step 1: the share of rows solved and cut by the budget."""

    rows: int
    """Rows scored (decoded problems, or a table's drafts and re-decodes)."""
    solved: float
    """Share of rows with reward >= 0.5."""
    truncated: float
    """Share of rows the token budget cut (no EOS, no complete answer)."""
    source: str
    """What was scored, for the message (e.g. "greedy on the first 8 training problems")."""

    def record(self) -> dict:
        return {"preflight": {"rows": self.rows, "solved": round(self.solved, 4),
                              "truncated": round(self.truncated, 4), "source": self.source}}


def preflight_check(rewards: Sequence[float], truncated: Sequence[bool], source: str, *, force: bool,
                    token_budget: int | None = None) -> Preflight | None:
    """The one pre-flight check every trainer runs before step 1: logs the share solved and the
    share truncated; when nothing is solved it raises :class:`NothingSolvedError` (every reward
    would be 0: the policy learns nothing, and the adapter written says nothing of it), or only
    warns with ``force``. None when there is nothing to check (no rows)."""
    if not rewards:
        return None
    solved = sum(float(r) >= 0.5 for r in rewards) / len(rewards)
    cut = sum(bool(t) for t in truncated) / max(len(truncated), 1)
    result = Preflight(len(rewards), solved, cut, source)
    log.info("pre-flight: %s: %.0f%% solved, %.0f%% cut by the token budget (%d rows)", source, 100 * solved,
             100 * cut, len(rewards))
    if solved > 0:
        return result
    budget = f" of {token_budget} tokens" if token_budget else ""
    why = (f"{cut:.0%} of the rows were cut by the token budget{budget}: raise --token-budget, or ask for a short "
           "answer (--instruction)" if cut >= 0.5 else
           "the rows end before the budget, so the verifier does not read their answers: check --verifier, "
           "--answer-field and the instruction (--instruction), or use a stronger model")
    message = f"pre-flight: nothing was solved ({source}, {len(rewards)} rows): {why}"
    if not force:
        raise NothingSolvedError(f"{message}; pass --force to train anyway")
    log.warning("%s; training anyway (--force)", message)
    return result


def greedy_preflight_rows(lm, task, problems: Sequence, token_budget: int, seed: int) -> tuple[list, list]:
    """Rewards and budget cuts of greedy (the usual start policy's prior action) on ``problems``."""
    prompts, _ = encode_problems(lm, task, problems, seed=seed)
    result = decode(lm, prompts, ActionSet([GREEDY], device=lm.device), row_actions=0, token_budget=token_budget)
    ended = result.stopped_at_eos
    if result.stopped_by_check is not None:
        ended = ended | result.stopped_by_check
    return task.reward_batch(problems, result.texts), (~ended).tolist()
