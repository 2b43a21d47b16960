"""decoding-adapters: learn how a frozen LLM should decode (see the README's module table).

``AdaptiveGenerator`` is exported lazily: every submodule import runs this file first, so it must
stay light (the generator imports torch and transformers).
"""

import importlib


def __getattr__(name):
    if name == "AdaptiveGenerator":
        return importlib.import_module(f"{__name__}.generator").AdaptiveGenerator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
