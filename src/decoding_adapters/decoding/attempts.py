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

An attempt can be cut short (an ``Abandoner``, optional): at each checkpoint of ``every`` tokens
(``decoding.checkpoints``) that a running attempt reaches, the abandoner reads its readings so far
and may cut it there. A cut attempt spends its tokens so far and gives no answer (answer -1, its
readings those of the checkpoint); the decider then decides as after any attempt. The result says
where each attempt was cut (``AttemptsResult.cut_at``).

Prompts are prefilled once: each round's ``decode`` takes the prompts it prefilled in earlier
rounds from the rounds' ``PromptCache`` (``lm.prompt_cache``; the same tokens as prefilling them
again), and a problem's prompt is dropped from it when the problem stops.

Seeds: attempt j of arm a of problem i decodes with ``seeds(i, a, j)`` (the caller's key: the
sample table's ``row_seed(seed, problem id, action name, j, "draft-table")`` makes the attempts a
table built with the same settings holds, the generator's its own per-call key).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Collection, Protocol, Sequence

import torch

from ..lm.prompt_cache import PROMPT_CACHE_BYTES, PromptCache
from .actions import ActionSet, DecodingAction
from .checkpoints import checkpoint_tokens, prefix_readings
from .confidence import CONFIDENCE_FEATURES, ConfidenceConfig, answer_ids, trace_readings
from .loop import StepTokens, StopCheck, decode

__all__ = ["AttemptState", "AttemptDecider", "Abandoner", "AttemptsResult", "AttemptRounds", "ProblemAttempts",
           "STOP_REASONS", "Gone", "sequential_attempts"]

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


class Abandoner(Protocol):
    """What may cut a running attempt at a checkpoint (module docstring)."""

    every: int
    """Tokens between checkpoints."""
    reads_hidden: bool
    """Whether ``cut`` reads the mean hidden state so far."""

    def cut(self, checkpoint: int, confidence: torch.Tensor, hidden: torch.Tensor | None) -> list[bool]:
        """For ``R`` attempts at checkpoint ``checkpoint`` (0-based: ``(checkpoint + 1) * every``
        tokens), their readings so far (``[R, C]`` confidence, ``[R, H]`` mean hidden state or None):
        cut each one there?"""
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
    cut_at: list[list[int | None]] = field(default_factory=list)
    """Per attempt, the tokens at which the abandoner cut it (None: not cut)."""

    @property
    def decodes(self) -> list[int]:
        return [len(p) for p in self.paths]

    @property
    def tokens(self) -> list[int]:
        return [sum(len(t) for t in ids) for ids in self.token_ids]


@dataclass
class ProblemAttempts:
    """One problem's attempts and the decision (a row of ``AttemptsResult``)."""

    texts: list[str]
    token_ids: list[list[int]]
    ended: list[bool]
    path: list[int]
    said: list[str]
    answer: str
    chosen: int
    stopped_by: str
    record: "_Record" = field(repr=False)
    cut_at: list[int | None] = field(default_factory=list)


@dataclass
class _Record:
    """A problem in ``AttemptRounds``: how to decode it and what its attempts so far show
    (its slices of ``AttemptState``: answers ``[A, N]``, confidence ``[A, N, C]``, tokens ``[A, N]``)."""

    prompt: list[int]
    budget: int
    seeds: Callable[[int, int], int]
    extract: Callable[[str], str]
    stop_check: StopCheck | None
    answers: torch.Tensor
    confidence: torch.Tensor
    tokens: torch.Tensor
    next_arm: int
    hidden: torch.Tensor | None = None
    order: list[tuple[int, int]] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)
    ended: list[bool] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    cut_at: list[int | None] = field(default_factory=list)
    stopped_by: str = ""


def _stack(records: Sequence[_Record]) -> AttemptState:
    """The ``AttemptState`` of ``records``, problem r = ``records[r]``."""
    hidden = None
    widths = {rec.hidden.shape[-1] for rec in records if rec.hidden is not None}
    if widths:
        zeros = torch.zeros(*records[0].answers.shape, widths.pop())
        hidden = torch.stack([rec.hidden if rec.hidden is not None else zeros for rec in records])
    return AttemptState(torch.stack([rec.answers for rec in records]), torch.stack([rec.confidence for rec in records]),
                        torch.stack([rec.tokens for rec in records]), hidden, [rec.order for rec in records],
                        [rec.strings for rec in records], tuple(CONFIDENCE_FEATURES))


