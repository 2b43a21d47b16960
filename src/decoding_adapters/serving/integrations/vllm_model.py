"""The full token adapter inside vLLM (V1 model runner: the CPU build and vLLM <= 0.32).

A token adapter observes the LM's final hidden state h_t at every step, and vLLM's logits
processors see logits only. Two pieces close the gap:

- :data:`ARCHITECTURE` (``DecodingAdapterLlamaForCausalLM``), a model class registered with vLLM's
  ``ModelRegistry``: vLLM's own Llama, whose ``compute_logits(hidden_states)`` — called with the
  final hidden states of exactly the rows being sampled, one row per request in batch order — also
  keeps those hidden states for the step (:func:`last_hidden_states`). Its logits are Llama's.
- :class:`TokenAdapterLogitsProcessor`, a V1 logits processor: for each request that asks for an
  adapter (``SamplingParams.extra_args["token_adapter"]``), it reads the row's hidden state, runs
  the policy on (h_t, entropy, remaining budget) as the project's loop does, takes the action, draws
  the token with that action's transforms, and hands the row to vLLM's sampler as a one-hot on that
  token (whatever the request's own sampling settings, the sampler then returns it).

Randomness is the loop's: the action and the token of step t come from the counter-based streams
keyed by the request's row seed (``counter_uniform(seed, t, ACTION_STREAM / TOKEN_STREAM)``), so a
request with the loop's row seed and budget follows the loop's row token for token, up to float
rounding of the two engines' logits. Requests without the key are untouched.

Use (the package's ``vllm.general_plugins`` entry point registers the architecture in every vLLM
process; :func:`register` does it by hand)::

    llm = LLM(model=<HF directory of the base model>, **engine_kwargs())
    sp = SamplingParams(max_tokens=128, extra_args={"token_adapter": {"path": "runs/tok", "seed": 0}})

Per-request options, ``extra_args["token_adapter"]``: an adapter directory or a dict ``{"path": dir,
"seed": row seed (default 0), "deterministic": False}`` (``deterministic=True`` takes the policy's
argmax). ``max_tokens`` is the token budget b (remaining = b - t). Only Llama-architecture base
models (the default SmolLM2 among them); no speculative decoding; model runner V2 is not supported
(its processors get another interface).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...decoding.actions import (
    ACTION_STREAM,
    TOKEN_STREAM,
    ActionSet,
    counter_uniform,
    inverse_cdf_sample,
    sampling_weights,
    transform_logits,
)
from ...decoding.loop import StepFeatures, base_entropy
from ...policies.networks import TokenPolicyChooser, load_adapter
from .vllm_processor import _BASES, apply_batch_update, request_options

__all__ = ["ARCHITECTURE", "EXTRA_ARGS_KEY", "TokenAdapterLogitsProcessor", "engine_kwargs", "last_hidden_states",
           "register"]

ARCHITECTURE = "DecodingAdapterLlamaForCausalLM"
EXTRA_ARGS_KEY = "token_adapter"

_HIDDEN: dict[str, torch.Tensor] = {}
"""The last ``compute_logits`` call's hidden states in this process (``"last"`` -> ``[rows, hidden]``)."""


def last_hidden_states() -> torch.Tensor | None:
    """The final hidden states of the rows sampled at the current step (None before any step)."""
    return _HIDDEN.get("last")


def _model_class():
    from vllm.model_executor.models.llama import LlamaForCausalLM

    class DecodingAdapterLlamaForCausalLM(LlamaForCausalLM):
        """vLLM's Llama whose ``compute_logits`` also keeps the sampled rows' hidden states."""

        def compute_logits(self, hidden_states: torch.Tensor, *args, **kwargs):
            _HIDDEN["last"] = hidden_states
            return super().compute_logits(hidden_states, *args, **kwargs)

    return DecodingAdapterLlamaForCausalLM


def register() -> None:
    """Register :data:`ARCHITECTURE` with vLLM's ``ModelRegistry`` (idempotent; the
    ``vllm.general_plugins`` entry point calls it in every vLLM process)."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, _model_class())


def engine_kwargs() -> dict[str, Any]:
    """``vllm.LLM`` arguments that serve a Llama base model with token adapters."""
    register()
    return {"hf_overrides": {"architectures": [ARCHITECTURE]}, "logits_processors": [TokenAdapterLogitsProcessor]}


@dataclass
class _Row:
    """One adapter request in the V1 runner's persistent batch."""

    path: str
    seed: int
    deterministic: bool
    budget: int
    output_ids: list


