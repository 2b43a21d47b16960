"""What this CPU computes natively: its model name and the instruction-set flags that decide the
fast dtype (Linux ``/proc/cpuinfo``).

One source of truth for "native bf16": ``ModelSpec.dtype = auto`` (``resolve_dtype``) and the
throughput benchmark both ask ``CpuFeatures.native_bf16``. Without AVX512-BF16 or AMX-BF16, bf16
matmuls are emulated (about 1.2 GFLOP/s against fp32's 145 on an AVX2-only AMD EPYC), so float32 is
the fast dtype there.

oneDNN's ``ONEDNN_MAX_CPU_ISA`` caps the instructions its kernels use (every bf16 matmul and the
fp32 ``onednn`` linear kernel); ``cpu_features()`` drops the flags above the cap, so that a capped
run (``ONEDNN_MAX_CPU_ISA=AVX2``, with ``ATEN_CPU_CAPABILITY=avx2`` and
``MKL_ENABLE_INSTRUCTIONS=AVX2`` for PyTorch's and MKL's own kernels) picks its dtype as an
AVX2-only CPU would. ``benchmarks/as_avx2.sh`` runs a command so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuFeatures", "RELEVANT_FLAGS", "cap_flags", "cpu_features", "parse_cpuinfo"]

RELEVANT_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The flags that decide which dtype and kernels run fast on a CPU, in the order they are printed."""


@dataclass(frozen=True)
class CpuFeatures:
    """One CPU's model name and flags."""

    model: str
    """The model name (``model name`` in ``/proc/cpuinfo``), ``unknown`` when not found."""
    flags: frozenset[str]
    """Every flag of the first processor entry (empty when ``/proc/cpuinfo`` cannot be read)."""

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model must be a non-empty name (use 'unknown')")
        object.__setattr__(self, "flags", frozenset(self.flags))

    @property
    def native_bf16(self) -> bool:
        """Whether the CPU has bf16 matmul instructions (AVX512-BF16 or AMX-BF16)."""
        return "avx512_bf16" in self.flags or "amx_bf16" in self.flags

    @property
    def fast_dtypes(self) -> tuple[str, ...]:
        """The dtypes (benchmark names) this CPU computes natively: fp32 always, bf16 with native bf16."""
        return ("fp32", "bf16") if self.native_bf16 else ("fp32",)

    def relevant(self) -> dict[str, bool]:
        """``RELEVANT_FLAGS`` -> present, for printing and JSON."""
        return {flag: flag in self.flags for flag in RELEVANT_FLAGS}

    def describe(self) -> str:
        """One line: the model and which relevant flags it has (``+``) or lacks (``-``)."""
        flags = " ".join(("+" if present else "-") + flag for flag, present in self.relevant().items())
        return f"{self.model} ({flags}; native bf16: {'yes' if self.native_bf16 else 'no'})"


def parse_cpuinfo(text: str) -> CpuFeatures:
    """The model name and flags of the first processor entry of ``/proc/cpuinfo`` text (x86 ``flags``,
    ARM ``Features``)."""
    model, flags = "unknown", None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "model name" and model == "unknown":
            model = value.strip() or "unknown"
        elif key in ("flags", "features") and flags is None:
            flags = value.split()
    return CpuFeatures(model=model, flags=frozenset(flags or ()))


_BELOW_AVX512 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")
_BELOW_BF16 = ("AVX512_CORE", "AVX512_CORE_VNNI")
_BELOW_AMX = ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512")


def cap_flags(cpu: CpuFeatures, max_isa: str | None) -> CpuFeatures:
    """``cpu`` without the flags above oneDNN's ``ONEDNN_MAX_CPU_ISA`` value ``max_isa`` (None, empty
    or ``ALL``: unchanged); the model name then says it is capped."""
    isa = (max_isa or "").strip().upper()
    if isa in _BELOW_AVX512:
        dropped = {f for f in cpu.flags if f.startswith(("avx512", "amx"))}
    elif isa in _BELOW_BF16:
        dropped = {f for f in cpu.flags if f == "avx512_bf16" or f.startswith("amx")}
    elif isa in _BELOW_AMX:
        dropped = {f for f in cpu.flags if f.startswith("amx")}
    else:
        return cpu
    return CpuFeatures(model=f"{cpu.model} [capped at {isa}]", flags=cpu.flags - dropped)


def cpu_features(path: str | Path = "/proc/cpuinfo") -> CpuFeatures:
    """This machine's ``CpuFeatures`` as its kernels may use them: the flags of ``path``, capped by
    ``ONEDNN_MAX_CPU_ISA`` when set (model ``unknown`` and no flags where ``path`` cannot be read)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return CpuFeatures(model="unknown", flags=frozenset())
    return cap_flags(parse_cpuinfo(text), os.environ.get("ONEDNN_MAX_CPU_ISA"))
