"""Child process that runs a user verifier (see ``tasks/jsonl.py``); started as a script, by path.

    python _verifier_worker.py MODULE:FUNCTION

Reads one JSON request per line on stdin (``{"completion", "answer", "meta"}``), answers one JSON
line per request on the *original* stdout (``{"score": x}`` or ``{"error": "..."}``). The user's
code gets ``sys.stdout`` pointed at stderr, so its prints cannot corrupt the protocol. It imports
nothing from this package: starting it costs only the interpreter and the user's module.
The process exits when stdin closes (the parent exited or closed it).
"""

from __future__ import annotations

import os
import sys

# Run as a script, Python puts this file's folder (tasks/) first on sys.path, where math.py and
# code.py would shadow the standard library for the user's module: drop it before anything else.
if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    sys.path.pop(0)

import importlib  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402


def load_verifier(spec: str):
    """The callable named by ``module:function`` (``function`` may be dotted: ``module:Class.method``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"verifier must be given as 'module:function', got {spec!r}")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"verifier {spec!r} is not callable")
    return obj


def wants_meta(fn) -> bool:
    """Whether ``fn`` takes a third argument (the problem's JSONL row) besides completion and answer."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) >= 3


def main() -> int:
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # the user's prints go to stderr
    try:
        fn = load_verifier(sys.argv[1])
        with_meta = wants_meta(fn)
    except Exception as err:  # reported once, then every request answers with the error
        fn, failure = None, f"cannot load verifier {sys.argv[1]!r}: {type(err).__name__}: {err}"
    for line in sys.stdin:
        request = json.loads(line)
        if fn is None:
            reply = {"error": failure}
        else:
            try:
                args = (request["completion"], request["answer"]) + ((request["meta"],) if with_meta else ())
                reply = {"score": float(fn(*args))}
            except Exception as err:
                reply = {"error": f"{type(err).__name__}: {err}"}
        protocol.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
