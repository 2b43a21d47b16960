"""decoding-adapters."""
_LAZY = {"AdaptiveGenerator": "generator", "Adapter": "adapter"}  # lazy exports: `import decoding_adapters` stays light (torch)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(__import__(f"{__name__}.{_LAZY[name]}", fromlist=["_"]), name)
