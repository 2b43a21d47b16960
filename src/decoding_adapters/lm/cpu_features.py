"""What this CPU computes natively: its model name and the instruction-set flags that decide the
fast dtype (Linux ``/proc/cpuinfo``).

One source of truth for "native bf16": ``ModelSpec.dtype = auto`` (``resolve_dtype``) and the
throughput benchmark both ask ``CpuFeatures.native_bf16``. Without AVX512-BF16 or AMX-BF16, bf16
matmuls are emulated (about 1.2 GFLOP/s against fp32's 145 on an AVX2-only AMD EPYC), so float32 is
the fast dtype there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuFeatures", "RELEVANT_FLAGS", "cpu_features", "parse_cpuinfo"]

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


def cpu_features(path: str | Path = "/proc/cpuinfo") -> CpuFeatures:
    """This machine's ``CpuFeatures`` (model ``unknown`` and no flags where ``path`` cannot be read)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return CpuFeatures(model="unknown", flags=frozenset())
    return parse_cpuinfo(text)
