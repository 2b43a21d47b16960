"""Control groups: one per sandboxed run (its memory, processes and CPU time as a whole), and one
per long-lived helper that runs user code outside the sandbox (the ``jsonl`` task's verifier).

:class:`ControlGroups` probes once what the host lets this process make (cgroup v2, else the v1
memory, pids and cpu hierarchies) and makes and removes the groups; where nothing is writable it
says why (``unavailable``) and runs fall back to per-process limits
(:mod:`~decoding_adapters.sandbox.runner` decides what a run without its group may do).

A run's group limits its memory (tmpfs pages included; a process the group kills for memory, the
program or the run's init, which leaves no exit status, makes the run's status "memory") and its
processes for the whole run, not per process. Its CPU quota gives the whole run ``cpu_cores`` of
CPU time per second however many processes or sessions it starts, and being in a group of its own
takes it out of the scheduler's per-session autogroups (sixty ``setsid()`` spinners would otherwise
get sixty fair shares against the trainer). Socket buffers: cgroup v2 charges them to the memory
limit; v1 keeps them apart and only counts them once capped, so each run's
``memory.kmem.tcp.limit_in_bytes`` is set to :data:`SOCKET_MEMORY_BYTES`.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import NamedTuple

SOCKET_MEMORY_BYTES = 4 * 2**20
"""Cap on a run's socket buffers where cgroup v1 keeps them apart from its memory limit."""


class GroupLimits(NamedTuple):
    """What a group caps (a run's :class:`~decoding_adapters.sandbox.runner.SandboxConfig` has the
    same fields and is passed as it is)."""

    memory_mb: int
    """Memory of the whole group, in MiB."""
    max_processes: int
    """Processes (and threads) of the whole group."""
    cpu_cores: float
    """CPU time per second of wall time, in cores."""