class _LoadedTokenAdapter:
    def __init__(self, path: str):
        policy, config = load_adapter(path)
        if not config.adapter_kind.per_token:
            raise ValueError(f"{path}: a {config.kind} adapter; the token adapter model serves token adapters")
        self.policy = policy.eval()
        self.actions = ActionSet(config.action_list)


class TokenAdapterLogitsProcessor(*_BASES):
    """V1 logits processor running a token adapter (hidden-state or entropy-only) per request, on the
    hidden states kept by :data:`ARCHITECTURE`'s ``compute_logits`` (see the module docstring).
    ``trace`` (None by default) can be set to a list to record every decision."""

    def __init__(self, vllm_config: Any, device: Any = None, is_pin_memory: bool = False, *_unused):
        if not isinstance(device, (torch.device, str)):
            raise RuntimeError("TokenAdapterLogitsProcessor needs vLLM's V1 model runner (the CPU build, "
                               "vLLM <= 0.32); model runner V2 is not supported")
        self.device = torch.device(device)
        self.rows: dict[int, _Row] = {}
        self.adapters: dict[str, _LoadedTokenAdapter] = {}
        self.trace: list[dict] | None = None

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        options = request_options(sampling_params, EXTRA_ARGS_KEY, deterministic=False)
        if options is not None and not (Path(options["path"]) / "adapter.json").is_file():
            raise ValueError(f"token adapter {options['path']!r}: no adapter.json there")

    def is_argmax_invariant(self) -> bool:
        return False  # it picks the token: greedy requests must see it too

    def update_state(self, batch_update) -> None:
        apply_batch_update(self.rows, batch_update, self._row)

    def _row(self, params, output_ids: list) -> _Row | None:
        options = request_options(params, EXTRA_ARGS_KEY, deterministic=False)
        if options is None:
            return None
        path = options["path"]
        if path not in self.adapters:
            self.adapters[path] = _LoadedTokenAdapter(path)
        budget = int(getattr(params, "max_tokens", None) or self.adapters[path].policy.config.token_budget)
        return _Row(path, int(options["seed"]), bool(options["deterministic"]), budget, output_ids)

    def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
        if not self.rows:
            return logits
        hidden = last_hidden_states()
        if hidden is None or hidden.shape[0] != logits.shape[0]:
            raise RuntimeError(
                f"token adapter requests need the {ARCHITECTURE} model (engine_kwargs()): no hidden states for "
                f"the {logits.shape[0]} rows being sampled"
            )
        groups: dict[tuple[str, int, bool], list[int]] = {}  # rows of one adapter at one step t
        for index, row in self.rows.items():
            if index < logits.shape[0]:
                groups.setdefault((row.path, len(row.output_ids), row.deterministic), []).append(index)
        for (path, t, deterministic), indices in groups.items():
            index_t = torch.tensor(sorted(indices), device=logits.device)
            rows = [self.rows[i] for i in index_t.tolist()]
            raw = logits[index_t].float()
            tokens, actions = self._decide(self.adapters[path], raw, hidden[index_t].float(), rows, t, deterministic)
            logits[index_t] = float("-inf")
            logits[index_t, tokens.to(logits.device)] = 0.0
            if self.trace is not None:
                self.trace.append({"path": path, "t": t, "seeds": [r.seed for r in rows], "actions": actions.tolist(),
                                   "tokens": tokens.tolist()})
        return logits

    @torch.no_grad()
    def _decide(self, adapter: _LoadedTokenAdapter, logits: torch.Tensor, hidden: torch.Tensor, rows: list[_Row],
                t: int, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Step t of the loop for these rows: the policy's action, then the token (``decode``'s draws)."""
        device = next(adapter.policy.parameters()).device
        logits, hidden = logits.to(device), hidden.to(device)
        seeds = torch.tensor([r.seed for r in rows], dtype=torch.long, device=device)
        remaining = torch.tensor([max(r.budget - t, 1) for r in rows], device=device)
        entropy, max_prob = base_entropy(logits)
        uniform = counter_uniform(seeds, t, ACTION_STREAM, dtype=torch.float32)
        features = StepFeatures(hidden, entropy, max_prob, t, remaining, torch.arange(len(rows)), uniform, seeds)
        action = TokenPolicyChooser(adapter.policy, deterministic=deterministic)(features).long()
        params = adapter.actions.params(action)
        weights = sampling_weights(transform_logits(logits, params))
        token = inverse_cdf_sample(weights, counter_uniform(seeds, t, TOKEN_STREAM))
        token = torch.where(params.greedy, logits.argmax(-1), token)
        return token, action
