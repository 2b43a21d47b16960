"""Sequential attempts: the decode path shared by every method that decides after each attempt.

Per problem, attempt 1 is decoded with the first arm (the stopped greedy); after each round a
*decider* (``AttemptDecider``) looks at what every problem's attempts so far show and says, per
problem still going, stop (and why) or the arm of one more attempt; the next round decodes one more
attempt for each problem that goes on, in one batched ``decode`` call. At the stop the decider
names the answer (an answer id of ``AttemptState``). The learned attempt policy
(``policies.kind_attempt``) and the fixed rules (``policies.kind_rule``) are deciders; so are the
rules scored from a stored table, whose decision after draw s reads only draws <= s, which is what
lets them run here round by round.

An arm is not drawn past its ``distinct`` count (a greedy arm once) and no problem makes more than
``max_attempts`` attempts: where no arm is left the problem stops with reason ``"budget"`` without
asking the decider.

Seeds: attempt j of arm a of problem i decodes with ``seeds(i, a, j)`` (the caller's key: the
sample table's ``row_seed(seed, problem id, action name, j, "draft-table")`` makes the attempts a
table built with the same settings holds, the generator's its own per-call key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Protocol, Sequence

import torch

from .actions import ActionSet, DecodingAction
from .confidence import CONFIDENCE_FEATURES, ConfidenceConfig, answer_ids, trace_readings
from .loop import StepTokens, StopCheck, decode

__all__ = ["AttemptState", "AttemptDecider", "AttemptsResult", "STOP_REASONS", "Gone", "sequential_attempts"]

STOP_REASONS = ("policy", "agreement", "confident", "budget", "rule", "cancelled")
"""Why a problem stopped: the learned policy chose to; its answers agreed; its confidence was high
enough; no attempt or arm was left; a fixed rule's stop that is none of these; the caller's ``gone``
said nobody wants it any more (a served request whose client left)."""


@dataclass
class AttemptState:
    """What the attempts so far show, ``P`` problems, ``A`` arms, ``N`` = the most distinct attempts
    of an arm; slots not drawn yet hold answer -1 and zeros."""

    answers: torch.Tensor
    """``[P, A, N]`` long: answer id (in order of first appearance over the problem's attempts; -1: none)."""
    confidence: torch.Tensor
    """``[P, A, N, C]`` float: each attempt's confidence summary (``decoding.confidence``)."""
    tokens: torch.Tensor
    """``[P, A, N]`` float: generated tokens."""
    hidden: torch.Tensor | None
    """``[P, A, N, H]`` float mean hidden state, or None (not read)."""
    order: list[list[tuple[int, int]]]
    """Per problem, ``(arm, j)`` of each attempt in the order made."""
    strings: list[list[str]]
    """Per problem, the answer string of each answer id."""
    confidence_names: tuple[str, ...]

    def counts(self, i: int, arms: int) -> list[int]:
        """Attempts of each arm made for problem ``i``."""
        seen = [0] * arms
        for arm, _ in self.order[i]:
            seen[arm] += 1
        return seen

    def sequence(self, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The attempts of ``rows`` in the order made, padded to the longest: answers ``[R, S]``
        (-1 past the end), tokens ``[R, S]``, confidence ``[R, S, C]`` and each row's length ``[R]``."""
        s = max(1, max(len(self.order[i]) for i in rows))
        c = self.confidence.shape[-1]
        answers = torch.full((len(rows), s), -1, dtype=torch.long)
        tokens = torch.zeros(len(rows), s)
        conf = torch.zeros(len(rows), s, c)
        for r, i in enumerate(rows):
            for t, (arm, j) in enumerate(self.order[i]):
                answers[r, t] = self.answers[i, arm, j]
                tokens[r, t] = self.tokens[i, arm, j]
                conf[r, t] = self.confidence[i, arm, j]
        return answers, tokens, conf, torch.tensor([len(self.order[i]) for i in rows])


class AttemptDecider(Protocol):
    """What decides, after each round, for the problems still going."""

    def decide(self, state: AttemptState, rows: list[int]) -> list[tuple[int | None, str]]:
        """Per row of ``rows``: ``(None, reason)`` to stop (``STOP_REASONS``) or ``(arm, "")`` for
        one more attempt with that arm."""
        ...

    def answer(self, state: AttemptState, rows: list[int]) -> list[int]:
        """Per row of ``rows`` (stopped): the answer id it gives (-1: none)."""
        ...


Gone = Callable[[Sequence[int]], Collection[int]]
"""Given the problems still going, those nobody wants any more (e.g. a served request whose client
left): they stop at once, mid-attempt included."""


@dataclass
class AttemptsResult:
    """Per problem, every attempt and the decision."""

    texts: list[list[str]]
    """Every attempt's text, in order."""
    token_ids: list[list[list[int]]]
    """Every attempt's generated token ids (EOS included), in order."""
    ended: list[list[bool]]
    """Per attempt: it ended on its own (EOS or its first complete answer), not at the budget."""
    paths: list[list[int]]
    """The arm of each attempt, in order (the first: the first arm)."""
    said: list[list[str]]
    """Each attempt's extracted answer ("" for none)."""
    answers: list[str]
    """The answer given ("" when no attempt held one)."""
    chosen: list[int]
    """Index of the first attempt holding the answer given (-1: none)."""
    stopped_by: list[str]
    """Why each problem stopped (``STOP_REASONS``)."""
    state: AttemptState = field(repr=False)

    @property
    def decodes(self) -> list[int]:
        return [len(p) for p in self.paths]

    @property
    def tokens(self) -> list[int]:
        return [sum(len(t) for t in ids) for ids in self.token_ids]


def sequential_attempts(lm, prompts: Sequence[Sequence[int]], actions: Sequence[DecodingAction],
                        decider: AttemptDecider, *, first_arm: int, distinct: Sequence[int], max_attempts: int,
                        token_budgets: Sequence[int], seeds: Callable[[int, int, int], int],
                        extract: Callable[[int, str], str], stop_checks: Sequence[StopCheck | None] | None = None,
                        confidence: ConfidenceConfig | None = None, with_hidden: bool = False,
                        gone: Gone | None = None) -> AttemptsResult:
    """Decode rounds of attempts for every prompt until the decider stops each (module docstring).

    ``extract(i, text)``: prompt i's answer in an attempt's text ("" for none); ``stop_checks``: per
    prompt, the check that ends a row at its first complete answer (None: decode to EOS or budget).
    ``gone``: asked before each round and after every decode step; a problem it names stops there
    (reason ``"cancelled"``, its attempt cut where it was, or none made), the others go on as if it
    had never been there (each row keeps its own seed)."""
    confidence = confidence or ConfidenceConfig()
    actions = list(actions)
    a, p = len(actions), len(prompts)
    if len(distinct) != a or not 0 <= first_arm < a or max_attempts < 1:
        raise ValueError("one distinct count per arm, the first arm among them and max_attempts >= 1")
    n = max(distinct)
    action_set = ActionSet(actions)
    state = AttemptState(torch.full((p, a, n), -1, dtype=torch.long), torch.zeros(p, a, n, len(CONFIDENCE_FEATURES)),
                         torch.zeros(p, a, n), None, [[] for _ in range(p)], [[] for _ in range(p)],
                         tuple(CONFIDENCE_FEATURES))
    texts: list[list[str]] = [[] for _ in range(p)]
    ids: list[list[list[int]]] = [[] for _ in range(p)]
    ended: list[list[bool]] = [[] for _ in range(p)]
    said: list[list[str]] = [[] for _ in range(p)]
    stopped_by = [""] * p
    going = list(range(p))
    next_arm = {i: first_arm for i in going}
    while going:
        going = _still_wanted(going, gone, stopped_by)
        if not going:
            break
        rows = [(i, next_arm[i], state.counts(i, a)[next_arm[i]]) for i in going]
        result = decode(lm, [list(q) for q in prompts], action_set, prompt_of_row=[i for i, _, _ in rows],
                        row_actions=[arm for _, arm, _ in rows],
                        token_budget=[int(token_budgets[i]) for i, _, _ in rows], record_features=True,
                        row_seeds=[seeds(i, arm, j) for i, arm, j in rows],
                        stop_checks=None if stop_checks is None else [stop_checks[i] for i, _, _ in rows],
                        on_step=None if gone is None else _gone_rows([i for i, _, _ in rows], gone))
        words = [extract(i, text) for (i, _, _), text in zip(rows, result.texts)]
        summary, mean_hidden = trace_readings(lm, result, words, confidence, with_hidden)
        if with_hidden and state.hidden is None:
            state.hidden = torch.zeros(p, a, n, mean_hidden.shape[-1])
        for r, (i, arm, j) in enumerate(rows):
            length = int(result.lengths[r])
            state.confidence[i, arm, j] = summary[r]
            if state.hidden is not None:
                state.hidden[i, arm, j] = mean_hidden[r]
            state.tokens[i, arm, j] = float(length)
            state.order[i].append((arm, j))
            texts[i].append(result.texts[r])
            ids[i].append(result.tokens[r, :length].tolist())
            ended[i].append(bool(result.stopped_at_eos[r]) or (result.stopped_by_check is not None
                                                               and bool(result.stopped_by_check[r])))
            said[i].append(words[r])
            answer_of, state.strings[i] = answer_ids(said[i])  # ids in order of first appearance
            for (arm_t, j_t), answer in zip(state.order[i], answer_of):
                state.answers[i, arm_t, j_t] = answer
        # a problem with no attempt or arm left stops without asking
        open_rows, still = [], []
        for i in _still_wanted(going, gone, stopped_by):
            counts = state.counts(i, a)
            if len(state.order[i]) >= max_attempts or all(counts[k] >= distinct[k] for k in range(a)):
                stopped_by[i] = "budget"
            else:
                open_rows.append(i)
        for i, (arm, reason) in zip(open_rows, decider.decide(state, open_rows) if open_rows else []):
            if arm is None:
                stopped_by[i] = reason
            elif not 0 <= arm < a or state.counts(i, a)[arm] >= distinct[arm]:
                stopped_by[i] = "budget"  # the decider asked for an arm that is used up
            else:
                next_arm[i] = arm
                still.append(i)
        going = still
    made = [i for i in range(p) if state.order[i]]  # a problem cancelled before its first attempt has no answer
    chosen_ids = dict(zip(made, decider.answer(state, made) if made else []))
    answers, chosen = [], []
    for i in range(p):
        k = chosen_ids.get(i, -1)
        word = state.strings[i][k] if 0 <= k < len(state.strings[i]) else ""
        answers.append(word)
        chosen.append(said[i].index(word) if word else -1)
    paths = [[arm for arm, _ in state.order[i]] for i in range(p)]
    return AttemptsResult(texts, ids, ended, paths, said, answers, chosen, stopped_by, state)


def _still_wanted(going: list[int], gone: Gone | None, stopped_by: list[str]) -> list[int]:
    """``going`` without the problems ``gone`` names (their reason set to ``"cancelled"``)."""
    left = set(gone(going)) if gone is not None and going else set()
    for i in left:
        stopped_by[i] = "cancelled"
    return [i for i in going if i not in left]


def _gone_rows(problem_of_row: list[int], gone: Gone) -> Callable[[StepTokens], list[int]]:
    """``decode``'s ``on_step`` for one round: the rows whose problem ``gone`` names stop now."""

    def on_step(step: StepTokens) -> list[int]:
        rows = step.rows.tolist()
        left = set(gone(sorted({problem_of_row[r] for r in rows})))
        return [r for r in rows if problem_of_row[r] in left] if left else []

    return on_step
