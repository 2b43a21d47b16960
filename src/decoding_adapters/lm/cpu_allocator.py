"""Keep freed memory in the process so that CPU decoding stops paying page faults on every step.

Why: each decode step allocates the same vocabulary-wide float32 blocks (logits, their shifted
copy and exponentials: ``[rows, vocab]``, 25 MB each at 128 rows of SmolLM2) and frees them again.
glibc's ``malloc`` hands big blocks back to the kernel on free (``mmap``-ed blocks are unmapped; the
heap top is trimmed above ``M_TRIM_THRESHOLD``), so the next step page-faults every page of them in
again, zero-filled. At batch 128 on one thread that tripled the entropy/max-prob pass of a step
(30.6 ms against 9.6 ms with the setting; ``benchmarks/decode_step.py``). PyTorch's CPU tuning
guides give the same advice through tcmalloc/jemalloc (``LD_PRELOAD``); ``mallopt`` gets the
effect without another library.

How this departs from ``LD_PRELOAD``: the setting is process-wide, so the application makes it (the
CLI's ``main``, the benchmarks), never the library as a side effect of an import; a program that
embeds the library calls :func:`keep_freed_memory` once itself. Memory that was used at the peak
stays mapped (RSS does not shrink after a large batch), the usual trade of caching allocators.
Only glibc is tuned; elsewhere the call does nothing and returns False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

__all__ = ["keep_freed_memory"]

# glibc <malloc.h> parameter numbers.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

# glibc caps the mmap threshold at 32 MiB on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX); a [128, 49152]
# float32 block (24 MiB) stays below it, so it comes from the heap and is reused.
_SETTINGS = ((_M_MMAP_THRESHOLD, 32 * 1024**2), (_M_TRIM_THRESHOLD, 1024**3), (_M_TOP_PAD, 64 * 1024**2))

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Tell glibc's ``malloc`` to keep freed blocks for reuse (blocks up to 32 MiB from the heap, the
    heap top trimmed only above 1 GiB). Idempotent; returns whether the setting is in force."""
    global _applied
    if _applied is None:
        _applied = _mallopt_all()
        log.debug("malloc keeps freed memory: %s", _applied)
    return _applied


def _mallopt_all() -> bool:
    name = ctypes.util.find_library("c")
    try:
        mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    except OSError:
        mallopt = None
    if mallopt is None:  # not glibc (musl, macOS, Windows): nothing to tune
        return False
    return all(mallopt(param, value) == 1 for param, value in _SETTINGS)
