"""The lean decode step captured in CUDA graphs: on a GPU, one graph launch per step instead of ~20
kernel launches per layer.

A decode step at small batch is launch-bound on a GPU: the weights of a 1B model stream from HBM in
well under a millisecond, while the eager step issues hundreds of small kernels, each with some
microseconds of CPU-side launch cost. As gpt-fast (a static KV cache and ``torch.compile(mode=
"reduce-overhead")`` over the one-token step), HF's static cache and vLLM's CUDA-graph runner do,
the step is recorded once per batch size and replayed:

- **Static buffers.** One cache ``[layers, rows, kv_heads, columns, head_dim]`` with every column it
  will need reserved at once (so its address never changes), the attention mask ``valid [rows,
  columns]``, and the step's inputs: tokens and positions ``[rows]`` and the column written now (a
  one-element device tensor, so that the graph reads it rather than baking it in).
- **Batch buckets.** A graph is captured for each bucket size (1, 2, 4, 8, 12, 16, 24, 32, 48, ...:
  powers of two and 1.5x them, as vLLM captures a list of sizes) on the first ``bucket`` rows of the
  same buffers. A step with ``live`` rows replays the smallest bucket >= ``live``; the rows past
  ``live`` compute garbage in slots nobody reads. Rows that finish are dropped exactly as in
  ``RowKVCache`` (swap-remove into the slots below ``live``), so the live rows stay a prefix.
- **What stays outside.** The prefill (HF's forward, unchanged), opening the step's column of the
  mask, and everything after the logits: the sampling transforms, the chooser, the sampler.

The captured step is ``FrozenLM.step_with_row_cache`` itself, over a cache view whose ``write``
puts keys and values at the column tensor with ``index_copy_``: the same operations as the eager
lean step, except that attention spans all reserved columns (masked past the filled ones), so the
results match it up to the rounding of a reduction over more (zero-weighted) terms.

Buffers and graphs persist on the ``FrozenLM`` between decodes of the same shape (rounded up), so a
training or evaluation run captures each bucket once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .kv_cache import RowKVCache

if TYPE_CHECKING:  # pragma: no cover
    from .protocols import GraphableLM

__all__ = ["batch_bucket", "GraphedDecoder", "StaticRowKVCache", "COLUMN_ROUNDING"]

COLUMN_ROUNDING = 64
"""Reserved columns are rounded up to a multiple of this, so decodes of nearby lengths share graphs."""


def batch_bucket(rows: int) -> int:
    """The smallest captured batch size >= ``rows``: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, ...
    (powers of two and 1.5x them: at most a third of a step's rows are padding)."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    size = 1
    while True:
        if size >= rows:
            return size
        if size >= 2 and size * 3 // 2 >= rows:
            return size * 3 // 2
        size *= 2


class _GraphView:
    """The cache as the captured step sees it: the first ``rows`` slots, the column to write read from
    a device tensor (``write`` must not depend on host values that change between replays)."""

    def __init__(self, buffers: "GraphedDecoder", rows: int):
        self.buffers, self.rows = buffers, rows

    def open_column(self) -> torch.Tensor:
        return self.buffers.valid[: self.rows, None, None, :]

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.buffers
        layer_keys, layer_values = b.keys[layer, : self.rows], b.values[layer, : self.rows]
        layer_keys.index_copy_(2, b.column, keys)  # [rows, kv_heads, columns, head_dim] at one column
        layer_values.index_copy_(2, b.column, values)
        return layer_keys, layer_values

    def close_column(self) -> None:
        pass


class StaticRowKVCache(RowKVCache):
    """A ``RowKVCache`` over a ``GraphedDecoder``'s static buffers: every column reserved from the start
    (never grown, never moved), rows dropped by the inherited swap-remove. Its prompts are left-padded
    to one width and every row writes the same column, ``length`` (a captured step reads the column
    from one device scalar), so, unlike the ``RowKVCache``'s rows at their positions, a row's columns
    depend on its batch mates' prompt lengths."""

    length = 0
    """Columns filled by every row (a plain attribute here, not the ``RowKVCache`` property)."""

    def __init__(self, buffers: "GraphedDecoder", rows: int, capacity: int):
        self.buffers = buffers
        self.capacity = capacity
        self.keys, self.values, self.valid = buffers.keys, buffers.values, buffers.valid
        self.length = 0
        self.columns = torch.zeros(rows, dtype=torch.long, device=buffers.keys.device)  # moved by ``drop``; unused
        self.live = rows
        self.generation = buffers.generation
        """Which ``start`` of the buffers this decode is: a later one overwrote them (see ``check``)."""

    def check(self) -> None:
        if self.generation != self.buffers.generation:
            raise RuntimeError("another decode started on this LM's CUDA-graph buffers while this one was running: "
                               "decodes on one FrozenLM must not interleave (set ModelSpec.cuda_graphs=False)")

    def open_column(self) -> torch.Tensor:
        if self.length >= self.capacity:
            raise ValueError(f"the KV cache is full ({self.capacity} positions)")
        self.valid[: self.live, self.length] = True
        self.buffers.column.fill_(self.length)
        return self.valid[: self.live, None, None, :]


class GraphedDecoder:
    """Static buffers for up to ``rows`` rows of ``columns`` positions, and one captured step per batch bucket."""

    def __init__(self, lm: "GraphableLM", rows: int, columns: int, capture: bool = True):
        config = lm.model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (config.num_hidden_layers, rows, config.num_key_value_heads, columns, head_dim)
        self.lm, self.rows, self.columns = lm, rows, columns
        self.keys = torch.zeros(shape, dtype=lm.dtype, device=lm.device)
        self.values = torch.zeros(shape, dtype=lm.dtype, device=lm.device)
        self.valid = torch.zeros(rows, columns, dtype=torch.bool, device=lm.device)
        self.tokens = torch.zeros(rows, dtype=torch.long, device=lm.device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=lm.device)
        self.column = torch.zeros(1, dtype=torch.long, device=lm.device)
        self.capture = capture
        """False: run each bucket's step eagerly on the same buffers (what a replay computes; for tests
        of the buffers and buckets on a machine without a GPU)."""
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph | None, tuple[torch.Tensor, ...]]] = {}
        """Captured graphs by key (``("step", bucket, epilogue key)``, or a caller's key) and their outputs."""
        self.buffers: dict[str, torch.Tensor] = {}
        self.generation = 0

    def fits(self, rows: int, columns: int) -> bool:
        return rows <= self.rows and columns == self.columns

    def start(self, layer_kv, prompt_mask: torch.Tensor, fan_out: torch.Tensor | None,
              capacity: int) -> StaticRowKVCache:
        """Load a prefill's keys and values (per layer ``[prompts, kv_heads, W, head_dim]``), fanned out
        to rows, into the buffers; every other column zero (attended, masked: it must not hold NaN)."""
        width = prompt_mask.shape[1]
        if fan_out is None:
            fan_out = torch.arange(prompt_mask.shape[0], device=prompt_mask.device)
        rows = len(fan_out)
        self.generation += 1
        self.keys.zero_()
        self.values.zero_()
        self.valid.zero_()
        for layer, (k, v) in enumerate(layer_kv):
            self.keys[layer, :rows, :, :width].copy_(k[fan_out])
            self.values[layer, :rows, :, :width].copy_(v[fan_out])
        self.valid[:rows, :width] = prompt_mask[fan_out].bool()
        # Slots no row uses still run in a bucket's graph: give them one (zero) column to attend to, so
        # that their softmax is not over nothing (NaN), and nothing computed from them (the sampler's
        # draw included) meets NaN.
        self.valid[rows:, 0] = True
        cache = StaticRowKVCache(self, rows, capacity)
        cache.length = width
        return cache

    def buffer(self, name: str, size: int, dtype: torch.dtype) -> torch.Tensor:
        """A device buffer kept for the life of these graphs (same address at every replay), e.g. a
        caller's per-row inputs to its own captured code; zero when first made. A request for more
        entries than it has makes a larger one and drops every graph (they read the old address)."""
        current = self.buffers.get(name)
        if current is None or current.numel() < size or current.dtype != dtype:
            if current is not None:
                self.graphs.clear()
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
        cache.open_column()
        self.tokens[:live].copy_(tokens)
        self.positions[:live].copy_(positions)
        bucket = batch_bucket(live)

        def run():
            hidden, logits = self.lm.step_with_row_cache(self.tokens[:bucket], self.positions[:bucket],
                                                         _GraphView(self, bucket))
            return (hidden, logits, *(epilogue[1](hidden, logits, bucket) if epilogue else ()))

        outputs = self.replay(("step", bucket, epilogue and epilogue[0]), run)
        cache.length += 1
        return tuple(t[:live] for t in outputs)

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


def graphed_decoder(lm: "GraphableLM", rows: int, capacity: int, capture: bool = True) -> GraphedDecoder:
    """The ``lm``'s buffers for ``rows`` rows of ``capacity`` positions (rounded up), reused when a
    previous decode's fit; otherwise new ones replace them (one set per LM: memory stays bounded)."""
    columns = -(-capacity // COLUMN_ROUNDING) * COLUMN_ROUNDING
    current = getattr(lm, "_graphed_decoder", None)
    if current is not None and current.fits(rows, columns) and current.capture == capture:
        return current
    if current is not None:
        rows = max(rows, current.rows) if current.columns == columns else rows
    lm._graphed_decoder = None  # free the old buffers and graphs before allocating new ones
    del current
    lm._graphed_decoder = GraphedDecoder(lm, batch_bucket(rows), columns, capture)
    return lm._graphed_decoder
