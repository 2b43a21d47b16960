"""vLLM rollouts for static (sequence-level) actions: ``--backend vllm``, optional extra ``[vllm]``.

One ``SamplingParams`` per row (its action's temperature / top-k / top-p / min-p, ``max_tokens`` =
its token budget, ``seed`` = its row seed, ``n=1``), all rows submitted to one ``LLM.generate`` call
with the prompts as token ids. Rows that share a prompt share its prefill through vLLM's prefix
cache; a per-row seed keeps each row's output independent of which other rows are in the call.

What differs from the HF path (``HFRollouts``), on purpose or by necessity:

- **Static actions only.** A per-token chooser (the token-level adapter) needs the LM's hidden
  state at every step; vLLM's logits processors see logits only. ``run`` with a chooser raises.
- **Processor order.** vLLM applies min-p after temperature and *before* top-k/top-p; we (and HF)
  apply temperature -> top-k -> top-p -> min-p. Actions that combine min-p with top-k or top-p can
  therefore keep a slightly different token set here.
- **Different random streams and kernels.** A row's tokens are reproducible for a given seed *on
  vLLM*, but they are not the tokens the HF path draws for the same seed; greedy rows agree with
  HF greedy up to kernel numerics (bf16 vs float32 can flip near-ties).
- **No per-step statistics.** ``entropy`` and ``max_prob`` are zeros and ``features`` is None:
  vLLM reports no base-distribution statistics (use the HF path for analyses that need them).
  ``actions`` holds each row's fixed action on its generated steps.
- **Weights.** vLLM loads an HF directory: for the default ``smollm2`` (a GGUF) the converted
  safetensors directory from ``models`` is used (``~/.cache/decoding-adapters/gguf-*``). A
  ``float32`` spec runs in ``bfloat16`` unless ``dtype=`` says otherwise (vLLM's fast attention
  kernels want 16-bit weights).

Greedy actions map to ``temperature=0`` (vLLM then takes the argmax); ``top_k=None`` maps to -1
(off in every vLLM version), ``top_p=None`` to 1.0 and ``min_p=None`` to 0.0.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from .actions import ActionSet, DecodingAction
from .decoding import DecodeResult
from .models import ModelSpec
from .rollouts import RolloutRequest, Rollouts

__all__ = ["VLLMRollouts", "sampling_params_dict", "vllm_available"]

CHOOSER_ERROR = (
    "the vllm backend runs static (sequence-level) actions only: a token-level adapter needs the LM's hidden "
    "state at every step, and vLLM's logits processors see logits only; use --backend hf (or ray) for token-level "
    "adapters"
)


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def sampling_params_dict(action: DecodingAction, max_tokens: int, seed: int | None = None, n: int = 1) -> dict:
    """vLLM ``SamplingParams`` keyword arguments for one action (pure: no vLLM needed)."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    common = {"max_tokens": int(max_tokens), "seed": None if seed is None else int(seed), "n": int(n)}
    if action.is_greedy:
        return {"temperature": 0.0, "top_k": -1, "top_p": 1.0, "min_p": 0.0, **common}
    return {
        "temperature": float(action.temperature),
        "top_k": int(action.top_k) if action.top_k else -1,
        "top_p": float(action.top_p) if action.top_p is not None else 1.0,
        "min_p": float(action.min_p) if action.min_p else 0.0,
        **common,
    }


def _default_dtype(spec: ModelSpec) -> str:
    return "bfloat16" if spec.dtype in ("float32", "auto") else spec.dtype


