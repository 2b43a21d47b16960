"""The batched incremental decode loop and the trajectory record it returns.

``decode`` prefills each *distinct* prompt once, fans the KV cache out to its rows (several samples
or several actions of one prompt share the prefill), then decodes one token per step for every
active row:

    features (hidden, entropy, max-prob, step, remaining budget) -> chooser -> action index per row
    -> per-row logit transforms -> sample -> stop rows at EOS / token budget -> drop finished rows
    from the batch and the cache, so the work shrinks as rows finish.

Without a chooser each row keeps one fixed action: the static-decoding baseline.

Speed. For Llama-architecture LMs the loop owns a ``RowKVCache`` (filled by one packed prefill of
every prompt on a CPU, in length groups elsewhere; written in place, reserved by chunks so that
attention reads one contiguous block, shrunk by moving only the rows that finish) and runs a lean
step without HF's per-call bookkeeping (``FrozenLM.step_with_row_cache``); other LMs use HF's
forward and ``DynamicCache``.
A step does only the work its actions need: all-greedy steps draw nothing; steps without top-k /
top-p / min-p rows skip those transforms and reuse the base softmax's exponentials when every
sampling row has T = 1. The per-step Python work does not grow with the number of rows.

Randomness: a row's draws are a counter-based hash of (its seed, the step, the stream)
(``actions.counter_uniform``): one uniform for its token (inverse CDF) and one handed to the
chooser for its action draw. A row's output therefore depends only on its prompt, its seed and its
actions — not on the batch it shares, on when other rows finish, or on how rows are spread across
workers: to the bit with ``ModelSpec.batch_invariant`` (the default; the row-cache path), else up to
the rounding of batched kernels.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import torch

from ..lm.models import FrozenLM, GraphedRowCacheState
from ..lm.prompt_cache import PromptCache
from .actions import (
    ACTION_STREAM,
    DEFAULT_TOKEN_BUDGET,
    TOKEN_STREAM,
    ActionSet,
    counter_uniform,
    inverse_cdf_sample,
    sampling_weights,
    transform_logits,
)
from .graph_sampling import GraphSampling, StepStats

__all__ = [
    "StepFeatures",
    "Chooser",
    "StepTokens",
    "StopCheck",
    "DecodeResult",
    "Trajectory",
    "decode",
    "row_seed",
    "base_entropy",
]


@dataclass(frozen=True)
class StepFeatures:
    """What a per-step chooser sees for the ``B`` rows still active at step ``step``."""

    hidden: torch.Tensor
    """``[B, hidden]`` float32 final hidden state of the last token (the state that produced the logits)."""
    entropy: torch.Tensor
    """``[B]`` entropy (nats) of the base next-token distribution ``softmax(logits)``."""
    max_prob: torch.Tensor
    """``[B]`` largest base next-token probability."""
    step: int
    """0-based index of the token about to be generated."""
    remaining_budget: torch.Tensor
    """``[B]`` long, tokens left including this one: ``b - t``."""
    rows: torch.Tensor
    """``[B]`` long, the global row index of each active row."""
    uniform: torch.Tensor
    """``[B]`` float32, one U[0, 1) draw per row from that row's own stream, for a reproducible action draw."""
    seeds: torch.Tensor | None = None
    """``[B]`` long, each row's seed: with ``step`` it keys any further per-row randomness of a chooser
    (e.g. the token policy's dropout masks in training), independent of the batch."""


Chooser = Callable[[StepFeatures], torch.Tensor]
"""Maps step features to an action index per row (long ``[B]``)."""


@dataclass(frozen=True)
class StepTokens:
    """What ``decode(..., on_step=...)`` reports after each step: the tokens just produced by the
    ``B`` rows that were active (all CPU tensors, for streaming them out while decoding goes on)."""

    step: int
    """0-based index of these tokens in their rows."""
    rows: torch.Tensor
    """``[B]`` long, the global row index of each row."""
    tokens: torch.Tensor
    """``[B]`` long, the token each row produced (an EOS token included)."""
    actions: torch.Tensor
    """``[B]`` long, the action index that produced it."""
    finished: torch.Tensor
    """``[B]`` bool, this token ends the row (EOS or token budget)."""
    at_eos: torch.Tensor
    """``[B]`` bool, this token is a stop token (a finished row that is not at EOS hit its budget)."""
    features: torch.Tensor | None = None
    """``[N, T, hidden]`` the hidden states recorded so far (global rows; steps <= ``step`` filled) when
    the decode records them (``record_features``), else None: read, never written."""


