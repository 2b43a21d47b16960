"""What the sandbox tests share: whether this process is root, a time limit a busy machine meets,
one run of a program under a config, and the skip for layers this machine cannot set up. The
``layers`` and ``isolation`` fixtures are in ``conftest.py``."""

from __future__ import annotations

import os

import pytest

from decoding_adapters.sandbox.runner import SandboxConfig, execute

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
# Generous enough for a busy 2-core machine: an interpreter starts in ~50 ms when idle.
SLOW_OK_S = 20.0


def run(code: str, **options):
    """``code`` run once with no input under ``SandboxConfig(**options)`` (``timeout_s``: ``SLOW_OK_S``)."""
    return execute(code, "", SandboxConfig(timeout_s=options.pop("timeout_s", SLOW_OK_S), **options))


def need(layers, *names):
    """Skip the test when any of the isolation layers ``names`` is not available on this machine."""
    missing = [name for name in names if name in layers.missing()]
    if missing:
        pytest.skip(f"layer(s) {missing} not available on this machine")
