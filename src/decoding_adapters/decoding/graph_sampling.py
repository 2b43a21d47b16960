"""The decode loop's per-step work after the logits, recorded in CUDA graphs when the LM replays its
step from them (``lm.cuda_graphs``): the base distribution's statistics and the rows' uniform draws in
the step's own graph, and the sampler (transforms, inverse-CDF draw, greedy rows) in a second graph
per batch bucket, so that a step launches two graphs and a handful of small copies.

The chooser (a policy) runs between the two graphs, eagerly. What the loop computes does not change:
the same functions run on the same values (``loop._sample_step``'s arithmetic), with one difference:
a transform is skipped only when no action of the *set* uses it (``ActionSet.uses_*``), never
because no *row* needs it this step (deciding that needs the device's answer: a wait per step). A
row with the neutral value is unaffected either way; only rounding can tell the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .actions import (
    ACTION_STREAM,
    TOKEN_STREAM,
    ActionSet,
    SamplingParams,
    counter_uniform,
    inverse_cdf_sample,
    sampling_weights,
    transform_logits,
)

__all__ = ["GraphSampling", "StepStats", "step_stats", "sample_tokens"]


@dataclass(frozen=True)
class StepStats:
    """What a step's logits give the loop, ``[rows]`` each, or ``[rows, vocab]``."""

    entropy: torch.Tensor
    max_prob: torch.Tensor
    shifted: torch.Tensor
    """``logits - max logits``, float32."""
    weights: torch.Tensor
    """``exp(shifted)``: the base distribution, unnormalised."""
    action_uniform: torch.Tensor | None
    """float32: each row's draw for its chooser (``ACTION_STREAM``); None where no chooser needs it
    (``loop.EagerSampling``)."""
    token_uniform: torch.Tensor | None
    """float64: each row's draw for its token (``TOKEN_STREAM``); None where the sampler draws it itself
    (``loop.EagerSampling``)."""


def step_stats(logits: torch.Tensor, seeds: torch.Tensor, step: int | torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``StepStats`` fields, in order, for float32 logits ``[rows, vocab]`` and the rows' seeds at ``step``
    (as the loop's ``_base_stats`` and ``counter_uniform`` compute them)."""
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    weights = shifted.exp()
    total = weights.sum(-1)
    entropy = total.log() - (weights * shifted).nansum(-1) / total
    return (entropy, total.reciprocal(), shifted, weights, counter_uniform(seeds, step, ACTION_STREAM, torch.float32),
            counter_uniform(seeds, step, TOKEN_STREAM))


def sample_tokens(logits: torch.Tensor, stats: StepStats, params: SamplingParams,
                  action_set: ActionSet) -> torch.Tensor:
    """Next token per row (long ``[rows]``) with no wait for the device: the transforms the set's
    actions use, the inverse-CDF draw at each row's token uniform, the argmax on greedy rows."""
    if action_set.all_greedy:
        return logits.argmax(-1)
    if action_set.uses_top_k or action_set.uses_top_p or action_set.uses_min_p:
        weights = sampling_weights(transform_logits(logits, params, use_top_k=action_set.uses_top_k,
                                                    use_top_p=action_set.uses_top_p, use_min_p=action_set.uses_min_p))
    elif any(not a.is_greedy and a.temperature != 1 for a in action_set.actions):
        weights = (stats.shifted / params.temperature.unsqueeze(-1)).exp()  # T = 1 rows: exp(shifted), exactly
    else:
        weights = stats.weights
    sampled = inverse_cdf_sample(weights, stats.token_uniform)
    if action_set.uses_greedy:
        sampled = torch.where(params.greedy, logits.argmax(-1), sampled)
    return sampled


class GraphSampling:
    """The loop's statistics and sampler on a ``GraphedRowCacheState``: static inputs (the rows' seeds,
    the step, the action per row, the set's parameter tables) live in the LM's graph buffers; the
    statistics ride in the step's graph (its epilogue), the sampler has a graph per bucket."""

    def __init__(self, state, action_set: ActionSet, seeds: torch.Tensor):
        graphs = state.graphs
        self.state, self.graphs, self.action_set = state, graphs, action_set
        rows, k = graphs.rows, len(action_set)
        self.seeds = graphs.buffer("sampling.seeds", rows, torch.long)
        self.step = graphs.buffer("sampling.step", 1, torch.long)
        self.actions = graphs.buffer("sampling.actions", rows, torch.long)
        tables = action_set._on(graphs.lm.device)
        self.table = SamplingParams(*(graphs.buffer(f"sampling.{name}", k, getattr(tables, name).dtype)
                                      for name in ("temperature", "top_k", "top_p", "min_p", "greedy")))
        for name in ("temperature", "top_k", "top_p", "min_p", "greedy"):
            getattr(self.table, name)[:k].copy_(getattr(tables, name))
        self.seeds[: len(seeds)].copy_(seeds)
        self.live = len(seeds)
        self.kind = (action_set.all_greedy, action_set.uses_greedy, action_set.uses_top_k, action_set.uses_top_p,
                     action_set.uses_min_p, any(not a.is_greedy and a.temperature != 1 for a in action_set.actions))
        """The sampler's code path: a graph is recorded per bucket and kind."""
        state.epilogue = (("sampling.stats",), self._epilogue)
        self.from_graph = None  # the key of the step graph that made the current statistics

    def _epilogue(self, hidden, logits, rows: int) -> tuple[torch.Tensor, ...]:
        return step_stats(logits, self.seeds[:rows], self.step)

    def stats(self, step: int, logits: torch.Tensor) -> StepStats:
        """This step's statistics: from the step's graph, or (the first step, after the prefill) eagerly."""
        live = logits.shape[0]
        if step == 0:
            self.step.fill_(0)
            self.from_graph = None
            return StepStats(*step_stats(logits, self.seeds[:live], self.step))
        self.from_graph = self.graphs.last_step  # the step graph (its bucket and width) that made them
        return StepStats(*self.state.epilogue_outputs)

    def sample(self, logits: torch.Tensor, stats: StepStats, action_index: torch.Tensor) -> torch.Tensor:
        """Tokens for the live rows; replayed from the bucket's sampler graph after a graphed step."""
        live = action_index.shape[0]
        self.actions[:live].copy_(action_index)
        if self.from_graph is None:
            return sample_tokens(logits, stats, self._params(live), self.action_set)
        step_key = self.from_graph
        bucket = step_key[1]

        def run():
            _, full_logits, *fields = self.graphs.outputs(step_key)
            return (sample_tokens(full_logits, StepStats(*fields), self._params(bucket), self.action_set),)

        return self.graphs.replay(("sampling.sample", step_key, self.kind), run)[0][:live]

    def _params(self, rows: int) -> SamplingParams:
        index = self.actions[:rows]
        t = self.table
        return SamplingParams(t.temperature[index], t.top_k[index], t.top_p[index], t.min_p[index], t.greedy[index])

    def drop(self, order: torch.Tensor) -> None:
        """Rows left the batch: new slot ``i`` holds old slot ``order[i]`` (as the cache's ``drop``)."""
        self.seeds[: len(order)].copy_(self.seeds[: self.live][order])
        self.live = len(order)

    def before_step(self, next_step: int) -> None:
        """The step the next graphed step's statistics are for."""
        self.step.fill_(next_step)