StepCallback = Callable[[StepTokens], "Sequence[int] | None"]
"""Called after every step; may return global row indices to stop now (e.g. a client went away)."""

StopCheck = Callable[[str], bool]
"""A per-row stop condition on the row's text so far (decoded without special tokens, as
``DecodeResult.texts``): True ends the row after the token that made it true, e.g. the task's
"holds a complete answer" (``tasks.Task.answer_complete``)."""


@dataclass
class Trajectory:
    """One generated row."""

    prompt_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    actions: list[int]
    entropies: list[float]
    max_probs: list[float]
    stop_reason: Literal["eos", "budget"]
    features: torch.Tensor | None = None  # [len, hidden] when recorded


@dataclass
class DecodeResult:
    """Batched record of a decode; step ``t`` of row ``i`` is valid for ``t < lengths[i]``."""

    prompt_of_row: torch.Tensor  # [N] long
    tokens: torch.Tensor  # [N, T] long, -1 past the end; includes the EOS token when one ended the row
    lengths: torch.Tensor  # [N] long
    actions: torch.Tensor  # [N, T] long, -1 past the end
    entropy: torch.Tensor  # [N, T] float
    max_prob: torch.Tensor  # [N, T] float
    stopped_at_eos: torch.Tensor  # [N] bool
    texts: list[str]  # decoded without special tokens
    token_budgets: torch.Tensor  # [N] long, the token budget of each row
    features: torch.Tensor | None = None  # [N, T, hidden] float when recorded
    prompts: list[list[int]] = field(default_factory=list)
    stopped_by_check: torch.Tensor | None = None  # [N] bool: ended by its stop check (None: no row had one)
    decodes: torch.Tensor | None = None
    """``[N]`` long, generated sequences the row cost (None: one each). A method that decodes more
    than once for an answer (a draft, then a re-decode) counts every pass here."""
    generated_tokens: torch.Tensor | None = None
    """``[N]`` long, tokens generated for the row over all its decodes, EOS included, padding and
    forced tokens excluded (None: ``lengths``)."""

    def row_costs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(decodes [N], generated tokens [N])`` that produced each row (see the fields)."""
        decodes = self.decodes if self.decodes is not None else torch.ones_like(self.lengths)
        tokens = self.generated_tokens if self.generated_tokens is not None else self.lengths
        return decodes, tokens

    def valid_mask(self) -> torch.Tensor:
        """``[N, T]`` True on generated steps."""
        steps = torch.arange(self.tokens.shape[1])
        return steps.unsqueeze(0) < self.lengths.unsqueeze(1)

    def trajectories(self) -> list[Trajectory]:
        out = []
        for i in range(len(self.texts)):
            n = int(self.lengths[i])
            p = int(self.prompt_of_row[i])
            out.append(
                Trajectory(
                    prompt_index=p,
                    prompt_ids=self.prompts[p] if self.prompts else [],
                    token_ids=self.tokens[i, :n].tolist(),
                    text=self.texts[i],
                    actions=self.actions[i, :n].tolist(),
                    entropies=self.entropy[i, :n].tolist(),
                    max_probs=self.max_prob[i, :n].tolist(),
                    stop_reason="eos" if self.stopped_at_eos[i] else "budget",
                    features=None if self.features is None else self.features[i, :n],
                )
            )
        return out


def row_seed(*keys) -> int:
    """A 63-bit seed from any printable keys, e.g. ``row_seed(seed, problem_id, sample_index)``.
    Stable across processes and machines (unlike ``hash``)."""
    digest = hashlib.blake2b("\x1f".join(map(str, keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def base_entropy(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Entropy and max probability ``[B]`` of ``softmax(logits)`` for ``[B, V]`` logits."""
    entropy, max_prob, _, _ = _base_stats(logits.float())
    return entropy, max_prob


