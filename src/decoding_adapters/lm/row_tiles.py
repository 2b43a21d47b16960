"""Linear layers whose result for a row does not depend on how many rows share the call.

A matmul library picks its kernel, and with it the order each output's dot product is summed in,
from the call's shape, the row count M included: oneDNN computes a lone row with a matrix-vector
kernel; on CPUs with AMX its bf16 blocking, the instruction set it uses for small M and whether it
splits the reduction over K between threads all follow M (an AMX Xeon gave 62 of 96 greedy rows
identical between one batch and batches of 8, where this project's AVX512-BF16 EPYC gave 96);
cuBLAS picks by shape too. So a row's bits would follow the batch it is decoded in.

These kernels call the matmul on tiles of exactly ``tile`` rows and nothing else: the input's rows
are padded with zero rows to a whole number of tiles and each tile is one call. One shape, so one
kernel and one summation order for every row, whatever the batch, on any CPU or GPU (the design
of Thinking Machines' batch-invariant ops, "one tile configuration for every M", applied at the
call instead of inside the kernel). It rests on two things the tests check on the machine that runs
them: the kernel computes a row the same at every position inside a tile, and zero rows change
nothing in the others.

On a CPU the weights are packed once for oneDNN (``PackedRowTiles``), in the blocked layout its
kernel reads for ``tile`` rows (what TorchInductor's CPU freezing does). A plain weight is repacked
by oneDNN on every call, which made tiled calls 1.4-2.9x slower than one call per matrix; packed,
a tile of 32 rows runs faster than one plain call of 32 (docs/cpu-kernels.md). The cost is a
second copy of the weights, made lazily on each weight's first use.
"""

from __future__ import annotations

import weakref
from typing import Callable

import torch
import torch.nn.functional as F

__all__ = ["CPU_ROW_TILE", "CUDA_ROW_TILE", "RowTiles", "PackedRowTiles", "onednn_packing_available"]

CUDA_ROW_TILE = 128
"""Rows of every matmul call on a GPU with ``ModelSpec.batch_invariant``: 128 rows hold the batches
this project decodes in one tile; a decode step is memory-bound there, so the padding rows cost
arithmetic, not weight reads."""

CPU_ROW_TILE = 32
"""Rows of every matmul call on a CPU with ``ModelSpec.batch_invariant``. A CPU step is compute-bound,
so padding rows cost time: smaller tiles waste less on small batches (a lone row pays for 32), larger
ones read each weight fewer times per step. 32 measured best over the batches this project decodes
(benchmarks/batch_invariance.py; docs/cpu-kernels.md)."""


class RowTiles:
    """``linear`` on tiles of exactly ``tile`` rows: the input's rows (all dimensions but the last)
    padded with zeros to a whole number of tiles, one call per tile, so that a row's result comes
    from the same kernel at any batch size."""

    def __init__(self, linear: Callable, tile: int):
        if tile < 1:
            raise ValueError(f"tile must be >= 1, got {tile}")
        self.linear, self.tile = linear, tile

    def prepared(self, weight: torch.Tensor) -> torch.Tensor:
        """The weight as ``call`` takes it (here: as it is)."""
        return weight

    def call(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """One tile ``[tile, in]`` through the kernel: ``[tile, out]``."""
        return self.linear(x, weight, bias)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # [rows, in]
        rows, tile = flat.shape[0], self.tile
        padded = -(-rows // tile) * tile
        if padded != rows:
            flat = torch.cat([flat, flat.new_zeros(padded - rows, flat.shape[1])])
        prepared = self.prepared(weight)
        if padded == tile:
            out = self.call(flat, prepared, bias)
        else:
            out = torch.cat([self.call(part, prepared, bias) for part in flat.split(tile)])
        return out[:rows].reshape(*x.shape[:-1], weight.shape[0])


def onednn_packing_available(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether ``PackedRowTiles`` can run weights of ``dtype`` on ``device``: a CPU, a torch built with
    oneDNN's linear ops, and float32, or bfloat16 where oneDNN computes it on this CPU."""
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if not all(hasattr(torch.ops.mkldnn, op) for op in ("_linear_pointwise", "_reorder_linear_weight")):
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


class PackedRowTiles(RowTiles):
    """``RowTiles`` through oneDNN on weights packed once for ``tile`` rows
    (``torch.ops.mkldnn._reorder_linear_weight``); each weight is packed on its first use and the
    packed copy dropped with the weight. For float32 this is the ``onednn`` linear kernel; for
    bfloat16, the kernel ``F.linear`` sends bf16 to (the same bits on the development CPU)."""

    def __init__(self, tile: int):
        super().__init__(F.linear, tile)
        self._packed: dict[int, tuple[weakref.ref, tuple, torch.Tensor]] = {}
        """``id(weight)`` -> (the weight, what its numbers were packed from, the packed copy)."""

    def prepared(self, weight: torch.Tensor) -> torch.Tensor:
        key = id(weight)
        # a module's .to() swaps a parameter's storage and an in-place write bumps its version: repack then
        version = 0 if weight.is_inference() else weight._version  # inference tensors keep no version
        source = (weight.data_ptr(), version, weight.dtype, tuple(weight.shape))
        entry = self._packed.get(key)
        if entry is not None and entry[0]() is weight and entry[1] == source:
            return entry[2]
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), self.tile)
        self._packed[key] = (weakref.ref(weight, lambda _, key=key: self._packed.pop(key, None)), source, packed)
        return packed

    def call(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
