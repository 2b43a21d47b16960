"""Training the attempt policy (``policies.attempt``) on stored sample tables.

An episode on a table: the first attempt is the stopped greedy; after each attempt the policy stops
(reward: its answer is right, minus ``price`` per decode) or draws one more attempt of an arm, and
the n-th attempt of arm a is that arm's n-th stored sample. The objective is the expected reward
``J = E[correct - price * decodes]`` over the training problems; sweeping ``price`` traces the
policy's accuracy-per-compute curve.

How it departs from textbook REINFORCE (sampled episodes, ``grad log pi(a) * (R - b)``):

- **Every expectation is exact on the table.** A table fixes every arm's next attempt at every
  state, so the episode tree of a problem is known in full: the states are the counts of draws per
  arm and the arm drawn last (``policies.attempt.AttemptLattice``; 9 states for greedy + 8 samples
  of one arm, 81 + 9 for two arms at 9 attempts). ``expected_reward`` sums, over every state, the
  probability of reaching it times the probability of stopping there times the reward of stopping
  there, and the gradient is taken through that sum: the exact policy gradient of ``J`` on the
  table (what REINFORCE estimates with sampled episodes and a baseline, without their variance).
  At a stop, the expected correctness of the answer is exact too: training scores the answer as a
  softmax over the answers' summed weights (sharpness learned), so the gradient reaches the weight
  network; used, the answer is the argmax (ties: the answer drawn first). No baseline is needed;
  no episode is sampled. A table whose lattice is too large (many arms x many samples) is refused
  rather than sampled: lower ``max_attempts``.
- **The only randomness** is the minibatch of problems per step (``step_generator``: a resumed run
  draws the same batches) and the initial weights (seeded from ``seed``).
- **Validation and keep-best** (``TrainingLoop``): the policy as used (argmax actions, argmax
  answer) is scored on the validation table every ``val_every`` steps and at step 0; the adapter
  saved is the best validated one, the start included. The score per problem is
  ``correct - price * decodes``.
- An entropy bonus on the decisions along the reached states (``entropy_coef``) keeps the policy
  from committing early to one arm.
- **The same policy whatever the thread count**: training runs with one torch thread
  (``policies.verifier.single_thread``), as the verifier's does; a float reduction's order can follow
  the number of threads, and a kept step chosen on a tie would follow it too. The network is small.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..decoding.loop import row_seed
from ..decoding.protocol import STOP_AT_ANSWER
from ..policies.attempt import (
    ATTEMPT_FEATURE_SETS,
    AttemptInputs,
    AttemptLattice,
    AttemptPolicy,
    AttemptPolicyConfig,
    expected_reward,
    save_attempt_adapter,
    walk,
)
from ..policies.verifier import single_thread
from .common import TrainingLoop, Validation, sample_prompt_batch, step_generator

__all__ = ["AttemptTrainConfig", "AttemptTrainer", "policy_config_from_table", "FEATURE_SETS"]

FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "confidence": ("confidence",),
    "hidden": ("confidence", "hidden"),
    "agreement": ("confidence", "hidden", "agreement"),
    "answer_probs": ("confidence", "hidden", "agreement", "answer_probs"),
}
"""The ablation's nested feature sets: confidence only; + the hidden summary; + answer agreement;
+ the answer tokens' probabilities (a table without hidden states drops ``hidden`` from each)."""


@dataclass
class AttemptTrainConfig:
    """Training an attempt policy on a sample table."""

    features: tuple[str, ...] = ("confidence", "hidden")
    """what the policy reads: any of confidence, hidden, agreement, answer_probs (hidden is dropped for a
    table without hidden states); the default is what paid in the smoke ablation (docs/attempt.md)"""
    price: float = 0.02
    """Reward lost per decode (each attempt, the first included): sets where on the accuracy-per-compute
    curve the policy lands."""
    max_attempts: int | None = None
    """Attempts per problem at most, the first included (None: the first and every sample of one sampled arm)."""
    steps: int = 300
    """Optimiser steps."""
    lr: float = 1e-2
    """Adam learning rate."""
    problems_per_step: int = 128
    """Training problems per step (each contributes its exact expected reward)."""
    width: int = 64
    """Hidden width of the stop and weight networks."""
    hidden_proj: int = 8
    """Width of the learned projection of each attempt's mean hidden state (features with hidden)."""
    entropy_coef: float = 1e-3
    """Weight of the decisions' expected entropy in the objective."""
    stop_bias: float = 0.0
    """Initial bias of the stop logit."""
    val_every: int = 25
    """Validate every this many steps."""
    checkpoint_every: int = 50
    """Checkpoint every this many steps (and at the end)."""
    keep_best: bool = True
    """Validate at step 0 too and save the best validated policy, the start included."""
    seed: int = 0
    """Seed of the initial weights and of the problem batches."""

    def __post_init__(self) -> None:
        self.features = tuple(self.features)
        unknown = [f for f in self.features if f not in ATTEMPT_FEATURE_SETS]
        if unknown:
            raise ValueError(f"unknown features {unknown}; choose from {list(ATTEMPT_FEATURE_SETS)}")
        if self.price < 0 or self.steps < 0 or self.lr <= 0 or self.problems_per_step < 1:
            raise ValueError("price and steps must be >= 0, lr > 0, problems_per_step >= 1")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.val_every < 1 or self.checkpoint_every < 1:
            raise ValueError("val_every and checkpoint_every must be >= 1")


