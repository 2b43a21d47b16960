"""The entropy-only token adapter as a vLLM custom logits processor (vLLM >= 0.33, model runner V2).

    from vllm import LLM, SamplingParams
    llm = LLM(model=..., logits_processors=[EntropyAdapterLogitsProcessor])   # or installed: entry point
    params = SamplingParams(max_tokens=64, extra_args={"decoding_adapter": "runs/tok-entropy"})
    llm.generate(prompts, params)

Registration: pass the class (or
``"decoding_adapters.serving.integrations.vllm_processor:EntropyAdapterLogitsProcessor"``) in
``logits_processors=``; or install this package: its ``vllm.logits_processors`` entry point makes
every vLLM engine load it. Either way it only touches requests whose ``SamplingParams.extra_args``
holds ``"decoding_adapter"`` (``add_request`` declines the others, so they cost nothing).

Per-request options, ``extra_args["decoding_adapter"]``: an adapter directory, or a dict
``{"path": dir, "deterministic": True, "seed": 0}`` (``deterministic=False`` draws the action from
pi; the draws come from one generator per request slot, seeded by ``seed``).
``validate_params`` rejects, at admission, an adapter that is not an entropy-only token adapter and
non-neutral sampling fields: vLLM applies its own temperature / min-p / top-k / top-p *after*
custom processors, so the request must leave them off (temperature 1, top_k -1 or 0, top_p 1,
min_p 0) for the adapter's action to be the one that is sampled.

What happens per step, for the rows of adapter requests (``entropy_adapter_step``, a pure
function of the logits that the unit tests compare with our own ``TokenPolicyChooser``):
entropy of ``softmax(logits)`` and the remaining budget ``max_tokens - t`` (t = tokens generated so
far: ``pos + 1 - prompt_len``) -> pi(a | x_t) -> action -> that action's transforms in HF order
(temperature -> top-k -> top-p -> min-p), greedy rows one-hot on their argmax. vLLM then samples
from the result.

**Only the entropy-only adapter.** The full token adapter observes the LM's final hidden state
h_t, and vLLM's logits processors receive logits only. The one route that exists is future work:
register a model class (vLLM's ``ModelRegistry``) wrapping the base architecture whose
``compute_logits(hidden_states)`` — which sees the final hidden states of exactly the rows being
sampled — also runs the policy and stashes the chosen action per row for a processor like this one
to apply. Until then, use the transformers integration (``adapter.logits_processor(model)``) or this
project's decode loop for hidden-state adapters.

Older vLLM (the V1 model runner, before 0.33) loads the same entry-point group with another
interface; there the processor is inert (it changes no logits), so installing this package never
breaks an older engine. Not supported: speculative decoding (draft rows would each take a decision on a guessed
prefix); preemption with recomputation is fine (the step count comes from positions, not from a
counter).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ...decoding.loop import base_entropy
from ...policies.networks import TokenPolicy, categorical_from_uniform, load_adapter
from .rows import ActionTable

__all__ = ["EntropyAdapterLogitsProcessor", "entropy_adapter_step", "EXTRA_ARGS_KEY", "vllm_processor_available"]

EXTRA_ARGS_KEY = "decoding_adapter"

try:  # the real base class when vLLM (model runner V2) is installed; a plain object otherwise (CPU tests)
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as _VLLMLogitsProcessor
except ImportError:  # vLLM absent or too old for model runner V2
    _VLLMLogitsProcessor = object


def vllm_processor_available() -> bool:
    """Whether vLLM's V2 ``LogitsProcessor`` interface is importable (so the processor can be registered)."""
    return _VLLMLogitsProcessor is not object


