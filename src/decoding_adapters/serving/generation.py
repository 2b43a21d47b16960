"""What a decode returns and streams: ``Generation`` (one prompt's completions and the adapter's
decisions), ``PreparedPrompt`` (a prompt validated and tokenized), ``TokenEvent`` (one streamed
token), and the two readings of a prompt and a row the decoders share."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Callable, Collection, Literal, Union

from ..decoding.loop import DecodeResult

__all__ = ["Generation", "PreparedPrompt", "Prompt", "TokenEvent", "TokenCallback", "question_text", "ended"]

Prompt = Union[str, list[dict]]
"""A user message as text, or a chat (list of ``{"role", "content"}`` messages)."""


@dataclass
class Generation:
    """The completions of one prompt and the decoding actions the adapter took for them."""

    prompt: Prompt
    """The prompt as given (text or chat)."""
    completions: list[str]
    """``parallel_budget`` completions, special tokens removed."""
    kind: str
    """Which adapter decided: one action per prompt, one per token, or keep-or-re-decode after a draft."""
    action_names: list[str]
    """The adapter's action set, in policy-output order (indices below point into it; a draft-gated
    adapter's output 0 is ``"keep draft"``)."""
    finish_reasons: list[str]
    """Per completion: ``"stop"`` (EOS) or ``"length"`` (token budget reached)."""
    completion_tokens: list[int]
    """Per completion: tokens generated (the EOS token included when one ended it)."""
    prompt_tokens: int
    """Tokens of the chat-formatted prompt."""
    seed: int
    """Seed of the call; completion j of prompt i used ``row_seed(seed, i, j)``."""
    action_index: int | None = None
    """Sequence adapter: the action chosen for this prompt."""
    action_probs: list[float] | None = None
    """Sequence adapter: pi(a | e, B) over the action set."""
    token_actions: list[list[int]] | None = None
    """Token adapter: per completion, the action index at each generated token."""
    draft_kept: bool | None = None
    """Draft-gated adapter: whether the greedy draft was kept (no re-decode)."""
    decodes: int | None = None
    """Draft-gated adapter: sequences decoded for this prompt, the draft included (1 when kept)."""
    draft_tokens: int | None = None
    """Draft-gated adapter: tokens of the draft (generated whether or not it is an answer)."""
    stopped_by: str | None = None
    """Attempt adapter: why it stopped ("policy", "agreement", "confident", "budget";
    ``decoding.attempts.STOP_REASONS``)."""
    attempt_actions: list[str] | None = None
    """Attempt adapter: the arm of each attempt, in order (``decodes`` of them)."""
    answer: str | None = None
    """Attempt adapter: the answer it gives ("" when no attempt stated one)."""
    attempt_tokens: int | None = None
    """Attempt adapter: tokens generated over every attempt (the completion is one of them)."""
    attempt_token_counts: list[int] | None = None
    """Attempt adapter: the tokens of each attempt, in order."""
    attempt_cut_at: list[int | None] | None = None
    """Attempt adapter: per attempt, the tokens at which its abandon rule cut it (None: not cut;
    every entry None without a rule)."""
    attempt_choices: list[dict] | None = None
    """Attempt adapter asked for n > 1 completions: each completion's own chain of attempts, as
    ``{"action", **adapter_info()}`` of that chain (the fields above are completion 0's)."""

    @property
    def action(self) -> str | None:
        """Sequence adapter: the name of the chosen action (None for a token adapter); attempt
        adapter: the arm of the attempt returned."""
        return None if self.action_index is None else self.action_names[self.action_index]

    @property
    def attempt_records(self) -> list[dict] | None:
        """Attempt adapter: per attempt, in order, its arm, its tokens and where it was cut
        (``{"arm", "tokens", "cut_at"}``; ``cut_at`` None: not cut)."""
        if self.attempt_actions is None:
            return None
        counts = self.attempt_token_counts or [None] * len(self.attempt_actions)
        cuts = self.attempt_cut_at or [None] * len(self.attempt_actions)
        return [{"arm": arm, "tokens": n, "cut_at": cut} for arm, n, cut in zip(self.attempt_actions, counts, cuts)]

    def choice_info(self, j: int) -> dict:
        """Attempt adapter: completion ``j``'s arm and what its own chain of attempts decided."""
        if self.attempt_choices is not None:
            return self.attempt_choices[j]
        return {"action": self.action, **self.adapter_info()}

    def adapter_info(self) -> dict:
        """Attempt adapter: what the response's adapter field says of its decision."""
        return {"decodes": self.decodes, "attempts": self.attempt_actions, "stopped_by": self.stopped_by,
                "answer": self.answer, "attempt_tokens": self.attempt_tokens, "attempt_records": self.attempt_records}

    @property
    def token_action_names(self) -> list[list[str]] | None:
        """Token adapter: per completion, the action name at each generated token."""
        if self.token_actions is None:
            return None
        return [[self.action_names[a] for a in row] for row in self.token_actions]

    @property
    def actions(self) -> str | list[list[str]] | None:
        """The actions taken: one name (sequence adapter) or names per token per completion (token)."""
        return self.token_action_names if self.token_actions is not None else self.action

    def action_counts(self) -> list[dict[str, int]]:
        """Per completion, how many tokens each action produced (every token: the sequence action)."""
        if self.token_actions is None:
            return [{self.action: n} for n in self.completion_tokens]
        return [dict(Counter(self.action_names[a] for a in row).most_common()) for row in self.token_actions]

    def to_dict(self) -> dict:
        attempts = {} if self.attempt_actions is None else {"attempt_records": self.attempt_records}
        return {**asdict(self), "action": self.action, "action_counts": self.action_counts(), **attempts}


