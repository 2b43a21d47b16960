"""The fused one-token Llama step of the CUDA-graph path: fewer, larger kernels per layer.

The eager lean step (``FrozenLM.step_with_row_cache``, the CPU's path) issues about 45 kernels per
layer on a GPU: three projections for q, k and v, two for gate and up, RMSNorm in 7 elementwise
kernels, rotary in ~12, attention over every reserved column. Replayed from a CUDA graph the launch
cost is gone, but each kernel still takes a few microseconds. This step does the same arithmetic in
fewer kernels, as gpt-fast and vLLM do:

- **Concatenated projections.** q/k/v are one matmul against ``[q_out + 2 kv_out, hidden]`` and
  gate/up one against ``[2 intermediate, hidden]`` (``fuse_projections``, once per LM). The
  modules' own weights are then rebound as row views of the concatenated tensors, so no memory is
  added and HF's forward (the prefill, ``generate()``) reads the same numbers. Each output column is
  the same dot product as before; only the kernel that computes it changes.
- **Rotary for q and k together**, one pass over both heads' halves.
- **Attention over the filled columns.** A row's token at position ``p`` lives in column ``p`` (the
  CPU's ``RowKVCache`` layout, so a row's keys do not move with its batch mates); a step attends
  over the first ``width`` columns only (``width`` a bucket of the longest row's length,
  ``attended_width``), masked per row by its position, not over every reserved column.
- **``torch.compile`` before capture** (``compiled_step``): Inductor fuses the residual adds with
  RMSNorm, the rotary arithmetic and the other elementwise work into a few Triton kernels; the caller
  (``lm.cuda_graphs``) then records the compiled step in its own CUDA graphs, as gpt-fast compiles
  the one-token step and replays it. Mode ``default`` (no CUDA graphs of Inductor's own, which would
  nest inside ours), ``dynamic=True`` (one compilation for every batch bucket and width).

``fused_step`` also runs eagerly on the CPU (the tests compare it with the eager lean step token for
token); the CPU's own decode never takes it.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch
import torch.nn.functional as F

__all__ = ["WIDTH_ROUNDING", "attended_width", "fuse_projections", "fused_step", "compiled_step", "StepCache",
           "LlamaLike", "eager_attention"]

WIDTH_ROUNDING = 64
"""The attended width is the longest row's length rounded up to this: a graph is captured per (batch
bucket, width), so coarser widths mean fewer graphs and more masked columns read per step."""


def attended_width(longest: int, columns: int) -> int:
    """Columns a step attends over when the longest live row fills ``longest`` columns (the token fed
    now included): ``longest`` rounded up to :data:`WIDTH_ROUNDING`, at most ``columns``."""
    if longest < 1:
        raise ValueError(f"longest must be >= 1, got {longest}")
    return min(columns, -(-longest // WIDTH_ROUNDING) * WIDTH_ROUNDING)


class LlamaLike(Protocol):
    """What the fused step needs of the LM (``models.FrozenLM`` has it): the HF model, its decoder
    (``model.model``) and LM head, and the linear kernel every matmul goes through."""

    model: torch.nn.Module
    decoder: torch.nn.Module
    lm_head: torch.nn.Module
    linear: Callable


class StepCache(Protocol):
    """What the fused step needs of a KV cache: ``write`` stores one step's keys and values
    ``[rows, kv_heads, head_dim]`` of ``layer`` at each row's column ``positions`` and returns that
    layer's keys and values over the first ``width`` columns, ``[rows, kv_heads, width, head_dim]``."""

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor,
              width: int) -> tuple[torch.Tensor, torch.Tensor]: ...


def _concatenate(modules) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for ``modules`` (``nn.Linear``), their rows stacked in order; each
    module's weight and bias rebound as a view of its rows, so the old tensors are freed."""
    weight = torch.cat([m.weight for m in modules])
    has_bias = [m.bias is not None for m in modules]
    if any(has_bias) and not all(has_bias):
        raise ValueError("fused projections need a bias on every part or on none")
    bias = torch.cat([m.bias for m in modules]) if all(has_bias) else None
    start = 0
    for m in modules:
        rows = m.weight.shape[0]
        m.weight = torch.nn.Parameter(weight[start:start + rows], requires_grad=False)
        if bias is not None:
            m.bias = torch.nn.Parameter(bias[start:start + rows], requires_grad=False)
        start += rows
    return weight, bias


def _still_fused(modules, fused: tuple[torch.Tensor, torch.Tensor | None] | None) -> bool:
    """Whether ``fused`` (weight, bias) is what ``modules`` hold now: each module's weight (and bias) the
    view of its rows. Not so once the model was moved or cast (``model.to(...)`` gives every parameter a
    new tensor and leaves the plain attribute ``fused`` as it was), nor after a copy that broke the views."""
    if fused is None:
        return False
    weight, bias = fused
    start = 0
    for m in modules:
        rows = m.weight.shape[0]
        for own, whole in ((m.weight, weight), (m.bias, bias)):
            if (own is None) != (whole is None):
                return False
            if own is not None and (own.dtype != whole.dtype or own.device != whole.device
                                    or own.data_ptr() != whole[start:start + rows].data_ptr()):
                return False
        start += rows
    return start == weight.shape[0]


