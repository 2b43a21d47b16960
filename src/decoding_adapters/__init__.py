"""decoding-adapters: learn how a frozen LLM should decode (see the README's module table).

``AdaptiveGenerator`` and ``Adapter`` are exported lazily: every submodule import runs this file
first, so it must stay light (those modules import torch and transformers).
"""

import importlib

_LAZY = {"AdaptiveGenerator": "serving.generator", "Adapter": "serving.adapter"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