class ControlGroups:
    """One control group per run, limiting the memory, the processes and the CPU time of the whole run.

    cgroup v2: a group ``decoding-adapters-sandbox`` beside ours (our own group holds processes,
    so it may not delegate controllers), with ``memory``, ``pids`` and (where offered) ``cpu``
    enabled for its children. cgroup v1: ``decoding-adapters-sandbox`` under our group in the
    memory, pids and (where mounted) cpu hierarchies. Each run gets ``run-<pid>-<n>`` there; the
    bootstrap joins it before it forks. Probed once; where nothing is writable (no root, no
    delegation) runs fall back to per-process limits. Once probed successfully, a run whose own
    group cannot be made does not run (see :attr:`~decoding_adapters.sandbox.runner.SandboxConfig.use_cgroup`).

    The CPU quota (``cpu_cores``) also takes the run out of the scheduler's autogroups: a task
    in a control group of its own is scheduled as that group, so a program that starts sixty
    ``setsid()`` sessions still shares one quota instead of getting sixty fair shares.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probed = False
        self._bases: list[str] = []
        self._counter = 0
        self._leftovers: list[str] = []
        self.version: str | None = None
        self.unavailable: str | None = None
        self.socket_memory_error: str | None = None
        self.cpu_unavailable: str | None = None
        """Why runs get no CPU quota although they get a control group (None when they do)."""

    @property
    def required(self) -> bool:
        """The probe found usable control groups: every run must get one."""
        with self._lock:
            if not self._probed:
                self._probe()
            return bool(self._bases)

    def create(self, config: GroupLimits) -> tuple[list[str], list[str], bool, bool]:
        """(directories, cgroup.procs files, whether socket buffers are bounded, whether the CPU
        time is capped) of a new group for one run; empty when unavailable."""
        with self._lock:
            if not self._probed:
                self._probe()
            if not self._bases:
                return [], [], False, False
            self._counter += 1
            name = f"run-{os.getpid()}-{self._counter}"
            leftovers, self._leftovers = self._leftovers, []
        self._remove_now(leftovers)
        dirs = []
        try:
            for base in self._bases:
                path = os.path.join(base, name)
                os.mkdir(path)
                dirs.append(path)
                self._limit(path, config)
        except OSError as err:
            self.remove(dirs)
            self.unavailable = f"could not make a control group for a run: {err}"
            return [], [], False, False
        socket_memory = self.version == "v2" or any(map(self._cap_socket_memory, dirs))
        cpu_limited = any(os.path.exists(os.path.join(path, name)) for path in dirs for name in _CPU_FILES)
        return dirs, [os.path.join(path, "cgroup.procs") for path in dirs], socket_memory, cpu_limited

    def _cap_socket_memory(self, path: str) -> bool:
        """cgroup v1 charges socket buffers to a counter of their own, and only once it has a
        limit: set one (v2 charges them to ``memory.max``, nothing to do)."""
        if not os.path.exists(os.path.join(path, "memory.limit_in_bytes")):
            return False  # the pids group
        target = os.path.join(path, "memory.kmem.tcp.limit_in_bytes")
        if not os.path.exists(target):
            self.socket_memory_error = "no memory.kmem.tcp.limit_in_bytes (a kernel without v1 socket accounting)"
            return False
        try:
            with open(target, "w") as handle:
                handle.write(str(SOCKET_MEMORY_BYTES))
        except OSError as err:
            self.socket_memory_error = f"memory.kmem.tcp.limit_in_bytes refused: {err}"
            return False
        return True

    def _limit(self, path: str, config: GroupLimits) -> None:
        memory = str(config.memory_mb * 2**20)
        quota = max(1000, round(config.cpu_cores * CPU_PERIOD_US))
        files = {
            "memory.max": memory,
            "memory.swap.max": "0",  # v2
            "memory.limit_in_bytes": memory,
            "memory.memsw.limit_in_bytes": memory,  # v1 (memsw after)
            "pids.max": str(config.max_processes),
            "cpu.max": f"{quota} {CPU_PERIOD_US}",  # v2
            "cpu.cfs_period_us": str(CPU_PERIOD_US),  # v1 (the period first: the quota is checked against it)
            "cpu.cfs_quota_us": str(quota),
        }
        for name, value in files.items():
            target = os.path.join(path, name)
            if os.path.exists(target):
                with open(target, "w") as handle:
                    handle.write(value)

    def remove(self, dirs: list[str]) -> None:
        """Kill what is left in the run's groups and remove them (later, if still busy)."""
        busy = self._remove_now(dirs)
        if busy:
            with self._lock:
                self._leftovers.extend(busy)

    def _remove_now(self, dirs: list[str], wait_s: float = 0.5) -> list[str]:
        deadline = time.monotonic() + wait_s
        pending = list(dirs)
        while pending:
            for path in list(pending):
                _kill_cgroup(path)
                try:
                    os.rmdir(path)
                    pending.remove(path)
                except FileNotFoundError:
                    pending.remove(path)
                except OSError:
                    pass  # processes still dying (SIGKILL is asynchronous)
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        return pending

    def _probe(self) -> None:
        self._probed = True
        try:
            mounts = _cgroup_mounts()
            own = _own_cgroups()
        except OSError as err:
            self.unavailable = f"cannot read the control groups: {err}"
            return
        failures = []
        v2 = mounts.get("cgroup2")
        if v2 and "" in own:
            try:
                self._bases = [self._make_v2_base(v2, own[""])]
                self.version = "v2"
                return
            except OSError as err:
                failures.append(f"v2: {err}")
        if "memory" in mounts and "pids" in mounts:
            try:
                bases = [self._make_v1_base(mounts[name], own.get(name, "/")) for name in ("memory", "pids")]
                self._bases, self.version = bases, "v1"
            except OSError as err:
                failures.append(f"v1: {err}")
            else:
                try:  # the CPU quota is a layer of its own: runs still get memory and pids without it
                    if "cpu" not in mounts:
                        raise OSError("no v1 cpu hierarchy mounted")
                    self._bases.append(self._make_v1_base(mounts["cpu"], own.get("cpu", "/")))
                except OSError as err:
                    self.cpu_unavailable = str(err)
                return
        self.unavailable = (
            "; ".join(failures) or "no cgroup v2 with memory and pids, nor v1 memory and pids hierarchies"
        )

    @staticmethod
    def _make_v1_base(mount: str, own: str) -> str:
        base = os.path.join(mount + own, "decoding-adapters-sandbox")
        os.makedirs(base, exist_ok=True)
        if not os.access(base, os.W_OK):
            raise PermissionError(f"{base} is not writable")
        return base

    def _make_v2_base(self, mount: str, own: str) -> str:
        parent = os.path.normpath(mount + os.path.dirname(own.rstrip("/")) if own != "/" else mount)
        with open(os.path.join(parent, "cgroup.controllers")) as handle:
            available = handle.read().split()
        if not {"memory", "pids"} <= set(available):
            raise OSError(f"memory and pids controllers not available in {parent} (only {available})")
        base = os.path.join(parent, "decoding-adapters-sandbox")
        os.makedirs(base, exist_ok=True)
        if not os.access(base, os.W_OK):
            raise PermissionError(f"{base} is not writable")
        controllers = "+memory +pids" + (" +cpu" if "cpu" in available else "")
        if "cpu" not in available:
            self.cpu_unavailable = f"no cpu controller in {parent}"
        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as handle:
            handle.write(controllers)
        with open(os.path.join(base, "cgroup.subtree_control"), "w") as handle:
            handle.write(controllers)
        return base


