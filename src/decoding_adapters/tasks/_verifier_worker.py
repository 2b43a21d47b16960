"""Child process that runs a user verifier (see ``tasks/jsonl.py``); started as a script, by path.

    python _verifier_worker.py MODULE:FUNCTION SETTINGS_JSON

Reads one JSON request per line from the file descriptor ``SETTINGS_JSON["requests"]`` and
answers one JSON line per request on the descriptor ``SETTINGS_JSON["replies"]`` (two pipes of
their own, which no child of the verifier inherits), ``{"error": "..."}`` when it fails:

- ``{"completion", "answer", "meta"}``: the verifier's score, ``{"score": x}``;
- ``{"describe": [name, ...]}``: whether the verifier loads (the module is imported here, never in
  the caller's process) and, per name, its companion function ``module:qualname`` or null (the
  module's ``<function>_<name>``, else the verifier's attribute ``name``), ``{"companions": {...}}``;
- ``{"call": name, "args": [...]}``: that companion's value, ``{"value": v}``.
 Before the user's module is imported, file descriptor 1 is
pointed at stderr and 0 at ``/dev/null`` at the OS level, so neither a ``print`` nor an
``os.system("echo ...")`` can reach the protocol; the process joins the control group named in
``SETTINGS_JSON["cgroup_procs"]`` (memory and process caps for the verifier and all its children),
sets its own address-space cap (``memory_mb``) and process cap (``max_processes`` more processes
than its user has), and forks a watchdog that kills it (and every process it started) when the
parent dies, which the parent's end of the ``lifeline`` pipe closing tells. It imports nothing from
this package: starting it costs only the interpreter and the user's module. The process exits
when the request pipe closes (the parent exited or closed it).
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
import resource  # noqa: E402
import signal  # noqa: E402


def load_verifier(spec: str):
    """The callable named by ``module:function`` (``function`` may be dotted: ``module:Class.method``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"verifier must be given as 'module:function', got {spec!r}")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"cannot import module {module_name!r} ({err}); is its folder the current directory "
                         "or on PYTHONPATH?") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"verifier {spec!r} is not callable")
    return obj


def companion(spec: str, fn, name: str):
    """The verifier's ``name`` function: ``<function>_<name>`` beside it in its module, else its
    attribute ``name``; None when it has neither."""
    module_name, _, attr = spec.partition(":")
    sibling = getattr(sys.modules[module_name], f"{attr.split('.')[-1]}_{name}", None)
    if callable(sibling):
        return sibling
    own = getattr(fn, name, None)
    return own if callable(own) else None


MAX_VALUE_CHARS = 2000
"""Longest text a companion's value may be in a reply (the caller refuses longer replies)."""


def answer(request: dict, spec: str, fn, with_meta: bool, companions: dict) -> dict:
    """The reply to one request (module docstring); raises what the user's code raises."""
    if "describe" in request:
        for name in request["describe"]:
            if name not in companions:
                companions[name] = companion(spec, fn, str(name))
        return {"companions": {name: None if companions[name] is None else
                               f"{companions[name].__module__}:{companions[name].__qualname__}"
                               for name in request["describe"]}}
    if "call" in request:
        found = companions.get(request["call"])
        if found is None:
            raise ValueError(f"the verifier has no {request['call']} function")
        value = found(*request["args"])
        return {"value": value[:MAX_VALUE_CHARS] if isinstance(value, str) else value}
    args = (request["completion"], request["answer"]) + ((request["meta"],) if with_meta else ())
    return {"score": float(fn(*args))}


def wants_meta(fn) -> bool:
    """Whether ``fn`` takes a third argument (the problem's JSONL row) besides completion and answer."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) >= 3


def _user_processes(uid: int) -> int:
    """How many processes ``uid`` has now (RLIMIT_NPROC counts them all, not just ours)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


def _watch_parent(lifeline: int, cgroup_procs: list) -> None:
    """Fork a watchdog that kills this worker, its process group and its control group when the
    parent dies: the parent holds the only write end of ``lifeline``, so the watchdog's read
    returns at its death, however the verifier is stuck (asleep, or holding the GIL in C)."""
    if os.fork() != 0:
        os.close(lifeline)
        return
    os.closerange(3, lifeline)  # the protocol pipes: the worker's death must close them
    os.closerange(lifeline + 1, 1 << 16)
    try:
        while os.read(lifeline, 1):
            pass
    finally:  # the parent is gone (or closed the worker): nothing of the worker may outlive it
        for procs in cgroup_procs:
            try:
                with open(procs) as handle:
                    for pid in handle.read().split():
                        if int(pid) != os.getpid():
                            os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        try:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        finally:
            os._exit(0)


def confine(settings: dict) -> tuple:
    """The worker's own limits and file descriptors, set before any user code runs; returns the
    (requests, replies) files of the protocol."""
    for procs in settings.get("cgroup_procs", []):  # before any fork: the verifier's children start inside
        try:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        except OSError:
            pass
    memory = settings.get("memory_mb")
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory * 2**20, memory * 2**20))
    processes = settings.get("max_processes")
    if processes and os.geteuid() != 0:  # root ignores RLIMIT_NPROC: its control group caps it instead
        cap = _user_processes(os.geteuid()) + processes
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        cap = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap if hard == resource.RLIM_INFINITY else hard))
    _watch_parent(settings["lifeline"], settings.get("cgroup_procs", []))
    requests, replies = settings["requests"], settings["replies"]
    for fd in (requests, replies):
        os.set_inheritable(fd, False)  # a process the verifier starts gets neither pipe
    os.dup2(2, 1)  # fd 1 is stderr at the OS level: the verifier's children write there too
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    return os.fdopen(requests, "r", encoding="utf-8"), os.fdopen(replies, "w", buffering=1, encoding="utf-8")


def main() -> int:
    requests, protocol = confine(json.loads(sys.argv[2]))
    spec, companions = sys.argv[1], {}
    try:
        fn = load_verifier(spec)
        with_meta = wants_meta(fn)
    except Exception as err:  # reported once, then every request answers with the error
        message = str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"
        fn, failure = None, f"cannot load verifier {spec!r}: {message}"[:1000]
    for line in requests:
        request = json.loads(line)
        if fn is None:
            text = json.dumps({"error": failure})
        else:
            try:
                text = json.dumps(answer(request, spec, fn, with_meta, companions))
            except Exception as err:  # the user's code raised, or its value is not JSON
                text = json.dumps({"error": f"{type(err).__name__}: {err}"[:1000]})  # one short line
        protocol.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
