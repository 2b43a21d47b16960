"""The entropy-only token adapter as a vLLM custom logits processor (both of vLLM's interfaces: the
V1 model runner's, which the CPU build and vLLM <= 0.32 use, and model runner V2's).

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
far: ``pos + 1 - prompt_len`` in model runner V2, the length of the request's output list in V1)
-> pi(a | x_t) -> action -> that action's transforms in HF order (temperature -> top-k -> top-p ->
min-p), greedy rows one-hot on their argmax. vLLM then samples from the result.

Two interfaces, one class. vLLM loads the ``vllm.logits_processors`` entry-point group into either
runner. The V1 runner builds it as ``cls(vllm_config, device, is_pin_memory)``, reports batch changes
through ``update_state(BatchUpdate)`` (rows added with a live reference to their output tokens,
removed, moved or swapped) and calls ``apply(logits)`` with one row per batch index. Model runner V2
builds it as ``cls(vllm_config, req_states)``, calls ``add_request(slot, params)`` and
``apply(logits, ctx)`` with the step's row -> slot mapping. The class subclasses whichever base
classes the installed vLLM has. ``trace`` (None by default) can be set to a list to record every
decision made in a V1 engine (the vLLM lane's tests read it).

**Only the entropy-only adapter.** The full token adapter observes the LM's final hidden state
h_t, and vLLM's logits processors receive logits only. The one route that exists is future work:
register a model class (vLLM's ``ModelRegistry``) wrapping the base architecture whose
``compute_logits(hidden_states)`` — which sees the final hidden states of exactly the rows being
sampled — also runs the policy and stashes the chosen action per row for a processor like this one
to apply. Until then, use the transformers integration (``adapter.logits_processor(model)``) or this
project's decode loop for hidden-state adapters.

Not supported: speculative decoding (draft rows would each take a decision on a guessed prefix);
preemption with recomputation is fine (the step count comes from positions or the output list, not
from a counter).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ...decoding.loop import base_entropy
from ...policies.kinds import adapter_kind, kind_names
from ...policies.networks import TokenPolicy, categorical_from_uniform, load_adapter
from .rows import ActionTable

__all__ = ["EntropyAdapterLogitsProcessor", "apply_batch_update", "entropy_adapter_step", "EXTRA_ARGS_KEY",
           "vllm_processor_available"]

EXTRA_ARGS_KEY = "decoding_adapter"

_BASES: list[type] = []
try:  # model runner V2's base class
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as _V2LogitsProcessor

    _BASES.append(_V2LogitsProcessor)
except ImportError:  # vLLM absent or without model runner V2
    pass
try:  # the V1 runner's base class (its loader requires a subclass for classes passed by name)
    from vllm.v1.sample.logits_processor import LogitsProcessor as _V1LogitsProcessor

    _BASES.append(_V1LogitsProcessor)
except ImportError:  # vLLM absent
    pass
_BASES = _BASES or [object]


def vllm_processor_available() -> bool:
    """Whether one of vLLM's ``LogitsProcessor`` interfaces is importable (so the processor can be registered)."""
    return _BASES != [object]


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


def request_options(sampling_params, key: str = EXTRA_ARGS_KEY, deterministic: bool = True) -> dict | None:
    """The request's adapter options under ``extra_args[key]`` as a dict with ``path``, ``seed``
    (default 0) and ``deterministic`` (default ``deterministic``), or None when it asks for none."""
    extra = getattr(sampling_params, "extra_args", None) or {}
    value = extra.get(key)
    if value is None:
        return None
    if isinstance(value, (str, Path)):
        value = {"path": str(value)}
    if not isinstance(value, dict) or not isinstance(value.get("path"), (str, Path)):
        raise ValueError(f"extra_args[{key!r}] must be an adapter directory or a dict with 'path', got {value!r}")
    unknown = set(value) - {"path", "deterministic", "seed"}
    if unknown:
        raise ValueError(f"extra_args[{key!r}] has unknown keys {sorted(unknown)}; accepted: path, deterministic, seed")
    return {"deterministic": deterministic, "seed": 0, **value, "path": str(value["path"])}


def _check_entropy_adapter(kind: str | None, policy: dict, path: str) -> None:
    """Only a per-token adapter that reads no hidden state (the entropy-only one) runs on logits alone."""
    if not (kind in kind_names() and adapter_kind(kind).runs_on_logits(policy)):
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


def apply_batch_update(rows: dict[int, Any], batch_update, make_row: Callable[[Any, list], Any]) -> None:
    """Apply a V1 runner ``BatchUpdate`` to ``rows`` (batch index -> per-request state), in vLLM's
    order: removed, added, moved. ``make_row(params, output_ids)`` builds a new request's state, or
    None for a request the processor leaves alone; ``output_ids`` is vLLM's live list of the
    request's generated tokens."""
    if batch_update is None:
        return
    for index in batch_update.removed:
        rows.pop(index, None)
    for added in batch_update.added:
        # (index, params, prompt ids, output ids); vLLM before 0.11 had no prompt ids
        index, params, output_ids = added[0], added[1], added[-1]
        row = make_row(params, output_ids)
        if row is None:
            rows.pop(index, None)
        else:
            rows[index] = row
    for first, second, direction in batch_update.moved:
        a, b = rows.pop(first, None), rows.pop(second, None)
        if getattr(direction, "name", str(direction)) == "SWAP":
            a, b = b, a
        else:  # one-way: first's request now sits at second, first is empty
            a, b = None, a
        for index, row in ((first, a), (second, b)):
            if row is not None:
                rows[index] = row