def policy_config_from_table(table, config: AttemptTrainConfig) -> AttemptPolicyConfig:
    """The policy's shape for a ``SampleTable`` (read through its attributes): its arms, the greedy arm
    first (the table's first arm when it has no greedy one), the confidence columns, the hidden width."""
    actions = table.actions
    greedy = [i for i, a in enumerate(actions) if a.is_greedy]
    first = greedy[0] if greedy else 0
    distinct = tuple(int(d) for d in table.distinct)
    sampled = [d for i, d in enumerate(distinct) if i != first] or [0]
    max_attempts = config.max_attempts or 1 + max(sampled)
    hidden = 0 if table.hidden is None else int(table.hidden.shape[-1])
    features = tuple(f for f in config.features if f != "hidden" or hidden)
    return AttemptPolicyConfig(tuple(table.arm_names), first, distinct, tuple(table.confidence_names), features,
                               max_attempts, hidden, config.hidden_proj, config.width,
                               int(table.header["token_budget"]), config.stop_bias)


class AttemptTrainer(TrainingLoop):
    """The resumable loop (``training.common.TrainingLoop``) over the exact expected reward."""

    name = "train-attempt"

    def __init__(self, config: AttemptTrainConfig, policy_config: AttemptPolicyConfig, train: AttemptInputs,
                 validation: AttemptInputs, out_dir: str | Path, actions: Sequence[dict] = (),
                 base_model: str = "", task: str = "", progress: bool = False, task_options: dict | None = None,
                 stop_at_answer: bool = STOP_AT_ANSWER):
        """``task`` and ``task_options`` (``tasks.task_record``'s) are recorded in the adapter: they
        rebuild the task's prompt, verifier and stop where the adapter is used; ``stop_at_answer``:
        whether the tables' attempts ended at their first answer (the adapter's attempts then do)."""
        if train.answer_correct is None or validation.answer_correct is None:
            raise ValueError("training needs each answer's correctness on both tables")
        self.config = config
        self.policy_config = policy_config
        self.train_inputs, self.val_inputs = train, validation
        self.actions, self.base_model, self.task, self.task_options = list(actions), base_model, task, task_options
        self.stop_at_answer = stop_at_answer
        self._init_loop(out_dir, progress)
        with torch.random.fork_rng():
            torch.manual_seed(row_seed(config.seed, "attempt-init"))
            self.policy = AttemptPolicy(policy_config)
        self.policy.set_standardisation(train)
        self.lattice = AttemptLattice.of(policy_config)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr)
        self.last_validation: dict = {}

    def train(self, resume: bool = False) -> Path:
        with single_thread():
            return super().train(resume)

    def train_step(self) -> dict:
        cfg = self.config
        generator = step_generator(cfg.seed, "attempt-batch", self.step)
        batch = sample_prompt_batch(self.train_inputs.problems, cfg.problems_per_step, generator)
        self.policy.train()
        out = expected_reward(self.policy, self.train_inputs.rows(batch), self.lattice, cfg.price, cfg.entropy_coef)
        loss = -out["objective"].mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {k: float(out[k].detach().mean()) for k in ("reward", "correct", "attempts")}

    def validate(self) -> Validation:
        self.policy.eval()
        outcome = walk(self.policy, self.val_inputs, self.lattice)
        scores = outcome.correct.astype(np.float64) - self.config.price * outcome.attempts
        self.last_validation = {"val_accuracy": float(outcome.correct.mean()),
                                "val_attempts": float(outcome.attempts.mean())}
        return Validation(torch.as_tensor(scores), by_mode={"accuracy": self.last_validation["val_accuracy"],
                                                             "attempts": self.last_validation["val_attempts"]})

    def state(self) -> dict:
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict()}

    def restore(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])

    def save(self) -> Path:
        # the kept policy's validation figures (the loop has put its weights back)
        self.validate()
        training = {**asdict(self.config), "kept_step": self.early.best_step, **self.last_validation}
        training["features"] = list(self.policy_config.features)
        return save_attempt_adapter(self.out_dir, self.policy, self.actions, training, self.base_model, self.task,
                                    self.task_options, stop_at_answer=self.stop_at_answer)