class VLLMRollouts(Rollouts):
    """Static-action rollouts through ``vllm.LLM.generate`` (see the module docstring).

    Args:
        model_spec: the frozen LM (``smollm2``, a .gguf, an HF directory or hub id).
        action_set: the actions rows refer to by index.
        tokenizer: the HF tokenizer (optional): its EOS ids are passed as stop tokens, so rows stop
            where the HF path would.
        dtype: vLLM weights dtype (default: the spec's, float32 -> bfloat16).
        llm: an already built ``vllm.LLM`` (or a stand-in with the same ``generate``, for tests).
        sampling_params_cls: what turns a params dict into a request's params (default
            ``vllm.SamplingParams``; tests pass ``dict``).
        **engine_kwargs: passed to ``vllm.LLM`` (e.g. ``gpu_memory_utilization=0.5``).
    """

    def __init__(self, model_spec: ModelSpec, action_set: ActionSet, tokenizer=None, *, dtype: str | None = None,
                 llm: Any = None, sampling_params_cls: Callable[..., Any] | None = None, **engine_kwargs):
        self.model_spec, self.action_set = model_spec, action_set
        self.stop_token_ids = _eos_ids(tokenizer)
        if llm is None or sampling_params_cls is None:
            vllm = _import_vllm()
            sampling_params_cls = sampling_params_cls or vllm.SamplingParams
            if llm is None:
                from .models import _locate

                path = _locate(model_spec.name_or_path)
                llm = vllm.LLM(model=path, tokenizer=path, dtype=dtype or _default_dtype(model_spec), **engine_kwargs)
        self.llm, self.sampling_params_cls = llm, sampling_params_cls

    def params_for_rows(self, request: RolloutRequest) -> list[dict]:
        """One params dict per row (its action, budget and seed)."""
        budgets = request.budget_of(range(request.num_rows))
        budgets = budgets if isinstance(budgets, list) else [budgets] * request.num_rows
        out = []
        for action, budget, seed in zip(request.row_actions, budgets, request.row_seeds):
            d = sampling_params_dict(self.action_set.actions[action], budget, seed)
            if self.stop_token_ids:
                d["stop_token_ids"] = list(self.stop_token_ids)
            out.append(d)
        return out

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        if chooser is not None or request.row_actions is None:
            raise ValueError(CHOOSER_ERROR)
        if record_features:
            raise ValueError("the vllm backend records no hidden states (record_features=True needs --backend hf or ray)")
        if min(request.row_actions) < 0 or max(request.row_actions) >= len(self.action_set):
            raise ValueError(f"row_actions must be in [0, {len(self.action_set)})")
        params = [self.sampling_params_cls(**d) for d in self.params_for_rows(request)]
        prompts = [{"prompt_token_ids": list(request.prompts[p])} for p in request.prompt_of_row]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=bool(progress))
        return self._result(request, [o.outputs[0] for o in outputs])

    def _result(self, request: RolloutRequest, completions: Sequence[Any]) -> DecodeResult:
        n = request.num_rows
        budgets = torch.as_tensor(request.budget_of(range(n)), dtype=torch.long).expand(n).clone()
        rows = [self._tokens_of(c) for c in completions]
        steps = int(budgets.max())
        tokens = torch.full((n, steps), -1, dtype=torch.long)
        actions = torch.full((n, steps), -1, dtype=torch.long)
        for i, ids in enumerate(rows):
            ids = ids[:steps]
            tokens[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            actions[i, : len(ids)] = request.row_actions[i]
        return DecodeResult(
            prompt_of_row=torch.as_tensor(request.prompt_of_row, dtype=torch.long),
            tokens=tokens, lengths=torch.tensor([min(len(r), steps) for r in rows], dtype=torch.long), actions=actions,
            entropy=torch.zeros(n, steps), max_prob=torch.zeros(n, steps),  # not reported by vLLM
            stopped_at_eos=torch.tensor([c.finish_reason == "stop" for c in completions], dtype=torch.bool),
            texts=[c.text for c in completions], token_budgets=budgets, features=None, prompts=request.prompts,
        )

    def _tokens_of(self, completion) -> list[int]:
        """Generated ids including the stop token, as in ``DecodeResult`` (appended when vLLM left it out)."""
        ids = list(completion.token_ids)
        if completion.finish_reason == "stop":
            stop = completion.stop_reason if isinstance(completion.stop_reason, int) else None
            stop = stop if stop is not None else (self.stop_token_ids[0] if self.stop_token_ids else None)
            if stop is not None and (not ids or ids[-1] not in (stop, *self.stop_token_ids)):
                ids.append(stop)
        return ids

    def close(self) -> None:
        self.llm = None


def _eos_ids(tokenizer) -> list[int]:
    if tokenizer is None or getattr(tokenizer, "eos_token_id", None) is None:
        return []
    return [int(tokenizer.eos_token_id)]


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "the vllm backend needs vLLM and a CUDA GPU: pip install -e '.[vllm]' (or use --backend hf / ray)"
        ) from err
    return vllm
