"""Offline replay of a pool evaluation's outcomes for cheap sequence-level trainer experiments."""

from __future__ import annotations

from typing import Sequence

import torch

from .outcomes import OutcomeTable

__all__ = ["ReplayEnvironment"]


class ReplayEnvironment:
    """**Offline replay** of a pool evaluation: rewards are drawn from the outcomes stored in an
    :class:`OutcomeTable`; no model runs. Use it for fast sequence-level (contextual-bandit)
    trainer experiments; numbers obtained with it must be labelled offline replay.

    A draw for (problem, action) picks stored samples of that cell uniformly at random: without
    replacement while ``count`` <= the samples stored, with replacement beyond that.
    """

    def __init__(self, table: OutcomeTable):
        self.table = table
        self._rewards: dict[tuple[str, str], torch.Tensor] = {}
        for pid in table.problem_ids:
            for name in table.action_names:
                cell = table.outcomes(pid, name)
                if cell:
                    self._rewards[(pid, name)] = torch.tensor([o.reward for o in cell], dtype=torch.float32)

    @property
    def problem_ids(self) -> list[str]:
        return self.table.problem_ids

    @property
    def action_names(self) -> list[str]:
        return self.table.action_names

    def _cell(self, problem_id: str, action_name: str) -> torch.Tensor:
        try:
            return self._rewards[(problem_id, action_name)]
        except KeyError:
            raise KeyError(
                f"offline replay has no outcome for problem {problem_id!r} under action {action_name!r}"
            ) from None

    def num_samples(self, problem_id: str, action_name: str) -> int:
        return len(self._cell(problem_id, action_name))

    def mean_reward(self, problem_id: str, action_name: str) -> float:
        return float(self._cell(problem_id, action_name).mean())

    def sample_rewards(
        self, problem_id: str, action_name: str, count: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``count`` rewards (float32 ``[count]``) drawn from the stored samples of the cell."""
        stored = self._cell(problem_id, action_name)
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if count <= len(stored):
            index = torch.randperm(len(stored), generator=generator)[:count]
        else:
            index = torch.randint(len(stored), (count,), generator=generator)
        return stored[index]

    def sample_batch(
        self, problem_ids: Sequence[str], action_names: Sequence[str], generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """One reward per (problem, action) pair, float32 ``[B]``, each an independent uniform draw."""
        if len(problem_ids) != len(action_names):
            raise ValueError("problem_ids and action_names need one entry per row")
        return torch.stack([self.sample_rewards(p, a, 1, generator)[0] for p, a in zip(problem_ids, action_names)])
