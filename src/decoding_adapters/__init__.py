"""decoding-adapters: learn how a frozen LLM should decode (see the README's module table).

``Adapter``, the handle on a trained adapter, is exported lazily: every submodule import runs this
file first, so it must stay light (``serving.adapter`` imports torch and transformers).
"""

import importlib

_LAZY = {"Adapter": "serving.adapter"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
