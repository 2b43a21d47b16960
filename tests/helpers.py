"""What several test folders share beyond ``conftest``'s fixtures: tiny tasks whose verifier reads
one character, and a kill in the middle of a training run."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from decoding_adapters.tasks import Problem, Task, chat_messages


class HasOneTask(Task):
    """Three tiny problems; a completion is correct when it contains the digit 1."""

    name = "has-one"
    questions = ("Say 1", "What is 2+3?", "x")
    id_prefix = "p"

    def load(self, split):
        return [Problem(id=f"{self.id_prefix}{i}", question=q, answer="1") for i, q in enumerate(self.questions)]

    def prompt(self, problem, cot=False):
        return chat_messages(None, problem.question)

    def reward(self, problem, completion):
        return float("1" in completion)


class ContainsOne(HasOneTask):
    """Four tiny problems; a completion is correct when it contains the character 1."""

    name = "contains-one"
    questions = ("Say 1", "What is 2+3?", "x", "count: 1 2 3")
    id_prefix = "q"


@contextmanager
def killed_at_step(trainer_cls: type, step: int):
    """Inside the block, ``trainer_cls.train_step`` raises ``KeyboardInterrupt`` at its ``step``-th
    call (a kill midway through that step: what it had not checkpointed is lost); the block must
    end with that interrupt, and the class is restored after it."""
    original = trainer_cls.__dict__.get("train_step")
    inherited = trainer_cls.train_step
    calls = 0

    def dying_step(self):
        nonlocal calls
        calls += 1
        if calls == step:
            raise KeyboardInterrupt
        return inherited(self)

    trainer_cls.train_step = dying_step
    try:
        with pytest.raises(KeyboardInterrupt):
            yield
    finally:
        if original is None:
            del trainer_cls.train_step
        else:
            trainer_cls.train_step = original
