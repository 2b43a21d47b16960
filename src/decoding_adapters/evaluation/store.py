"""The rows an evaluation decoded, by key (``keys``): each row's outcome, its answer, length and
cost, and the full record of the rows kept for the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..decoding.actions import DecodingAction
from ..decoding.loop import DecodeResult
from .keys import Key, TokenKey

__all__ = ["RowStore", "record", "stop_reason"]


@dataclass
class RowStore:
    """Outcomes of decoded rows by key, plus full records for the kept ones and what each cost."""

    tokenizer: object
    wanted: set = field(default_factory=set)
    correct: dict = field(default_factory=dict)
    answer: dict = field(default_factory=dict)
    """The answer each row states (``Task.extract_answer``): what a vote counts."""
    length: dict = field(default_factory=dict)
    records: dict = field(default_factory=dict)
    token_counts: dict = field(default_factory=dict)  # token method name -> Counter(action)
    seconds: dict = field(default_factory=dict)
    """Decode seconds of each *decoded* key: its decode call's time split over the call's rows in
    proportion to their lengths (a replicated key has none)."""
    decodes: dict = field(default_factory=dict)
    """Sequences generated for each key (``DecodeResult.row_costs``: more than one for a two-pass method)."""
    generated: dict = field(default_factory=dict)
    """Tokens generated for each key over all its decodes."""
    source: dict = field(default_factory=dict)
    """A replicated key -> the decoded key it stands for (a deterministic row decoded once)."""
    all_greedy: dict = field(default_factory=dict)
    """Token keys: whether every action the chooser took in the row was greedy."""
    row_actions: dict = field(default_factory=dict)
    """Token keys whose row was all greedy: the action index of every generated token."""
    deterministic: dict = field(default_factory=dict)
    """``(method name, id(policy)) -> {problem: key}``: argmax token rows that depend on no seed."""
    draft_confidence: dict = field(default_factory=dict)
    """Draft-gated method name -> ``[problem, 6]`` its drafts' confidence summary
    (``policies.draft.CONFIDENCE_FEATURES``), what its gate read."""

    def add(
        self, keys: list[Key], result: DecodeResult, rewards: torch.Tensor, actions: list[DecodingAction],
        seconds: float = 0.0, answers: Sequence[str] | None = None,
    ) -> None:
        lengths = result.lengths.double()
        share = lengths / lengths.sum() if float(lengths.sum()) > 0 else torch.full_like(lengths, 1 / len(keys))
        greedy = torch.tensor([a.is_greedy for a in actions] + [True])  # index -1 (past the end) counts as greedy
        row_greedy = greedy[result.actions].all(dim=1)  # [rows]
        decodes, generated = result.row_costs()
        for r, key in enumerate(keys):
            self.correct[key] = float(rewards[r])
            self.answer[key] = answers[r] if answers is not None else result.texts[r].strip()
            self.length[key] = int(result.lengths[r])
            self.decodes[key] = int(decodes[r])
            self.generated[key] = int(generated[r])
            self.seconds[key] = seconds * float(share[r])
            if key in self.wanted:
                self.records[key] = record(result, r, self.tokenizer, actions, float(rewards[r]))
            if isinstance(key, TokenKey):
                self.all_greedy[key] = bool(row_greedy[r])
                if row_greedy[r]:
                    self.row_actions[key] = result.actions[r, : int(result.lengths[r])].tolist()

    def replicate(self, source: Key, target: Key) -> None:
        """``target`` has ``source``'s outcome without being decoded (a deterministic row)."""
        self.correct[target] = self.correct[source]
        self.answer[target] = self.answer[source]
        self.length[target] = self.length[source]
        self.decodes[target] = self.decodes[source]
        self.generated[target] = self.generated[source]
        self.source[target] = self.source.get(source, source)
        if target in self.wanted and source in self.records:
            self.records[target] = self.records[source]


def record(result: DecodeResult, r: int, tokenizer, actions: list[DecodingAction], reward: float) -> dict:
    n = int(result.lengths[r])
    ids = result.tokens[r, :n].tolist()
    return {
        "text": result.texts[r],
        "token_ids": ids,
        "tokens": tokenizer.batch_decode([[t] for t in ids]) if ids else [],
        "_actions": [actions[a] for a in result.actions[r, :n].tolist()],
        "entropy": [round(float(x), 4) for x in result.entropy[r, :n]],
        "max_prob": [round(float(x), 4) for x in result.max_prob[r, :n]],
        "correct": reward,
        "length": n,
        "stop_reason": stop_reason(result, r),
    }


def stop_reason(result: DecodeResult, r: int) -> str:
    if bool(result.stopped_at_eos[r]):
        return "eos"
    if result.stopped_by_check is not None and bool(result.stopped_by_check[r]):
        return "answer"
    return "budget"
