"""decoding-adapters."""
def __getattr__(name):  # lazy export: `import decoding_adapters` stays light (the generator imports torch)
    return getattr(
        __import__(f"{__name__}.generator", fromlist=["_"]) if name == "AdaptiveGenerator" else object(), name
    )  # else: AttributeError