def _base_stats(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Entropy ``[B]``, max probability ``[B]``, and, for reuse by the sampler, the shifted logits
    ``x - max x`` and their exponentials (unnormalised probabilities) ``[B, V]``, from float32 logits.

    ``H = log S - sum(w * x') / S`` with ``x' = x - max x``, ``w = exp(x')``, ``S = sum(w)``: the
    same value as ``-sum(p log p)`` in fewer passes over the vocabulary; ``max p = 1 / S``."""
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    weights = shifted.exp()
    total = weights.sum(-1)
    entropy = total.log() - (weights * shifted).nansum(-1) / total  # nansum: 0 * -inf on masked logits
    return entropy, total.reciprocal(), shifted, weights


class _Recorder:
    """Preallocated ``[N, T]`` buffers on the LM's device, written at the active rows' global indices
    (``rows``, on that device) each step and brought to the CPU once at the end (``cpu``): on a GPU a
    step then waits for nothing but the finished flags. Features (``[N, T, hidden]``, large) are kept
    on the CPU."""

    def __init__(self, n: int, steps: int, hidden: int, with_features: bool, device: torch.device):
        self.tokens = torch.full((n, steps), -1, dtype=torch.long, device=device)
        self.actions = torch.full((n, steps), -1, dtype=torch.long, device=device)
        self.entropy = torch.zeros(n, steps, device=device)
        self.max_prob = torch.zeros(n, steps, device=device)
        self.lengths = torch.zeros(n, dtype=torch.long, device=device)
        self.eos = torch.zeros(n, dtype=torch.bool, device=device)
        self.features = torch.zeros(n, steps, hidden) if with_features else None

    def write(self, rows, t, tokens, actions, entropy, max_prob, hidden) -> None:
        self.tokens[rows, t] = tokens
        self.actions[rows, t] = actions
        self.entropy[rows, t] = entropy
        self.max_prob[rows, t] = max_prob
        self.lengths[rows] = t + 1
        if self.features is not None:
            self.features[rows.cpu(), t] = hidden.float().cpu()

    def cpu(self) -> "_Recorder":
        for name in ("tokens", "actions", "entropy", "max_prob", "lengths", "eos"):
            setattr(self, name, getattr(self, name).cpu())
        return self


def _as_row_tensor(value, n: int, name: str) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.long)
    if t.dim() == 0:
        t = t.expand(n).clone()
    if t.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have one entry per row ({n}), got shape {tuple(t.shape)}")
    return t


def _decode_rows(prompts, action_set: ActionSet, prompt_of_row, row_actions, chooser, token_budget, row_seeds,
                 seed: int, stop_checks):
    """``decode``'s per-row inputs, checked: each row's prompt ``[N]``, budget ``[N]``, fixed action
    ``[N]`` (None with a chooser), seed and stop check (None when no row has one); a ValueError names
    what is wrong."""
    if prompt_of_row is None:
        rows_prompt = torch.arange(len(prompts))
    else:
        rows_prompt = torch.as_tensor(prompt_of_row, dtype=torch.long)
    n = len(rows_prompt)
    if n == 0:
        raise ValueError("nothing to decode: no rows")
    if rows_prompt.min() < 0 or rows_prompt.max() >= len(prompts):
        raise ValueError("prompt_of_row refers to a prompt that does not exist")
    if chooser is None and row_actions is None:
        raise ValueError("give either a fixed action per row (row_actions) or a chooser")
    budgets = _as_row_tensor(token_budget, n, "token_budget")
    if budgets.min() < 1:
        raise ValueError("token_budget must be >= 1")
    static_actions = None if chooser is not None else _as_row_tensor(row_actions, n, "row_actions")
    if static_actions is not None and (static_actions.min() < 0 or static_actions.max() >= len(action_set)):
        raise ValueError(f"row_actions must be in [0, {len(action_set)})")
    seeds = [row_seed(seed, i) for i in range(n)] if row_seeds is None else list(row_seeds)
    if len(seeds) != n:
        raise ValueError(f"got {len(seeds)} row seeds for {n} rows")
    checks = list(stop_checks) if stop_checks is not None and any(c is not None for c in stop_checks) else None
    if checks is not None and len(checks) != n:
        raise ValueError(f"got {len(checks)} stop checks for {n} rows")
    return rows_prompt, budgets, static_actions, seeds, checks


def _prefill(lm: FrozenLM, prompts: list, rows_prompt: torch.Tensor, steps: int, prompt_cache: PromptCache | None):
    """``lm.start_decode`` of only the prompts some row decodes (a caller's later rounds name a few of
    many), each fanned out to its rows: the first step's hidden states, logits and decode state."""
    used, fan_out = rows_prompt.unique(return_inverse=True)  # sorted prompt indices; row -> its place in them
    prefilled = prompts if len(used) == len(prompts) else [prompts[i] for i in used.tolist()]
    fan_out = None if torch.equal(fan_out, torch.arange(len(prefilled))) else fan_out
    return lm.start_decode(prefilled, fan_out, max_new_tokens=steps, prompt_cache=prompt_cache)


def _stop_checked(checks: list, active: torch.Tensor, done: torch.Tensor, rec: _Recorder, t: int, tokenizer,
                  stopped_by_check: torch.Tensor) -> torch.Tensor:
    """``done`` ``[B]`` with the rows whose stop check now holds added (marked in ``stopped_by_check``)."""
    hit = _check_rows(checks, active, ~done.cpu(), rec, t, tokenizer)
    stopped_by_check[hit] = True
    return done | torch.isin(active, hit).to(done.device)


def _shrink(state, sampling, done: torch.Tensor, tokens: torch.Tensor, active: torch.Tensor,
            active_dev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Drop the ``done`` rows from the decode state and the sampler; the remaining rows' tokens and
    global indices (CPU and device)."""
    order = state.drop(done)
    sampling.drop(order)
    return tokens[order], active[order.cpu()], active_dev[order]


def _asked(checks: list | None, on_step: StepCallback | None, step: StepTokens, rec: _Recorder, tokenizer,
           stopped_by_check: torch.Tensor | None) -> torch.Tensor:
    """``step.finished`` (``done`` ``[B]``, on the LM's device, as are the step's other tensors) with the
    rows whose stop check now holds of their text (marked in ``stopped_by_check``) and those ``on_step``
    asks to stop added."""
    done = step.finished
    if checks is not None:  # per-row text conditions: the rows whose text now holds what ends them
        done = _stop_checked(checks, step.rows, done, rec, step.step, tokenizer, stopped_by_check)
    if on_step is not None:
        done = _ask_on_step(on_step, StepTokens(step.step, step.rows, step.tokens.cpu(), step.actions.cpu(),
                                                done.cpu(), step.at_eos.cpu(), step.features), done)
    return done


def _ask_on_step(on_step: StepCallback, step: StepTokens, done: torch.Tensor) -> torch.Tensor:
    """``done`` ``[B]`` with the rows ``on_step`` asks to stop after this step added."""
    cancel = on_step(step)
    if cancel is None or len(cancel) == 0:
        return done
    return done | torch.isin(step.rows, torch.as_tensor(cancel, dtype=torch.long).reshape(-1)).to(done.device)


@torch.inference_mode()
def decode(
    lm: FrozenLM,
    prompts: Sequence[Sequence[int]],
    action_set: ActionSet,
    *,
    prompt_of_row: Sequence[int] | torch.Tensor | None = None,
    row_actions: int | Sequence[int] | torch.Tensor | None = None,
    chooser: Chooser | None = None,
    token_budget: int | Sequence[int] | torch.Tensor = DEFAULT_TOKEN_BUDGET,
    row_seeds: Sequence[int] | None = None,
    seed: int = 0,
    record_features: bool = False,
    stop_token_ids: Sequence[int] | None = None,
    on_step: StepCallback | None = None,
    stop_checks: Sequence[StopCheck | None] | None = None,
    prompt_cache: PromptCache | None = None,
) -> DecodeResult:
    """Decode every row; see the module docstring.

    Args:
        prompts: distinct prompts as token-id lists (each prompt some row decodes is prefilled once).
        prompt_of_row: for each output row, the index of its prompt (default: one row per prompt).
        row_actions: fixed action index per row (or one for all); ignored when ``chooser`` is given.
        chooser: per-step policy, ``StepFeatures -> action index [B]``.
        token_budget: max new tokens, one for all rows or one per row.
        row_seeds: one seed per row (default ``row_seed(seed, row)``).
        record_features: keep the hidden state of every step (``[N, T, hidden]``, for training).
        stop_token_ids: ids that end a row (default: the LM's EOS ids).
        on_step: called after each step with the tokens just produced (``StepTokens``), e.g. to
            stream them; it may return global row indices to stop now: those rows end after this
            step as if their budget ran out (``stopped_at_eos`` False), the others are unaffected.
        stop_checks: one per row (None: none): a row whose check holds of its text so far ends after
            that step (``stopped_by_check``): it stops at its first complete answer.
        prompt_cache: prompts prefilled by earlier calls, reused (the same tokens), and those prefilled
            now kept (``lm.prompt_cache``); on the row-cache path (Llama) only.
    """
    prompts = [list(p) for p in prompts]
    rows_prompt, budgets, static_actions, seeds, checks = _decode_rows(
        prompts, action_set, prompt_of_row, row_actions, chooser, token_budget, row_seeds, seed, stop_checks)
    n = len(rows_prompt)
    stopped_by_check = torch.zeros(n, dtype=torch.bool) if checks is not None else None
    device = lm.device
    seeds_dev = torch.tensor(seeds, dtype=torch.long, device=device)
    stop_ids = torch.tensor(list(stop_token_ids) if stop_token_ids is not None else lm.eos_token_ids, device=device)
    steps = int(budgets.max())
    rec = _Recorder(n, steps, lm.hidden_size, record_features, device)

    hidden, logits, state = _prefill(lm, prompts, rows_prompt, steps, prompt_cache)
    sampling = step_sampling(state, action_set, seeds_dev, chooser is not None)
    active = torch.arange(n)  # global row index of each batch row (CPU)
    active_dev = active.to(device)
    budgets_dev = budgets.to(device)
    static_actions_dev = None if static_actions is None else static_actions.to(device)

    for t in range(steps):
        stats = sampling.stats(t, logits)
        remaining = budgets_dev[active_dev] - t
        if chooser is not None:
            action_index = chooser(StepFeatures(hidden.float(), stats.entropy, stats.max_prob, t, remaining, active,
                                                stats.action_uniform, seeds_dev[active_dev])).to(device, torch.long)
        else:
            action_index = static_actions_dev[active_dev]
        tokens = sampling.sample(logits, stats, action_index)
        rec.write(active_dev, t, tokens, action_index, stats.entropy, stats.max_prob,
                  hidden if record_features else None)

        at_eos = torch.isin(tokens, stop_ids)
        done = at_eos | (remaining <= 1)
        rec.eos[active_dev] |= at_eos
        done = _asked(checks, on_step, StepTokens(t, active, tokens, action_index, done, at_eos, rec.features), rec,
                      lm.tokenizer, stopped_by_check)  # the rows a stop check or ``on_step`` ends too
        done_host = done.cpu()  # the step's one wait for the device
        if bool(done_host.all()):
            break
        if bool(done_host.any()):  # shrink the batch and the cache to the rows still running
            tokens, active, active_dev = _shrink(state, sampling, done, tokens, active, active_dev)
        sampling.before_step(t + 1)
        hidden, logits = state.step(tokens)

    return _result(lm, rec.cpu(), rows_prompt, budgets, prompts, stopped_by_check)


def _result(lm: FrozenLM, rec: _Recorder, rows_prompt: torch.Tensor, budgets: torch.Tensor, prompts: list,
            stopped_by_check: torch.Tensor | None) -> DecodeResult:
    """The finished decode as a ``DecodeResult`` (``rec`` on the CPU; texts without special tokens)."""
    n = len(rows_prompt)
    texts = lm.tokenizer.batch_decode(
        [rec.tokens[i, : rec.lengths[i]].tolist() for i in range(n)], skip_special_tokens=True
    )
    return DecodeResult(
        prompt_of_row=rows_prompt,
        tokens=rec.tokens,
        lengths=rec.lengths,
        actions=rec.actions,
        entropy=rec.entropy,
        max_prob=rec.max_prob,
        stopped_at_eos=rec.eos,
        texts=texts,
        token_budgets=budgets,
        features=rec.features,
        prompts=prompts,
        stopped_by_check=stopped_by_check,
    )


class EagerSampling:
    """The loop's statistics and sampler launched op by op (the CPU's path, and a GPU without CUDA
    graphs); ``GraphSampling`` is the same interface replayed from CUDA graphs. Doing only the work the
    step's rows need (``_sample_step``) asks the device about the rows: fine on a CPU."""

    def __init__(self, action_set: ActionSet, seeds: torch.Tensor, with_action_uniform: bool):
        self.action_set, self.seeds, self.with_action_uniform = action_set, seeds, with_action_uniform
        self.step = 0

    def stats(self, step: int, logits: torch.Tensor) -> StepStats:
        """``_base_stats`` of the live rows' float32 logits, and their chooser draws if a chooser needs them."""
        self.step = step
        entropy, max_prob, shifted, weights = _base_stats(logits)
        uniform = (counter_uniform(self.seeds, step, ACTION_STREAM, dtype=torch.float32)
                   if self.with_action_uniform else None)
        return StepStats(entropy, max_prob, shifted, weights, uniform, None)  # token draws: in _sample_step

    def sample(self, logits: torch.Tensor, stats: StepStats, action_index: torch.Tensor) -> torch.Tensor:
        return _sample_step(logits, stats.shifted, stats.weights, self.action_set, action_index, self.seeds, self.step)

    def drop(self, order: torch.Tensor) -> None:
        self.seeds = self.seeds[order]

    def before_step(self, next_step: int) -> None:
        pass


def step_sampling(state, action_set: ActionSet, seeds: torch.Tensor,
                  with_action_uniform: bool) -> "EagerSampling | GraphSampling":
    """The loop's statistics and sampler for ``state``: replayed from CUDA graphs when the LM's step is
    (``GraphedRowCacheState``), else launched op by op. ``seeds``: every row's seed, on the LM's device."""
    if isinstance(state, GraphedRowCacheState):
        return GraphSampling(state, action_set, seeds)
    return EagerSampling(action_set, seeds, with_action_uniform)


def _check_rows(checks: list, active: torch.Tensor, running: torch.Tensor, rec: _Recorder, t: int,
                tokenizer) -> torch.Tensor:
    """Global indices of the rows still ``running`` (``[B]`` bool) whose stop check is true of their
    text after step ``t`` (decoded as ``DecodeResult.texts`` will be)."""
    rows = [int(r) for r, run in zip(active.tolist(), running.tolist()) if run and checks[r] is not None]
    if not rows:
        return torch.zeros(0, dtype=torch.long)
    texts = tokenizer.batch_decode(rec.tokens[rows, : t + 1].tolist(), skip_special_tokens=True)  # rec: any device
    return torch.tensor([r for r, text in zip(rows, texts) if checks[r](text)], dtype=torch.long)


def _sample_step(logits: torch.Tensor, shifted: torch.Tensor, weights: torch.Tensor, action_set: ActionSet,
                 action_index: torch.Tensor, seeds: torch.Tensor, step: int) -> torch.Tensor:
    """Next token per row for one step, doing only the work the rows' actions need.

    ``shifted`` / ``weights``: ``logits - max`` and its exponentials from ``_base_stats`` (reused
    when every sampling row has T = 1 and no truncation); ``seeds``: the rows' seeds (``[B]`` long)."""
    params = action_set.params(action_index)
    if action_set.all_greedy or bool(params.greedy.all()):
        return logits.argmax(-1)
    use_top_k = action_set.uses_top_k and bool((params.top_k > 0).any())
    use_top_p = action_set.uses_top_p and bool((params.top_p < 1).any())
    use_min_p = action_set.uses_min_p and bool((params.min_p > 0).any())
    if use_top_k or use_top_p or use_min_p:
        transformed = transform_logits(logits, params, use_top_k=use_top_k, use_top_p=use_top_p, use_min_p=use_min_p)
        weights = sampling_weights(transformed)
    elif not bool((params.temperature == 1).all()):  # greedy rows carry T = 1
        weights = (shifted / params.temperature.unsqueeze(-1)).exp()  # exp((x - max x) / T)
    sampled = inverse_cdf_sample(weights, counter_uniform(seeds, step, TOKEN_STREAM))
    if action_set.uses_greedy and bool(params.greedy.any()):  # argmax is a full pass over [B, V]: only when needed
        sampled = torch.where(params.greedy, logits.argmax(-1), sampled)
    return sampled
