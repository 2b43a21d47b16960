"""The decode step captured in CUDA graphs: on a GPU, one graph launch per step instead of a few
hundred kernel launches.

A decode step at small batch is launch-bound on a GPU: the weights of a 1B model stream from HBM in
well under a millisecond, while the eager step issues hundreds of small kernels, each with some
microseconds of CPU-side launch cost. As gpt-fast (a static KV cache and ``torch.compile`` over the
one-token step), HF's static cache and vLLM's CUDA-graph runner do, the step is recorded once per
shape and replayed:

- **The step** is ``lm.fused_step``: q/k/v and gate/up as one matmul each, rotary of q and k in one
  pass, attention over the filled columns only; compiled with ``torch.compile`` (Inductor fuses
  RMSNorm with the residual adds, the rotary and the other elementwise work) unless
  ``ModelSpec.compile_step`` is off. The compilation happens in the warm-up calls before the first
  capture; the graphs then replay Inductor's kernels.
- **Static buffers.** One cache per layer, ``[rows, kv_heads, columns, head_dim]``, with every column it
  will need reserved at once (so its address never changes), and the step's inputs: tokens and
  positions ``[rows]``. The layout is the CPU's ``RowKVCache``'s: a row's token at position ``p``
  lives in column ``p`` (every prompt starts at column 0), so a row's keys sit in the same columns
  whatever its batch mates are. The graph writes each row's keys at its position (read from the
  positions buffer) and builds the attention mask from the positions too (a row attends to columns
  ``0..p``): no mask buffer, nothing per step but the tokens and positions copied in.
- **Batch buckets and widths.** A graph is captured per (bucket, width): ``bucket`` rows, the
  smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, ... (powers of two and 1.5x them, as vLLM
  captures a list of sizes) that holds the live rows, on the first rows of the same buffers; ``width``
  the attended columns, the longest row's length rounded up (``fused_step.attended_width``). Rows past
  ``live`` compute garbage in slots nobody reads. Rows that finish are dropped as in ``RowKVCache``
  (swap-remove into the slots below ``live``), so the live rows stay a prefix.
- **Batch invariance** (``ModelSpec.batch_invariant``, on a GPU): a matmul's kernel, and so the order
  in which it sums, is chosen by cuBLAS from its shape, M (the rows) included. So every linear layer
  runs on tiles of exactly ``row_tiles.CUDA_ROW_TILE`` rows (``row_tiles.RowTiles``; a row's result then
  does not depend on how many rows share the call) and the step's buckets are whole tiles. A decode
  step is memory-bound at these sizes: the extra rows cost matmul time, not weight reads.
- **What stays outside.** The prefill (HF's forward, unchanged) and everything after the logits: the
  sampling transforms, the chooser, the sampler (``decoding.graph_sampling`` graphs those).

Buffers and graphs persist on the ``FrozenLM`` between decodes of the same shape (rounded up), so a
training or evaluation run captures each bucket once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from .fused_step import attended_width, compiled_step, fuse_projections, fused_step
from .kv_cache import RowKVCache

if TYPE_CHECKING:  # pragma: no cover
    from .protocols import GraphableLM

__all__ = ["batch_bucket", "GraphedDecoder", "StaticRowKVCache", "COLUMN_ROUNDING"]

log = logging.getLogger(__name__)

COLUMN_ROUNDING = 64
"""Reserved columns are rounded up to a multiple of this, so decodes of nearby lengths share graphs."""


def batch_bucket(rows: int, tile: int | None = None) -> int:
    """The smallest captured batch size >= ``rows``: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, ...
    (powers of two and 1.5x them: at most a third of a step's rows are padding); with ``tile``, the
    smallest whole number of tiles instead."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    if tile is not None:
        return -(-rows // tile) * tile
    size = 1
    while True:
        if size >= rows:
            return size
        if size >= 2 and size * 3 // 2 >= rows:
            return size * 3 // 2
        size *= 2


class _GraphView:
    """The cache as the captured step sees it (``fused_step.StepCache``): the first ``rows`` slots,
    each row's column read from the positions buffer (nothing that changes between replays is a host
    value)."""

    def __init__(self, buffers: "GraphedDecoder", rows: int):
        self.buffers, self.rows = buffers, rows

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor,
              width: int) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.buffers
        layer_keys, layer_values = b.keys[layer], b.values[layer]  # the whole layer: [all rows, kv, columns, hd]
        rows = positions.shape[0]  # == self.rows; from the tensor, so a compiled step is not specialised on it
        slots = torch.arange(rows, device=positions.device)
        # each row at its own column; a slot no row uses holds a stale position, always < columns. The write
        # goes into the layer's own tensor, not into a view of it: torch.compile then writes in place, where
        # a view of a graph input made it copy the whole cache every step
        layer_keys[slots, :, positions] = keys  # keys: [rows, kv_heads, head_dim]
        layer_values[slots, :, positions] = values
        # narrow, not slicing: a slice clamps its end, so a compiled step would be specialised on whether
        # rows and width equal the buffer's sizes (a recompilation when they start or stop doing so)
        return (layer_keys.narrow(0, 0, rows).narrow(2, 0, width),
                layer_values.narrow(0, 0, rows).narrow(2, 0, width))


class StaticRowKVCache(RowKVCache):
    """A ``RowKVCache`` over a ``GraphedDecoder``'s static buffers: every column reserved from the start
    (never grown, never moved), rows at their positions as in ``RowKVCache``, rows dropped by
    swap-remove. The rows' positions live with the caller (``GraphedRowCacheState``); this keeps, on
    the host, ``length``: an upper bound of the columns the longest live row has filled, which picks
    the attended width without asking the device."""

    def __init__(self, buffers: "GraphedDecoder", rows: int, capacity: int, length: int):
        self.buffers = buffers
        self.capacity = capacity
        self.keys, self.values = buffers.keys, buffers.values
        self.length = length
        self.live = rows
        self.generation = buffers.generation
        """Which ``start`` of the buffers this decode is: a later one overwrote them (see ``check``)."""

    length = 0
    """Columns filled by the longest live row, at most (a plain attribute here, not the ``RowKVCache``
    property)."""

    def check(self) -> None:
        if self.generation != self.buffers.generation:
            raise RuntimeError("another decode started on this LM's CUDA-graph buffers while this one was running: "
                               "decodes on one FrozenLM must not interleave (set ModelSpec.cuda_graphs=False)")
        if self.length >= self.capacity:
            raise ValueError(f"the KV cache is full ({self.capacity} positions)")

    def drop(self, done: torch.Tensor) -> torch.Tensor:
        """As ``RowKVCache.drop``: only the rows that move are copied, their filled columns."""
        if done.shape != (self.live,):
            raise ValueError(f"done must have one flag per live row ({self.live}), got shape {tuple(done.shape)}")
        keep = ~done
        new_live = int(keep.sum())
        holes = done[:new_live].nonzero().squeeze(-1)
        movers = keep[new_live:].nonzero().squeeze(-1) + new_live
        order = torch.arange(new_live, device=done.device)
        if len(holes):
            columns = slice(0, self.length)
            for layer in (*self.keys, *self.values):
                layer[holes, :, columns] = layer[movers, :, columns]
            order[holes] = movers
        self.live = new_live
        return order


class GraphedDecoder:
    """Static buffers for up to ``rows`` rows of ``columns`` positions, and one captured step per
    (batch bucket, attended width)."""

    def __init__(self, lm: "GraphableLM", rows: int, columns: int, capture: bool = True, compile_step: bool = False,
                 row_tile: int | None = None):
        config = lm.model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        # one spare slot and one spare column, never used: a bucket and the attended width never equal the
        # buffers' sizes, so a compiled step is not specialised on such a coincidence and recompiled when it
        # ends (torch.compile gives equal sizes one symbol; a view of a whole dimension is contiguous)
        shape = (config.num_hidden_layers, rows + 1, config.num_key_value_heads, columns + 1, head_dim)
        self.lm, self.rows, self.columns = lm, rows, columns
        # ordinary tensors, not inference tensors: a decode inside or outside inference mode may write them
        with torch.inference_mode(False):
            # one tensor per layer (not views of one): see _GraphView.write
            self.keys = [torch.zeros(shape[1:], dtype=lm.dtype, device=lm.device) for _ in range(shape[0])]
            self.values = [torch.zeros(shape[1:], dtype=lm.dtype, device=lm.device) for _ in range(shape[0])]
            self.tokens = torch.zeros(rows + 1, dtype=torch.long, device=lm.device)
            self.positions = torch.zeros(rows + 1, dtype=torch.long, device=lm.device)
        self.capture = capture
        """False: run each bucket's step eagerly on the same buffers (what a replay computes; for tests
        of the buffers and buckets on a machine without a GPU)."""
        self.compile_step = compile_step
        """Whether the step is ``torch.compile``'d (``fused_step.compiled_step``) before capture."""
        self.row_tile = row_tile
        """Buckets are whole tiles of this many rows (batch invariance on a GPU), or None."""
        fuse_projections(lm)
        self.step_fn = compiled_step() if compile_step else fused_step
        self.compile_failed: str | None = None
        """Why compiling the step failed, if it did (the uncompiled step runs instead)."""
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph | None, tuple[torch.Tensor, ...]]] = {}
        """Captured graphs by key (``("step", bucket, width, epilogue key)``, or a caller's key) and
        their outputs."""
        self.buffers: dict[str, torch.Tensor] = {}
        self.generation = 0
        self.last_step: tuple | None = None
        """The key of the step graph replayed last (its outputs feed a caller's later graphs)."""

    def fits(self, rows: int, columns: int) -> bool:
        return rows <= self.rows and columns == self.columns

    def bucket(self, live: int) -> int:
        """The rows a step with ``live`` rows runs on (``batch_bucket``, in whole tiles where set)."""
        return batch_bucket(live, self.row_tile)

    def start(self, layer_kv, prompt_mask: torch.Tensor, fan_out: torch.Tensor | None,
              capacity: int) -> StaticRowKVCache:
        """Load a prefill's keys and values (per layer ``[prompts, kv_heads, W, head_dim]``, left-padded),
        fanned out to rows, into the buffers, each row's prompt moved to start at column 0; every other
        column zero (attended by a padding slot, masked for a live row: it must not hold NaN)."""
        width = prompt_mask.shape[1]
        if fan_out is None:
            fan_out = torch.arange(prompt_mask.shape[0], device=prompt_mask.device)
        rows = len(fan_out)
        self.generation += 1
        for layer in (*self.keys, *self.values):
            layer.zero_()
        self.positions.zero_()  # slots no row uses attend to column 0 (zeros): a softmax over something
        lengths = prompt_mask.long().sum(1)[fan_out]  # [rows]
        for pad in (width - lengths).unique().tolist():  # rows whose prompt has `pad` columns of padding
            slots = (width - lengths == pad).nonzero().squeeze(-1)
            prompt_rows = fan_out[slots]
            for layer, (k, v) in enumerate(layer_kv):
                self.keys[layer][slots, :, : width - pad] = k[prompt_rows, :, pad:]
                self.values[layer][slots, :, : width - pad] = v[prompt_rows, :, pad:]
        return StaticRowKVCache(self, rows, capacity, length=width)

    def buffer(self, name: str, size: int, dtype: torch.dtype) -> torch.Tensor:
        """A device buffer kept for the life of these graphs (same address at every replay), e.g. a
        caller's per-row inputs to its own captured code; zero when first made. A request for more
        entries than it has makes a larger one and drops every graph (they read the old address)."""
        current = self.buffers.get(name)
        if current is None or current.numel() < size or current.dtype != dtype:
            if current is not None:
                self.graphs.clear()
            with torch.inference_mode(False):
                current = self.buffers[name] = torch.zeros(size, dtype=dtype, device=self.lm.device)
        return current

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, cache: StaticRowKVCache, epilogue=None):
        """One step for the ``live`` rows (``tokens`` / ``positions`` long ``[live]``): hidden ``[live,
        hidden]``, float32 logits ``[live, vocab]`` and the outputs of ``epilogue`` (None, or ``(key,
        fn)`` with ``fn(hidden, logits, rows)`` returning a tuple of ``[rows, ...]`` tensors: work
        recorded in the same graph, right after the step, on the bucket's ``rows``), each cut to the
        live rows: views into the graph's outputs that the next replay overwrites."""
        live = tokens.shape[0]
        cache.check()
        self.tokens[:live].copy_(tokens)
        self.positions[:live].copy_(positions)
        bucket = self.bucket(live)
        width = attended_width(cache.length + 1, self.columns)

        def run():
            hidden, logits = self._step(bucket, width)
            return (hidden, logits, *(epilogue[1](hidden, logits, bucket) if epilogue else ()))

        self.last_step = ("step", bucket, width, epilogue and epilogue[0])
        outputs = self.replay(self.last_step, run)
        cache.length += 1
        return tuple(t[:live] for t in outputs)

    def _step(self, bucket: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The step on the first ``bucket`` rows of the buffers. If compiling it fails (no Triton, no C
        compiler, an Inductor error), the uncompiled fused step takes over for good, with a warning: an
        error in the step itself is raised again by it."""
        args = (self.lm, self.tokens[:bucket], self.positions[:bucket], _GraphView(self, bucket), width)
        if self.step_fn is fused_step:
            return fused_step(*args)
        try:
            return self.step_fn(*args)
        except Exception as err:  # noqa: BLE001 - any compiler failure; the eager retry re-raises real errors
            log.warning("compiling the decode step failed (%s: %s); capturing it uncompiled",
                        type(err).__name__, str(err).splitlines()[0][:200] if str(err) else "")
            self.step_fn = fused_step
            self.compile_failed = f"{type(err).__name__}: {err}"[:400]
            return fused_step(*args)

    def outputs(self, key: tuple) -> tuple[torch.Tensor, ...]:
        """The outputs of the graph captured under ``key`` (full bucket size)."""
        return self.graphs[key][1]

    def replay(self, key: tuple, run) -> tuple[torch.Tensor, ...]:
        """``run()`` (returning a tuple of tensors): captured into a graph the first time ``key`` is seen,
        replayed after that; its outputs, which every replay rewrites in place. ``run`` must read its
        inputs from tensors whose addresses stay fixed (these buffers, other graphs' outputs).
        Without ``capture`` it is simply called (and its outputs kept under ``key`` all the same)."""
        if not self.capture:
            self.graphs[key] = (None, run())
            return self.graphs[key][1]
        if key not in self.graphs:
            self.graphs[key] = self._capture(run)
        graph, outputs = self.graphs[key]
        graph.replay()
        return outputs

    def _capture(self, run):
        """Record ``run`` after two warm-up calls on a side stream, as torch.cuda.graphs asks. A step's
        warm-ups write the current column of slots that the replay right after rewrites, so they leave
        no trace."""
        side = torch.cuda.Stream(self.lm.device)
        side.wait_stream(torch.cuda.current_stream(self.lm.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                run()
        torch.cuda.current_stream(self.lm.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = run()
        return graph, outputs


def graphed_decoder(lm: "GraphableLM", rows: int, capacity: int, capture: bool = True, compile_step: bool = False,
                    row_tile: int | None = None) -> GraphedDecoder:
    """The ``lm``'s buffers for ``rows`` rows of ``capacity`` positions (rounded up), reused when a
    previous decode's fit; otherwise new ones replace them (one set per LM: memory stays bounded).
    ``compile_step`` and ``row_tile``: see ``GraphedDecoder``."""
    columns = -(-capacity // COLUMN_ROUNDING) * COLUMN_ROUNDING
    current = getattr(lm, "_graphed_decoder", None)
    settings = (capture, compile_step, row_tile)
    if current is not None and current.fits(rows, columns) and (
            current.capture, current.compile_step, current.row_tile) == settings:
        return current
    if current is not None:
        rows = max(rows, current.rows) if current.columns == columns else rows
    lm._graphed_decoder = None  # free the old buffers and graphs before allocating new ones
    del current
    lm._graphed_decoder = GraphedDecoder(lm, batch_bucket(rows, row_tile), columns, capture, compile_step, row_tile)
    return lm._graphed_decoder