class AttemptRounds:
    """Sequential attempts as rounds that problems can join between (module docstring): ``add`` a
    problem, then each ``round`` decodes one attempt of every problem going, in one batched
    ``decode``, asks the decider and returns the problems that stopped. A problem's attempts depend
    only on it (its seeds, its prompt), not on when it joined or which problems shared its rounds."""

    def __init__(self, lm, actions: Sequence[DecodingAction], decider: AttemptDecider, *, first_arm: int,
                 distinct: Sequence[int], max_attempts: int, confidence: ConfidenceConfig | None = None,
                 with_hidden: bool = False, abandon: Abandoner | None = None,
                 prompt_cache_bytes: int = PROMPT_CACHE_BYTES):
        self.actions = list(actions)
        a = len(self.actions)
        if len(distinct) != a or not 0 <= first_arm < a or max_attempts < 1:
            raise ValueError("one distinct count per arm, the first arm among them and max_attempts >= 1")
        self.lm, self.decider, self.action_set = lm, decider, ActionSet(self.actions)
        self.first_arm, self.distinct, self.max_attempts = first_arm, list(distinct), max_attempts
        self.confidence, self.with_hidden = confidence or ConfidenceConfig(), with_hidden
        self.abandon = abandon
        self.prompt_cache = PromptCache(prompt_cache_bytes) if prompt_cache_bytes else None
        """The going problems' prefilled prompts, reused by every round (None: ``prompt_cache_bytes`` 0,
        every round prefills its prompts)."""
        self.live: dict[int, _Record] = {}
        """The problems going, by key, in the order they joined."""
        self._next_key = 0

    def add(self, prompt: Sequence[int], token_budget: int, seeds: Callable[[int, int], int],
            extract: Callable[[str], str], stop_check: StopCheck | None = None) -> int:
        """A problem that joins the next round: its attempt j of arm a draws from ``seeds(a, j)``,
        ``extract(text)`` reads an attempt's answer, ``stop_check`` ends an attempt at its first
        complete answer. Returns its key."""
        a, n = len(self.actions), max(self.distinct)
        key, self._next_key = self._next_key, self._next_key + 1
        self.live[key] = _Record(list(prompt), int(token_budget), seeds, extract, stop_check,
                                 torch.full((a, n), -1, dtype=torch.long), torch.zeros(a, n, len(CONFIDENCE_FEATURES)),
                                 torch.zeros(a, n), self.first_arm)
        return key

    def round(self, gone: Gone | None = None) -> dict[int, ProblemAttempts]:
        """One attempt for every problem going, then the decision; the problems that stopped (those
        ``gone`` names included, reason ``"cancelled"``), by key."""
        finished: dict[int, ProblemAttempts] = {}
        going = self._drop_gone(list(self.live), gone, finished)
        if going:
            self._decode(going, gone)
            going = self._drop_gone(going, gone, finished)
        if going:
            self._decide(going, finished)
        return finished

    def _decode(self, going: list[int], gone: Gone | None) -> None:
        records = [self.live[k] for k in going]
        rows = [(rec, rec.next_arm, sum(arm == rec.next_arm for arm, _ in rec.order)) for rec in records]
        checks = [rec.stop_check for rec in records]
        cuts = None if self.abandon is None else _Cuts(self.lm, self.abandon, self.confidence,
                                                       [rec.budget for rec in records], self.with_hidden)
        hooks = [h for h in (None if gone is None else _gone_rows(going, gone), cuts) if h is not None]
        result = decode(self.lm, [rec.prompt for rec in records], self.action_set,
                        row_actions=[arm for _, arm, _ in rows], token_budget=[rec.budget for rec in records],
                        record_features=True, row_seeds=[rec.seeds(arm, j) for rec, arm, j in rows],
                        stop_checks=checks if any(c is not None for c in checks) else None,
                        on_step=_either(hooks), prompt_cache=self.prompt_cache)
        cut = {} if cuts is None else cuts.cut
        words = ["" if r in cut else rec.extract(text) for r, (rec, text) in enumerate(zip(records, result.texts))]
        summary, mean_hidden = trace_readings(self.lm, result, words, self.confidence, self.with_hidden)
        for r, (_, conf, hid) in cut.items():  # a cut attempt's readings: those of its checkpoint
            summary[r] = conf
            if self.with_hidden and hid is not None:
                mean_hidden[r] = hid
        for r, (rec, arm, j) in enumerate(rows):
            length = int(result.lengths[r])
            rec.confidence[arm, j] = summary[r]
            if self.with_hidden:
                if rec.hidden is None:
                    rec.hidden = torch.zeros(*rec.answers.shape, mean_hidden.shape[-1])
                rec.hidden[arm, j] = mean_hidden[r]
            rec.tokens[arm, j] = float(length)
            rec.cut_at.append(cut[r][0] if r in cut else None)
            rec.order.append((arm, j))
            rec.texts.append(result.texts[r])
            rec.ids.append(result.tokens[r, :length].tolist())
            rec.ended.append(bool(result.stopped_at_eos[r]) or (result.stopped_by_check is not None
                                                                 and bool(result.stopped_by_check[r])))
            rec.said.append(words[r])
            answer_of, rec.strings = answer_ids(rec.said)  # ids in order of first appearance
            for (arm_t, j_t), answer in zip(rec.order, answer_of):
                rec.answers[arm_t, j_t] = answer

    def _decide(self, going: list[int], finished: dict[int, ProblemAttempts]) -> None:
        a = len(self.actions)
        records = [self.live[k] for k in going]
        state = _stack(records)
        open_rows = []
        for r, rec in enumerate(records):  # a problem with no attempt or arm left stops without asking
            counts = state.counts(r, a)
            if len(rec.order) >= self.max_attempts or all(counts[k] >= self.distinct[k] for k in range(a)):
                rec.stopped_by = "budget"
            else:
                open_rows.append(r)
        for r, (arm, reason) in zip(open_rows, self.decider.decide(state, open_rows) if open_rows else []):
            if arm is None:
                records[r].stopped_by = reason
            elif not 0 <= arm < a or state.counts(r, a)[arm] >= self.distinct[arm]:
                records[r].stopped_by = "budget"  # the decider asked for an arm that is used up
            else:
                records[r].next_arm = arm
        stopped = [r for r, rec in enumerate(records) if rec.stopped_by]
        for r, k in zip(stopped, self.decider.answer(state, stopped) if stopped else []):
            finished[going[r]] = self._finish(going[r], k)

    def _drop_gone(self, going: list[int], gone: Gone | None, finished: dict[int, ProblemAttempts]) -> list[int]:
        left = set(gone(going)) if gone is not None and going else set()
        for key in [k for k in going if k in left]:
            rec = self.live[key]
            rec.stopped_by = "cancelled"
            answer = self.decider.answer(_stack([rec]), [0])[0] if rec.order else -1
            finished[key] = self._finish(key, answer)
        return [k for k in going if k not in left]

    def _finish(self, key: int, answer: int) -> ProblemAttempts:
        rec = self.live.pop(key)
        if self.prompt_cache is not None and all(other.prompt != rec.prompt for other in self.live.values()):
            self.prompt_cache.discard(rec.prompt)
        word = rec.strings[answer] if 0 <= answer < len(rec.strings) else ""
        return ProblemAttempts(rec.texts, rec.ids, rec.ended, [arm for arm, _ in rec.order], rec.said, word,
                               rec.said.index(word) if word else -1, rec.stopped_by, rec, rec.cut_at)