@dataclass(frozen=True)
class PreparedPrompt:
    """One prompt, validated and tokenized, ready to be decoded together with others."""

    prompt: Prompt
    prompt_ids: tuple[int, ...]
    parallel_budget: int
    token_budget: int
    seed: int
    index: int
    """Position of the prompt in its own call: with ``seed`` it keys the row seeds."""
    problem_id: str | None = None
    """Attempt adapters: the problem id that keys its attempts' seeds in place of ``index``, as a
    sample table keys the same problem's samples (None: ``index`` keys them)."""


@dataclass(frozen=True)
class TokenEvent:
    """One new token of one completion, reported by ``run(..., on_tokens=...)`` while decoding."""

    prompt: int
    """Position of the prompt in the list given to ``run``."""
    completion: int
    """Which of its ``parallel_budget`` completions (j)."""
    token_id: int
    """The token (an EOS token included: it decodes to no text); -1: this completion will not be
    generated and ends here empty (a draft-gated adapter that keeps its draft at B > 1)."""
    action: int
    """Index of the action that produced it (into ``action_names``)."""
    finish_reason: Literal["stop", "length"] | None
    """Set on the completion's last token: ``"stop"`` (EOS) or ``"length"`` (token budget)."""
    adapter_info: dict | None = None
    """Set on an attempt adapter's last token: ``Generation.adapter_info`` (attempts, why it stopped)."""


TokenCallback = Callable[[list[TokenEvent]], "Collection[tuple[int, int]] | None"]


def question_text(prompt: Prompt) -> str:
    """The question a prompt asks, as a task's ``Problem.question`` holds it: the text itself, or a
    chat's last non-empty user message (the other messages' text when it has none)."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user" and m["content"].strip()]
    return users[-1] if users else "\n".join(m["content"] for m in prompt)


def ended(result: DecodeResult, row: int) -> bool:
    """The row ended on its own: at EOS, or at its first complete answer."""
    return bool(result.stopped_at_eos[row]) or (result.stopped_by_check is not None
                                                and bool(result.stopped_by_check[row]))
