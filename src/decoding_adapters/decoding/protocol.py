"""The protocol every method shares: how long a sample may run and where it ends.

A ``DecodingProtocol`` is the set of decoding settings that are not a method's choice but the study's
rules (like vLLM's ``SamplingParams``: settings that travel together as one frozen object): the
token budget and the stop at the first complete answer. Each field's default is given here once
(the token budget's home is ``decoding.actions.DEFAULT_TOKEN_BUDGET``; the stop's is
``STOP_AT_ANSWER`` below); a component that takes these settings takes a ``DecodingProtocol``
whole, or takes the field with no default of its own. (Not ``typing.Protocol``: hence the longer name.)

Seeds are not part of it: each stage draws its rows from its own seed and tag (a trainer's seed, an
evaluation's seed count, a sample table's seed 0), so there is no one seed that travels with the
budget.

Files written by any version keep the flat keys ``token_budget`` and ``stop_at_answer``
(``as_record`` / ``from_record``).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import TypeVar

from .actions import DEFAULT_TOKEN_BUDGET

__all__ = ["STOP_AT_ANSWER", "STOP_OF_UNMARKED_FILES", "DecodingProtocol", "stored_stop"]

Config = TypeVar("Config")


STOP_AT_ANSWER: bool = True
"""The protocol's default, for every method, trainer and adapter: each sample ends at its task's
first complete answer (``Task.answer_complete``, checked after every token), so no method is scored
on what it writes after its answer and none spends tokens there. Every config and function that
takes ``stop_at_answer`` takes its default from here or has none (its caller passes it);
``--no-stop-at-answer`` decodes to the budget. A task that does not say what a complete answer is
(code) is decoded to its end either way."""

STOP_OF_UNMARKED_FILES: bool = False
"""What a stored table or adapter without a ``stop_at_answer`` key was decoded with: files written
before the stop existed decoded every sample to its budget. Not a default for new work: every file
written now records its stop."""


def stored_stop(record: dict) -> bool:
    """The stop at the first answer a stored header or ``adapter.json`` was decoded with (a file
    without the key: ``STOP_OF_UNMARKED_FILES``)."""
    return bool(record.get("stop_at_answer", STOP_OF_UNMARKED_FILES))


@dataclass(frozen=True)
class DecodingProtocol:
    """The decoding rules every method of a study shares."""

    token_budget: int = DEFAULT_TOKEN_BUDGET
    """Max new tokens per sample (the budget b); a token adapter reads what is left of it."""
    stop_at_answer: bool = STOP_AT_ANSWER
    """Every sample ends at its task's first complete answer (``Task.answer_complete``); False
    decodes to EOS or the token budget."""

    def __post_init__(self) -> None:
        budget = self.token_budget
        if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1:
            raise ValueError(f"token_budget must be an int >= 1, got {self.token_budget!r}")
        object.__setattr__(self, "token_budget", int(budget))  # a numpy integer is written to JSON as an int
        if not isinstance(self.stop_at_answer, bool):
            raise ValueError(f"stop_at_answer must be True or False, got {self.stop_at_answer!r}")

    def as_record(self) -> dict:
        """The two fields under the flat keys stored configs, headers and ``adapter.json`` name them by."""
        return {"token_budget": self.token_budget, "stop_at_answer": self.stop_at_answer}

    def onto(self, config: Config) -> Config:
        """``config`` (a dataclass with the flat ``token_budget`` and ``stop_at_answer`` fields its
        command line and its JSON keep) under this protocol: the whole protocol, in one place."""
        return replace(config, **self.as_record())

    @classmethod
    def from_record(cls, record: dict) -> DecodingProtocol:
        """The protocol a stored config was written with (flat keys; a missing stop is read as
        ``STOP_OF_UNMARKED_FILES``, a missing budget as the default)."""
        budget = record.get("token_budget")
        return cls(token_budget=DEFAULT_TOKEN_BUDGET if budget is None else int(budget),
                   stop_at_answer=stored_stop(record))
