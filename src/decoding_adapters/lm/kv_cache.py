"""A KV cache owned by the decode loop, written in place, with per-row shrinking.

HF's ``DynamicCache`` grows by concatenation (every step copies every layer's whole cache) and drops
finished rows with ``index_select`` (another full copy). This cache is written in place:

- **Layout.** ``keys`` and ``values`` are ``[layers, rows, kv_heads, reserved, head_dim]``. A row's
  token at position ``p`` lives in column ``p``: every prompt starts at column 0 (prompts of other
  lengths are padded on the right, by masked columns), and a step writes each live row's own next
  column (``columns``). ``valid`` ``[rows, capacity]`` is the per-row attention mask (True on a
  row's filled columns). So a row's keys and values sit in the same columns whatever its batch
  mates are: bf16 batched matmuls sum pairs of neighbouring columns together (AVX512-BF16 dot
  products), and a row shifted by an odd number of columns (left padding to the batch's longest
  prompt) summed its attention in another order and parted from itself decoded in another batch.
- **Attention reads whole reserved blocks.** A step attends over every reserved column of the live
  rows, ``[layer, :live]``: one contiguous block, so batched matmuls read the cache where it lies.
  A view that stops at the longest row is not contiguous (its rows are ``reserved`` columns apart),
  and oneDNN's bf16 batched matmul copies such an operand first, which made attention 1.4-2.2x slower
  than reading the block at batch 32 and 128 (``benchmarks/decode_step.py``). The columns a row has
  not filled hold zeros and are masked, so they add nothing to its output.
- **Growing by chunks.** The reserve is a whole number of :data:`COLUMN_CHUNK` columns: it starts
  at the longest prompt rounded up to a chunk, plus a chunk, and grows by a chunk when the longest
  row fills it (one copy of the live rows' cache per chunk of steps, never past ``capacity``).
  Whole chunks keep the attended width out of the ranges where CPU kernels take another path
  (float32 ``q @ keys^T`` under 8 and at 70-71 columns, the softmax under 16, on the development
  CPU); ``FrozenLM.start_decode`` rounds ``capacity`` up to a chunk too.
- **Shrinking.** Live rows always occupy slots ``[0, live)``. When rows finish, each finished slot
  below the new live count is refilled by one still-running row from above it ("swap-remove"), so
  a step copies as many rows as finished, never the whole cache. ``drop`` returns the new order of
  the surviving rows so that the caller can permute its own per-row state the same way.

Row order inside the batch carries no meaning: a row's numbers depend on its own slot only.
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["COLUMN_CHUNK", "RowKVCache", "chunks_for"]

COLUMN_CHUNK = 32
"""Columns added to the reserve when it is full: larger chunks copy the cache less often and read
more masked columns per step."""


def chunks_for(columns: int) -> int:
    """``columns`` rounded up to a whole number of :data:`COLUMN_CHUNK` columns."""
    return -(-columns // COLUMN_CHUNK) * COLUMN_CHUNK


class RowKVCache:
    """Keys and values for ``rows`` sequences of up to ``capacity`` positions, reserved by chunks."""

    def __init__(
        self,
        num_layers: int,
        rows: int,
        kv_heads: int,
        capacity: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        reserve: int = COLUMN_CHUNK,
    ):
        if min(num_layers, rows, kv_heads, capacity, head_dim, reserve) < 1:
            raise ValueError("every dimension of a KV cache must be >= 1")
        self.capacity = capacity
        """The most columns a row will ever hold (its prompt plus the new tokens)."""
        self.valid = torch.zeros(rows, capacity, dtype=torch.bool, device=device)
        self.columns = torch.zeros(rows, dtype=torch.long, device=device)
        """``[rows]`` columns each row has filled (its next token's position and column)."""
        self.live = rows
        """Rows still decoding; they occupy slots ``[0, live)``."""
        self._slots = torch.arange(rows, device=device)
        no_columns = (num_layers, rows, kv_heads, 0, head_dim)
        self.keys = torch.empty(no_columns, dtype=dtype, device=device)
        self.values = torch.empty(no_columns, dtype=dtype, device=device)
        self._grow(min(reserve, capacity))

    @property
    def reserved(self) -> int:
        """Columns allocated now, all of them attended (those a row has not filled masked)."""
        return self.keys.shape[3]

    @property
    def length(self) -> int:
        """Columns filled by the longest live row."""
        return int(self.columns[: self.live].max()) if self.live else 0

    @classmethod
    def from_prefill(
        cls,
        layer_kv: Sequence[tuple[torch.Tensor, torch.Tensor]],
        prompt_mask: torch.Tensor,
        fan_out: torch.Tensor | None,
        capacity: int,
    ) -> "RowKVCache":
        """A cache holding a prefill's keys and values, fanned out to rows.

        ``layer_kv``: per layer ``(keys, values)``, each ``[prompts, kv_heads, W, head_dim]``, left-padded
        (a prompt's tokens are its last columns); ``prompt_mask``: ``[prompts, W]`` (1 on real tokens);
        ``fan_out``: ``[rows]`` prompt index of each row (None: one row per prompt); ``capacity``: ``W``
        plus the new tokens to come. Each row's prompt is moved to start at column 0."""
        k0 = layer_kv[0][0]
        prompts, kv_heads, width, head_dim = k0.shape
        if capacity < width:
            raise ValueError(f"capacity {capacity} is smaller than the prompt width {width}")
        if fan_out is None:
            fan_out = torch.arange(prompts, device=k0.device)
        reserve = min(capacity, chunks_for(width) + COLUMN_CHUNK)
        cache = cls(len(layer_kv), len(fan_out), kv_heads, capacity, head_dim, k0.dtype, k0.device, reserve)
        lengths = prompt_mask.long().sum(1)[fan_out]  # [rows]
        for pad in (width - lengths).unique().tolist():  # rows whose prompt has `pad` columns of padding
            rows = (width - lengths == pad).nonzero().squeeze(-1)
            prompt_rows = fan_out[rows]
            for layer, (k, v) in enumerate(layer_kv):
                cache.keys[layer, rows, :, : width - pad] = k[prompt_rows, :, pad:]
                cache.values[layer, rows, :, : width - pad] = v[prompt_rows, :, pad:]
        cache.valid[:, :width] = torch.arange(width, device=k0.device) < lengths.unsqueeze(1)
        cache.columns = lengths.clone()
        return cache

    def open_column(self) -> torch.Tensor:
        """Make each live row's next column visible to it (the token being fed now), growing the
        reserve if the longest row has filled it, and return the attention mask ``[live, 1, 1,
        reserved]`` (bool, True = attend) for this step."""
        longest = self.length
        if longest >= self.capacity:
            raise ValueError(f"the KV cache is full ({self.capacity} positions)")
        if longest >= self.reserved:
            self._grow(min(self.capacity, self.reserved + COLUMN_CHUNK))
        self.valid[self._slots[: self.live], self.columns[: self.live]] = True
        return self.valid[: self.live, None, None, : self.reserved]

    def _grow(self, reserved: int) -> None:
        """Reserve ``reserved`` columns: the live rows' filled columns move into new buffers whose
        other columns are zero, not left uninitialised: they are attended (masked) before they are
        written, and stray memory may hold NaN, which a mask cannot hide (0 x NaN = NaN).
        (The filled columns of finished slots, ``[live, rows)``, are left unwritten: no step reads
        them again.)"""
        layers, rows, kv_heads, _, head_dim = self.keys.shape
        filled = self.length
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_empty(layers, rows, kv_heads, reserved, head_dim)
            new[:, :, :, filled:].zero_()
            new[:, : self.live, :, :filled] = old[:, : self.live, :, :filled]
            setattr(self, name, new)

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store one step's ``[live, kv_heads, 1, head_dim]`` keys and values in each live row's next
        column and return the layer's reserved keys and values, contiguous views ``[live, kv_heads,
        reserved, head_dim]`` (columns a row has not filled are zero; the mask of ``open_column`` hides
        them)."""
        slots, columns = self._slots[: self.live], self.columns[: self.live]
        self.keys[layer, slots, :, columns] = keys[:, :, 0]
        self.values[layer, slots, :, columns] = values[:, :, 0]
        return self.keys[layer, : self.live], self.values[layer, : self.live]

    def close_column(self) -> None:
        """The step has been written in every layer: every live row advances one column."""
        self.columns[: self.live] += 1

    def drop(self, done: torch.Tensor) -> torch.Tensor:
        """Remove the live rows flagged in ``done`` (bool ``[live]``).

        Returns ``order`` (long ``[new_live]``): new slot ``i`` holds the row that was in slot
        ``order[i]``. Only the rows that move are copied (``#finished`` at most).
        """
        if done.shape != (self.live,):
            raise ValueError(f"done must have one flag per live row ({self.live}), got shape {tuple(done.shape)}")
        keep = ~done
        new_live = int(keep.sum())
        holes = done[:new_live].nonzero().squeeze(-1)  # finished slots that stay inside [0, new_live)
        movers = keep[new_live:].nonzero().squeeze(-1) + new_live  # running rows beyond it
        order = torch.arange(new_live, device=done.device)
        if len(holes):
            columns = slice(0, self.length)
            self.keys[:, holes, :, columns] = self.keys[:, movers, :, columns]
            self.values[:, holes, :, columns] = self.values[:, movers, :, columns]
            self.valid[holes] = self.valid[movers]
            self.columns[holes] = self.columns[movers]
            order[holes] = movers
        self.live = new_live
        return order