def sequential_attempts(lm, prompts: Sequence[Sequence[int]], actions: Sequence[DecodingAction],
                        decider: AttemptDecider, *, first_arm: int, distinct: Sequence[int], max_attempts: int,
                        token_budgets: Sequence[int], seeds: Callable[[int, int, int], int],
                        extract: Callable[[int, str], str], stop_checks: Sequence[StopCheck | None] | None = None,
                        confidence: ConfidenceConfig | None = None, with_hidden: bool = False,
                        gone: Gone | None = None, abandon: Abandoner | None = None,
                        prompt_cache_bytes: int = PROMPT_CACHE_BYTES) -> AttemptsResult:
    """Decode rounds of attempts for every prompt until the decider stops each (module docstring;
    ``AttemptRounds`` with every problem joining the first round).

    ``extract(i, text)``: prompt i's answer in an attempt's text ("" for none); ``stop_checks``: per
    prompt, the check that ends a row at its first complete answer (None: decode to EOS or budget).
    ``gone``: asked before each round and after every decode step; a problem it names stops there
    (reason ``"cancelled"``, its attempt cut where it was, or none made), the others go on as if it
    had never been there (each row keeps its own seed). ``abandon``: cuts running attempts at its
    checkpoints (module docstring). ``prompt_cache_bytes``: the cap of the prompts kept prefilled
    across rounds (``AttemptRounds``; 0: every round prefills its prompts)."""
    rounds = AttemptRounds(lm, actions, decider, first_arm=first_arm, distinct=distinct, max_attempts=max_attempts,
                           confidence=confidence, with_hidden=with_hidden, abandon=abandon,
                           prompt_cache_bytes=prompt_cache_bytes)
    for i, prompt in enumerate(prompts):  # keys 0 .. P - 1
        rounds.add(prompt, int(token_budgets[i]), functools.partial(seeds, i), functools.partial(extract, i),
                   None if stop_checks is None else stop_checks[i])
    done: dict[int, ProblemAttempts] = {}
    while rounds.live:
        done.update(rounds.round(gone))
    rows = [done[i] for i in range(len(prompts))]
    state = _stack([row.record for row in rows]) if rows else None
    return AttemptsResult([r.texts for r in rows], [r.token_ids for r in rows], [r.ended for r in rows],
                          [r.path for r in rows], [r.said for r in rows], [r.answer for r in rows],
                          [r.chosen for r in rows], [r.stopped_by for r in rows], state, [r.cut_at for r in rows])