@dataclass
class _V1Row:
    """One adapter request in the V1 runner's persistent batch."""

    path: str
    options: dict
    budget: int
    output_ids: list
    """vLLM's live list of the request's generated tokens (its length is t)."""
    generator: torch.Generator | None


class EntropyAdapterLogitsProcessor(*_BASES):
    """vLLM logits processor running an entropy-only token adapter per request (both runners).

    Per-slot (V2) or per-batch-row (V1) state: which adapter (loaded once per directory and shared),
    its budget (``max_tokens``), determinism and action generator. See the module docstring."""

    def __init__(self, vllm_config: Any, req_states: Any = None, *_unused):
        # V1 passes (vllm_config, device, is_pin_memory); V2 passes (vllm_config, req_states)
        self.v1 = isinstance(req_states, (torch.device, str))
        self.req_states = None if self.v1 else req_states
        device = req_states if self.v1 else getattr(req_states, "device", None)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.v1_rows: dict[int, _V1Row] = {}
        self.trace: list[dict] | None = None
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
        options = request_options(sampling_params)
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
        options = request_options(sampling_params)
        self.slot_adapter[req_idx] = self.slot_options[req_idx] = self.slot_generator[req_idx] = None
        if options is None:
            return False
        path = self._adapter(options)
        self.slot_adapter[req_idx], self.slot_options[req_idx] = path, options
        self.slot_budget[req_idx] = self._budget(sampling_params, path)
        self.slot_generator[req_idx] = self._generator(options)
        return True

    def apply_staged_writes(self) -> None:
        pass

    def update_state(self, batch_update) -> None:
        """The V1 runner's batch changes (see :func:`apply_batch_update`)."""
        apply_batch_update(self.v1_rows, batch_update, self._v1_row)

    def _v1_row(self, params, output_ids: list) -> _V1Row | None:
        options = request_options(params)
        if options is None:
            return None
        path = self._adapter(options)
        return _V1Row(path, options, self._budget(params, path), output_ids, self._generator(options))

    def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
        """Transform, in place, the rows of requests that use an adapter (one row per request).
        Without a context it is the V1 runner's call: row i is batch index i."""
        if ctx is None:
            return self._apply_v1(logits)
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
    def _adapter(self, options: dict) -> str:
        path = options["path"]
        if path not in self.adapters:
            self.adapters[path] = _LoadedAdapter(path, self.device)
        return path

    def _budget(self, sampling_params, path: str) -> int:
        return int(getattr(sampling_params, "max_tokens", None) or self.adapters[path].policy.config.token_budget)

    def _generator(self, options: dict) -> torch.Generator | None:
        if options["deterministic"]:
            return None
        return torch.Generator(self.device).manual_seed(int(options["seed"]))

    def _apply_v1(self, logits: torch.Tensor) -> torch.Tensor:
        by_adapter: dict[str, list[int]] = {}
        for index, row in self.v1_rows.items():
            if index < logits.shape[0]:
                by_adapter.setdefault(row.path, []).append(index)
        for path, indices in by_adapter.items():
            indices.sort()
            rows = [self.v1_rows[i] for i in indices]
            index_t = torch.tensor(indices, device=logits.device)
            remaining = torch.tensor([max(r.budget - len(r.output_ids), 1) for r in rows], device=logits.device)
            uniform = self._uniform_of([r.generator for r in rows], logits.device)
            adapter = self.adapters[path]
            raw = logits[index_t]
            logits[index_t], action = entropy_adapter_step(raw, adapter.policy, adapter.table, remaining, uniform)
            if self.trace is not None:
                self.trace.append({
                    "path": path, "seeds": [int(r.options["seed"]) for r in rows],
                    "deterministic": [bool(r.options["deterministic"]) for r in rows],
                    "generated": [len(r.output_ids) for r in rows], "logits": raw.detach().cpu(),
                    "remaining": remaining.cpu(), "uniform": None if uniform is None else uniform.cpu(),
                    "action": action.cpu(),
                })
        return logits

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
        return self._uniform_of([self.slot_generator[s] for s in slots], device)

    @staticmethod
    def _uniform_of(generators: list[torch.Generator | None], device) -> torch.Tensor | None:
        """One U(0, 1) draw per row from its request's generator; NaN for deterministic rows."""
        if all(g is None for g in generators):
            return None
        nan = torch.tensor(float("nan"))
        draws = [torch.rand((), generator=g, device=g.device).cpu() if g is not None else nan for g in generators]
        return torch.stack([d.to(device) for d in draws])