def fuse_projections(lm: "LlamaLike") -> None:
    """Concatenate each layer's q/k/v and gate/up weights (kept as ``_fused_qkv`` and ``_fused_gate_up``
    on the modules); a no-op while the modules still hold views of them, done again after the model was
    cast, moved or copied. Memory stays as it was: the modules' weights become views of the new tensors
    (see the module docstring)."""
    with torch.inference_mode(False), torch.no_grad():  # ordinary tensors: HF's forward uses them too
        for layer in lm.decoder.layers:
            attn, mlp = layer.self_attn, layer.mlp
            qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
            if not _still_fused(qkv, getattr(attn, "_fused_qkv", None)):
                attn._fused_qkv = _concatenate(qkv)
            gate_up = [mlp.gate_proj, mlp.up_proj]
            if not _still_fused(gate_up, getattr(mlp, "_fused_gate_up", None)):
                mlp._fused_gate_up = _concatenate(gate_up)


def eager_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scaling: float
) -> torch.Tensor:
    """HF's ``eager_attention_forward`` for GQA-packed queries: ``q`` ``[rows, kv_heads, groups,
    head_dim]`` against ``keys`` / ``values`` ``[rows, kv_heads, columns, head_dim]`` with an additive
    ``mask`` broadcast to the scores ``[rows, kv_heads, groups, columns]``; the softmax in float32.
    Returns ``[rows, kv_heads, groups, head_dim]``. The scores are ``q @ keys^T`` so that contiguous
    keys are read in place (oneDNN's bf16 batched matmul copies any other layout first). Used by both
    lean steps (``models.FrozenLM.step_with_row_cache`` and ``fused_step``)."""
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scaling + mask
    return torch.matmul(scores.softmax(-1, dtype=torch.float32).to(q.dtype), values)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF's ``rotate_half``: ``[x1, x2] -> [-x2, x1]`` on the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def fused_step(lm: "LlamaLike", tokens: torch.Tensor, positions: torch.Tensor, cache: StepCache,
               width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row (``tokens``, ``positions``: long ``[rows]``) through the Llama decoder with
    fused projections (``fuse_projections`` first), the keys and values written at each row's own
    column (its position) and attention over the first ``width`` columns (a row attends to the
    columns up to its position). Returns (hidden ``[rows, hidden]``, float32 logits ``[rows, vocab]``).

    The eager lean step's arithmetic (HF's RMSNorm and rotary modules, GQA packed as query rows, the
    model's attention: eager with a float32 softmax, or SDPA), so the results agree with it up to the
    rounding of the concatenated matmuls and of attention over fewer masked columns."""
    decoder, rows, linear = lm.decoder, tokens.shape[0], lm.linear
    first = decoder.layers[0].self_attn
    head_dim, groups = first.head_dim, first.num_key_value_groups
    x = decoder.embed_tokens(tokens)  # [rows, hidden]
    cos, sin = decoder.rotary_emb(x, positions.unsqueeze(1))  # [rows, 1, head_dim]: broadcast over heads
    # a row attends to its own columns 0..position: [rows, 1, 1, width], True = attend
    mask = (torch.arange(width, device=tokens.device) <= positions.unsqueeze(1))[:, None, None, :]
    eager = lm.model.config._attn_implementation == "eager"
    if eager:  # HF's eager mask: additive, 0 where a row attends, -inf elsewhere
        mask = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill_(~mask, float("-inf"))
    for index, layer in enumerate(decoder.layers):
        attn, mlp = layer.self_attn, layer.mlp
        qkv_weight, qkv_bias = attn._fused_qkv
        q_out = attn.q_proj.weight.shape[0]
        kv_heads = attn.k_proj.weight.shape[0] // head_dim
        h = layer.input_layernorm(x)
        qkv = linear(h, qkv_weight, qkv_bias)  # [rows, q_out + 2 kv_out]
        qk = qkv[:, : q_out + kv_heads * head_dim].view(rows, -1, head_dim)  # [rows, heads + kv_heads, head_dim]
        qk = qk * cos + _rotate_half(qk) * sin
        q, k = qk[:, : q_out // head_dim], qk[:, q_out // head_dim:]
        v = qkv[:, q_out + kv_heads * head_dim:].view(rows, kv_heads, head_dim)
        keys, values = cache.write(index, k, v, positions, width)  # [rows, kv_heads, width, head_dim]
        q = q.reshape(rows, kv_heads, groups, head_dim)
        if eager:
            o = eager_attention(q, keys, values, mask, attn.scaling)
        else:
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling)
        x = x + linear(o.reshape(rows, -1), attn.o_proj.weight, attn.o_proj.bias)
        h = layer.post_attention_layernorm(x)
        gate_up_weight, gate_up_bias = mlp._fused_gate_up
        gate, up = linear(h, gate_up_weight, gate_up_bias).chunk(2, dim=-1)
        x = x + linear(mlp.act_fn(gate) * up, mlp.down_proj.weight, mlp.down_proj.bias)
    hidden = decoder.norm(x)
    return hidden, linear(hidden, lm.lm_head.weight, lm.lm_head.bias).float()


def compiled_step(options: dict | None = None) -> Callable:
    """``fused_step`` under ``torch.compile`` (Inductor, mode ``default``, ``dynamic=True``): compiled
    at its first call, which a caller capturing CUDA graphs makes in a warm-up before the capture.
    ``options``: Inductor options (e.g. ``{"triton.cudagraphs": False}``, the default already)."""
    return torch.compile(fused_step, mode=None if options else "default", dynamic=True, options=options)