@torch.no_grad()
def entropy_adapter_step(
    logits: torch.Tensor,
    policy: TokenPolicy,
    table: ActionTable,
    remaining: torch.Tensor,
    uniform: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decision of an entropy-only token adapter, as a pure function of the logits.

    Args:
        logits: ``[R, V]`` float raw logits of the adapter's rows (before any sampling transform).
        policy: the entropy-only ``TokenPolicy`` (``features == "entropy"``), in eval mode.
        table: the adapter's actions as per-row parameters.
        remaining: ``[R]`` tokens left including this one (b - t), >= 1.
        uniform: ``[R]`` U(0, 1) draws for sampling the action; None (or NaN in a row) takes the argmax.

    Returns:
        ``(transformed logits [R, V], action index [R])``; the input is not modified.
    """
    if policy.config.features != "entropy":
        raise ValueError("vLLM processors see logits only: only an entropy-only token adapter can run there")
    entropy, _ = base_entropy(logits)
    obs = policy.observation(entropy.new_zeros(entropy.shape[0], 0), entropy, remaining)
    probs = policy.probs(obs)
    action = probs.argmax(-1)
    if uniform is not None:  # NaN entries keep the argmax (deterministic requests batched with sampling ones)
        sampled = categorical_from_uniform(probs, uniform.to(probs.device).nan_to_num(0.5))
        action = torch.where(uniform.to(probs.device).isnan(), action, sampled)
    return table.transform(logits, action), action


class _LoadedAdapter:
    """An entropy-only adapter's policy and action table on the processor's device."""

    def __init__(self, path: str, device):
        policy, config = load_adapter(path)
        _check_entropy_adapter(config.kind, config.policy, path)
        self.policy = policy.to(device).eval()
        self.table = ActionTable(config.action_list, device)


def _options(sampling_params) -> dict | None:
    """The request's adapter options as a dict with ``path``, or None when it asks for none."""
    extra = getattr(sampling_params, "extra_args", None) or {}
    value = extra.get(EXTRA_ARGS_KEY)
    if value is None:
        return None
    if isinstance(value, (str, Path)):
        value = {"path": str(value)}
    if not isinstance(value, dict) or not isinstance(value.get("path"), (str, Path)):
        raise ValueError(
            f"extra_args[{EXTRA_ARGS_KEY!r}] must be an adapter directory or a dict with 'path', got {value!r}"
        )
    unknown = set(value) - {"path", "deterministic", "seed"}
    if unknown:
        raise ValueError(
            f"extra_args[{EXTRA_ARGS_KEY!r}] has unknown keys {sorted(unknown)}; accepted: path, deterministic, seed"
        )
    return {"deterministic": True, "seed": 0, **value, "path": str(value["path"])}


def _check_entropy_adapter(kind: str, policy: dict, path: str) -> None:
    if kind != "token" or policy.get("features", "hidden") != "entropy":
        raise ValueError(
            f"{path}: vLLM processors see logits only, so only an entropy-only token adapter runs there "
            f"(this one is a {kind} adapter with features={policy.get('features', 'n/a')!r}); use the "
            f"transformers integration or `decoding-adapters generate` for it"
        )


def _check_neutral_sampling(sp) -> None:
    """vLLM applies the request's own transforms after ours: they must all be off."""
    top_k = getattr(sp, "top_k", -1)
    neutral = (
        getattr(sp, "temperature", 1.0) == 1.0
        and top_k in (-1, 0, None)
        and getattr(sp, "top_p", 1.0) == 1.0
        and not getattr(sp, "min_p", 0.0)
    )
    if not neutral:
        raise ValueError(
            "a decoding-adapter request must leave vLLM's own sampling off (temperature=1.0, top_k=-1, "
            "top_p=1.0, min_p=0.0): the adapter picks and applies those per token"
        )


class EntropyAdapterLogitsProcessor(_VLLMLogitsProcessor):
    """vLLM (model runner V2) logits processor running an entropy-only token adapter per request.

    Per-slot state: which adapter (loaded once per directory and shared), its budget
    (``max_tokens``), determinism and action generator. See the module docstring."""

    def __init__(self, vllm_config: Any, req_states: Any = None, *_unused):
        self.req_states = req_states
        self.device = torch.device(
            getattr(req_states, "device", None) or ("cuda" if torch.cuda.is_available() else "cpu")
        )
        max_reqs = getattr(req_states, "max_num_reqs", None) or getattr(
            getattr(vllm_config, "scheduler_config", None), "max_num_seqs", 1024
        )
        self.adapters: dict[str, _LoadedAdapter] = {}
        self.slot_adapter: list[str | None] = [None] * int(max_reqs)
        self.slot_options: list[dict | None] = [None] * int(max_reqs)
        self.slot_generator: list[torch.Generator | None] = [None] * int(max_reqs)
        self.slot_budget = torch.zeros(int(max_reqs), dtype=torch.long, device=self.device)

    # ---- vLLM interface ------------------------------------------------------------------------
    @classmethod
    def validate_params(cls, sampling_params) -> None:
        options = _options(sampling_params)
        if options is None:
            return
        config_path = Path(options["path"]) / "adapter.json"
        if not config_path.is_file():
            raise ValueError(f"decoding adapter {options['path']!r}: no adapter.json there")
        config = json.loads(config_path.read_text())
        _check_entropy_adapter(config.get("kind"), config.get("policy", {}), options["path"])
        _check_neutral_sampling(sampling_params)

    def is_argmax_invariant(self) -> bool:  # older V2 containers ask; our actions change the argmax (sampling)
        return False

    def add_request(self, req_idx: int, sampling_params) -> bool:
        options = _options(sampling_params)
        self.slot_adapter[req_idx] = self.slot_options[req_idx] = self.slot_generator[req_idx] = None
        if options is None:
            return False
        path = options["path"]
        if path not in self.adapters:
            self.adapters[path] = _LoadedAdapter(path, self.device)
        self.slot_adapter[req_idx], self.slot_options[req_idx] = path, options
        self.slot_budget[req_idx] = int(
            getattr(sampling_params, "max_tokens", None) or self.adapters[path].policy.config.token_budget
        )
        if not options["deterministic"]:
            self.slot_generator[req_idx] = torch.Generator(self.device).manual_seed(int(options["seed"]))
        return True

    def apply_staged_writes(self) -> None:
        pass

    def update_state(self, batch_update) -> None:
        """vLLM's older (V1 runner) interface, which loads the same entry-point group: stay inert there."""

    def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
        """Transform, in place, the rows of requests that use an adapter (one row per request).
        Called without a context (the V1 runner's ``apply(logits)``) it changes nothing."""
        if ctx is None:
            return logits
        slots_np = ctx.idx_mapping_np
        if logits.shape[0] != len(slots_np):
            raise RuntimeError("the decoding-adapter processor does not support speculative decoding")
        by_adapter: dict[str, list[int]] = {}
        for row, slot in enumerate(slots_np.tolist()):
            if self.slot_adapter[slot] is not None:
                by_adapter.setdefault(self.slot_adapter[slot], []).append(row)
        for path, rows in by_adapter.items():
            rows_t = torch.tensor(rows, device=logits.device)
            slots = ctx.idx_mapping[rows_t].long()
            remaining = (self.slot_budget[slots] - self._generated(ctx, rows_t, slots)).clamp(min=1)
            uniform = self._uniform([int(slots_np[r]) for r in rows], logits.device)
            adapter = self.adapters[path]
            logits[rows_t], _ = entropy_adapter_step(logits[rows_t], adapter.policy, adapter.table, remaining, uniform)
        return logits

    # ---- helpers -------------------------------------------------------------------------------
    def _generated(self, ctx, rows: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Tokens generated so far per row: position of the next token minus the prompt length."""
        prompt_len = getattr(self.req_states, "prompt_len", None)
        if prompt_len is None:
            return torch.zeros_like(slots)
        lengths = getattr(prompt_len, "gpu", None)
        if lengths is None:
            lengths = torch.as_tensor(prompt_len.np)
        return ctx.pos[rows].long() + 1 - lengths.to(slots.device)[slots].long()

    def _uniform(self, slots: list[int], device) -> torch.Tensor | None:
        generators = [self.slot_generator[s] for s in slots]
        if all(g is None for g in generators):
            return None
        nan = torch.tensor(float("nan"))
        draws = [torch.rand((), generator=g, device=g.device).cpu() if g is not None else nan for g in generators]
        return torch.stack([d.to(device) for d in draws])