def _gone_rows(problem_of_row: list[int], gone: Gone) -> Callable[[StepTokens], list[int]]:
    """``decode``'s ``on_step`` for one round: the rows whose problem ``gone`` names stop now."""

    def on_step(step: StepTokens) -> list[int]:
        rows = step.rows.tolist()
        left = set(gone(sorted({problem_of_row[r] for r in rows})))
        return [r for r in rows if problem_of_row[r] in left] if left else []

    return on_step


def _either(hooks: list[Callable[[StepTokens], list[int]]]) -> Callable[[StepTokens], list[int]] | None:
    """One ``on_step`` asking every hook (each sees every step): the rows any of them stops."""
    if not hooks:
        return None
    if len(hooks) == 1:
        return hooks[0]

    def on_step(step: StepTokens) -> list[int]:
        return sorted({r for hook in hooks for r in (hook(step) or [])})

    return on_step


class _Cuts:
    """``decode``'s ``on_step`` that asks the abandoner at each checkpoint about the rows still
    running there (a row that ends at this very step is done, not cut) and stops the rows it cuts;
    ``cut[row] = (tokens, [C] confidence, [H] mean hidden or None)`` of each row cut."""

    def __init__(self, lm, abandon: Abandoner, confidence: ConfidenceConfig, budgets: Sequence[int],
                 with_hidden: bool):
        self.lm, self.abandon, self.confidence = lm, abandon, confidence
        self.with_hidden = with_hidden or abandon.reads_hidden  # the attempt's record keeps it too
        self.marks = {t: c for c, t in enumerate(checkpoint_tokens(abandon.every, max(budgets)))}
        self.budgets = list(budgets)
        self.history: dict[int, list[int]] = {}  # row -> its tokens so far
        self.cut: dict[int, tuple[int, torch.Tensor, torch.Tensor | None]] = {}

    def __call__(self, step: StepTokens) -> list[int]:
        for r, token in zip(step.rows.tolist(), step.tokens.tolist()):
            self.history.setdefault(r, []).append(token)
        t = step.step + 1  # tokens each of these rows has made
        if t not in self.marks:
            return []
        rows = [r for r, done in zip(step.rows.tolist(), step.finished.tolist()) if not done and t < self.budgets[r]]
        if not rows:
            return []
        tokens = torch.tensor([self.history[r][:t] for r in rows], dtype=torch.long)  # [R, t]
        conf, hid = prefix_readings(self.lm, tokens, step.features[rows, :t], self.confidence, self.with_hidden)
        asked = self.abandon.cut(self.marks[t], conf, hid if self.abandon.reads_hidden else None)
        cut = []
        for k, (r, yes) in enumerate(zip(rows, asked)):
            if yes:
                self.cut[r] = (t, conf[k], None if hid is None else hid[k])
                cut.append(r)
        return cut