def _cgroup_mounts() -> dict[str, str]:
    """Mount points: "cgroup2" for the unified hierarchy, controller names for v1 hierarchies."""
    found: dict[str, str] = {}
    with open("/proc/self/mounts") as handle:
        for line in handle:
            _source, target, fstype, options, *_ = line.split()
            if fstype == "cgroup2":
                found.setdefault("cgroup2", target)
            elif fstype == "cgroup":
                for option in options.split(","):
                    if option in ("memory", "pids", "cpu"):
                        found.setdefault(option, target)
    return found


def _own_cgroups() -> dict[str, str]:
    """Our group per v1 controller, and under "" in the unified hierarchy."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path
    return own


def oom_kills(path: str) -> int:
    """Processes the group's memory limit has killed (v2 ``memory.events``, v1
    ``memory.oom_control``; 0 for a pids group)."""
    for name in ("memory.events", "memory.oom_control"):
        try:
            with open(os.path.join(path, name)) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return 0


def _kill_cgroup(path: str) -> None:
    kill_file = os.path.join(path, "cgroup.kill")  # v2, Linux 5.14+
    try:
        if os.path.exists(kill_file):
            with open(kill_file, "w") as handle:
                handle.write("1")
            return
        with open(os.path.join(path, "cgroup.procs")) as handle:
            pids = [int(line) for line in handle if line.strip()]
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


CPU_PERIOD_US = 100_000
"""Period of the CPU quota: a run may use ``cpu_cores`` x this much CPU time per period."""
_CPU_FILES = ("cpu.max", "cpu.cfs_quota_us")

CONTROL_GROUPS = ControlGroups()
"""The process's one prober and maker of groups (the sandbox's runs and the helpers')."""


def helper_control_group(memory_mb: int, max_processes: int) -> tuple[list[str], list[str]]:
    """A control group for a long-lived helper process that runs user code outside the sandbox
    (the user's verifier): ``(directories, cgroup.procs files)``, both empty where the host has
    none to give. The process writes its own pid into each ``cgroup.procs`` file before it runs
    the user's code; :func:`release_control_group` kills what is left and removes the group. Its
    memory and process count are capped for the whole group (a child that calls ``setsid`` stays
    in it); its CPU is not (the helper is a part of the caller's own work)."""
    limits = GroupLimits(memory_mb=memory_mb, max_processes=max_processes, cpu_cores=float(os.cpu_count() or 1))
    dirs, procs, _, _ = CONTROL_GROUPS.create(limits)
    return dirs, procs


def release_control_group(dirs: list[str]) -> None:
    """Kill every process left in a :func:`helper_control_group` and remove it."""
    if dirs:
        CONTROL_GROUPS.remove(dirs)
