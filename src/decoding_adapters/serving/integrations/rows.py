"""Per-row action transforms shared by the engine integrations (transformers and vLLM processors).

The engine samples from whatever logits a processor returns, so an action is applied by
transforming the logits row-wise: temperature -> top-k -> top-p -> min-p with the project's
per-row transforms (HF order), and a greedy row becomes one-hot on its argmax.
"""

from __future__ import annotations

import torch

from ...decoding.actions import apply_min_p, apply_temperature, apply_top_k, apply_top_p

__all__ = ["ActionTable", "greedy_one_hot"]


def greedy_one_hot(scores: torch.Tensor) -> torch.Tensor:
    """``[B, V]`` logits that are 0 at each row's argmax and -inf elsewhere: sampling them is greedy."""
    out = torch.full_like(scores, float("-inf"))
    return out.scatter(-1, scores.argmax(-1, keepdim=True), 0.0)


class ActionTable:
    """The action set's parameters as ``[K]`` tensors, gathered per row (neutral value = off)."""

    def __init__(self, actions, device):
        self.temperature = torch.tensor([1.0 if a.is_greedy else a.temperature for a in actions], device=device)
        self.top_k = torch.tensor([a.top_k or 0 for a in actions], dtype=torch.long, device=device)
        self.top_p = torch.tensor([a.top_p or 1.0 for a in actions], device=device)
        self.min_p = torch.tensor([a.min_p or 0.0 for a in actions], device=device)
        self.greedy = torch.tensor([a.is_greedy for a in actions], device=device)

    def transform(self, scores: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Row i gets action ``action[i]``'s transforms; greedy rows become one-hot on their argmax."""
        greedy = self.greedy[action]
        if bool(greedy.all()):
            return greedy_one_hot(scores)
        top_k, top_p, min_p = self.top_k[action], self.top_p[action], self.min_p[action]
        out = apply_temperature(scores.float(), self.temperature[action])
        if bool((top_k > 0).any()):
            out = apply_top_k(out, top_k)
        if bool((top_p < 1).any()):
            out = apply_top_p(out, top_p)
        if bool((min_p > 0).any()):
            out = apply_min_p(out, min_p)
        return torch.where(greedy.unsqueeze(-1), greedy_one_hot(scores.float()), out)
