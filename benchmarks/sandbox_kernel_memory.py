"""Kernel memory a sandboxed run can hold outside its control group, per known kind of object.

    PYTHONPATH=src python benchmarks/sandbox_kernel_memory.py [--kinds acl_dirs,posix_locks,...]
        [--repeats 2] [--unfiltered] [--scale 1.0]

For each kind, a program makes as many of those kernel objects as it can (up to a size set by
``--scale``), answers how many it made, and stays alive holding them; meanwhile this script reads
the host's unreclaimable slab (``SUnreclaim`` in /proc/meminfo) and vmalloc use, and the run's
own kernel-memory charge (v1 ``memory.kmem.usage_in_bytes``, v2 ``memory.stat`` kernel). What the
host gained beyond what the run was charged is kernel memory held outside the run's limit:

    outside = (SUnreclaim while held - SUnreclaim before) - (the run's kernel charge)

The machine is shared, so other work moves SUnreclaim by a few MiB: each kind is measured
``--repeats`` times beside an idle run of the same shape, and the median is printed.
``--unfiltered`` runs the same programs without the seccomp filter (smaller sizes: ``--scale``)
to show the attacks are real here. Prints a table and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from decoding_adapters.sandbox import runner as sandbox
from decoding_adapters.sandbox.functions import FunctionSession

MiB = 2**20

# Each program defines f(n) that makes up to n objects of one kind and returns how many it made.
PRELUDE = r"""
import ctypes, errno, fcntl, os, socket, struct, mmap, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def acl(entries):
    # POSIX ACL xattr: version 2, then (tag, perm, id) sorted by tag: USER_OBJ, USER..., GROUP_OBJ, MASK, OTHER
    body = [struct.pack("<HHI", 1, 7, 0xFFFFFFFF)]
    body += [struct.pack("<HHI", 2, 7, 100000 + i) for i in range(entries)]
    body += [struct.pack("<HHI", tag, 7, 0xFFFFFFFF) for tag in (4, 16, 32)]
    return struct.pack("<I", 2) + b"".join(body)
ACL = acl(8185)  # 8,190 entries: the largest that fits one xattr (64 KiB)
def forked(workers, work):
    # Children that each make objects, report how many and stay alive holding them.
    r, w = os.pipe()
    for k in range(workers):
        if os.fork() == 0:
            os.write(w, struct.pack("<i", work(k)))
            while True:
                time.sleep(60)
    return sum(struct.unpack("<i", os.read(r, 4))[0] for _ in range(workers))
"""

KINDS = {
    "acl_dirs": r"""
def f(n):
    made = 0
    for i in range(n):
        os.mkdir("a%d" % i)
        for name in (b"system.posix_acl_access", b"system.posix_acl_default"):
            if libc.setxattr(("a%d" % i).encode(), name, ACL, len(ACL), 0) == 0:
                made += 1
    return made
""",
    "acl_memfds": r"""
def f(n):
    made, keep = 0, []
    for i in range(min(n, 200)):
        fd = os.memfd_create("m%d" % i)
        keep.append(fd)
        if libc.fsetxattr(fd, b"system.posix_acl_access", ACL, len(ACL), 0) == 0:
            made += 1
    globals()["keep"] = keep
    return made
""",
    "posix_locks": r"""
def f(n):
    per = max(1, n // 8)
    def work(w):
        made = 0
        fd = os.open("locks%d" % w, os.O_CREAT | os.O_RDWR)
        for i in range(per, 0, -1):  # descending, apart: nothing merges
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * i)
                made += 1
            except OSError:
                break
        return made
    return forked(8, work)
""",
    "ofd_locks": r"""
def f(n):
    made = 0
    fds = [os.open("ofd%d" % k, os.O_CREAT | os.O_RDWR) for k in range(8)]
    per = max(1, n // 8)
    for fd in fds:
        for i in range(per, 0, -1):
            try:
                fcntl.fcntl(fd, 37, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 2 * i, 1, 0))
                made += 1
            except OSError:
                return made
    return made
""",
    "flock": r"""
def f(n):
    made, keep = 0, []
    for i in range(min(n, 200)):
        fd = os.open("fl%d" % i, os.O_CREAT | os.O_RDWR)
        keep.append(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            made += 1
        except OSError:
            break
    globals()["keep"] = keep
    return made
""",
    "socket_filters": r"""
def f(n):
    made, keep = 0, []
    insns = b"".join(struct.pack("HBBI", 0x15, 0, 0, i) for i in range(4095)) + struct.pack("HBBI", 0x06, 0, 0, 0xFFFF)
    buf = ctypes.create_string_buffer(insns)
    prog = struct.pack("HL", len(insns) // 8, ctypes.addressof(buf))
    for i in range(min(n, 200)):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keep.append(s)
        try:
            s.setsockopt(socket.SOL_SOCKET, 26, prog)
            made += 1
        except OSError:
            break
    globals()["keep"] = keep
    return made
""",
    "seccomp_filters": r"""
def f(n):
    made = 0
    load_nr = struct.pack("HBBI", 0x20, 0, 0, 0)
    tests = b"".join(struct.pack("HBBI", 0x15, 0, 0, 1000 + i) for i in range(4094))
    insns = load_nr + tests + struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000)
    buf = ctypes.create_string_buffer(insns)
    prog = struct.pack("HL", len(insns) // 8, ctypes.addressof(buf))
    pbuf = ctypes.create_string_buffer(prog)
    libc.prctl(38, 1, 0, 0, 0)
    for i in range(min(n, 7)):
        if libc.syscall(317, 1, 0, ctypes.c_void_p(ctypes.addressof(pbuf))) != 0:
            break
        made += 1
    return made
""",
    "inotify": r"""
def f(n):
    made = 0
    for k in range(100):
        open("w%d" % k, "w").close()
    fds = []
    for i in range(min(n // 100 + 1, 120)):
        fd = libc.inotify_init1(0)
        if fd < 0:
            break
        fds.append(fd)
        for k in range(100):
            if libc.inotify_add_watch(fd, ("w%d" % k).encode(), 0xFFF) >= 0:
                made += 1
    return made
""",
    "pipes": r"""
def f(n):
    made, keep = 0, []
    for i in range(min(n, 100)):
        r, w = os.pipe()
        keep.append((r, w))
        try:
            fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
        except OSError:
            pass
        os.set_blocking(w, False)
        try:
            while True:
                made += os.write(w, b"x" * 65536)
        except BlockingIOError:
            pass
    globals()["keep"] = keep
    return made // 65536
""",
    "negative_dentries": r"""
def f(n):
    made = 0
    tag = os.urandom(4).hex()  # names no earlier run looked up
    for i in range(n * 20):
        try:
            os.stat("/usr/lib/nonexistent-%s-%d" % (tag, i))
        except OSError:
            made += 1
    return made
""",
    "tmpfs_inodes": r"""
def f(n):
    made = 0
    for i in range(min(n * 4, 4000)):
        try:
            os.mkdir("d%d" % i)
            made += 1
        except OSError:
            break
    return made
""",
    "mappings": r"""
def f(n):
    made, keep = 0, []
    for i in range(min(n * 30, 30000)):
        try:
            keep.append(mmap.mmap(-1, 4096, prot=mmap.PROT_READ if i % 2 else mmap.PROT_READ | mmap.PROT_WRITE))
            made += 1
        except OSError:
            break
    globals()["keep"] = keep
    return made
""",
    "epoll": r"""
import select
def f(n):
    made, keep = 0, []
    r, w = os.pipe()
    watched = [os.dup(r) for _ in range(120)]
    for i in range(min(n, 120)):
        ep = select.epoll()
        keep.append(ep)
        for fd in watched:
            ep.register(fd, select.EPOLLIN)
            made += 1
    globals()["keep"] = keep
    return made
""",
}
KINDS["sysv_sem"] = r"""
def f(n):
    made = 0
    for i in range(min(n, 2000)):
        if libc.semget(0, 250, 0o600 | 0o1000) < 0:  # IPC_PRIVATE, 250 semaphores, IPC_CREAT
            break
        made += 1
    return made
"""
KINDS["timerfds_eventfds"] = r"""
def f(n):
    def work(w):
        made, keep = 0, []
        for i in range(120):
            for make in (lambda: libc.timerfd_create(1, 0), lambda: os.eventfd(0)):
                fd = make()
                if fd is None or fd < 0:
                    return made
                keep.append(fd)
                made += 1
        globals()["keep"] = keep
        return made
    return forked(min(n, 50), work)
"""
KINDS["threads"] = r"""
def f(n):
    made = 0
    stop = threading.Event()
    for i in range(min(n, 55)):
        try:
            threading.Thread(target=stop.wait, daemon=True).start()
            made += 1
        except RuntimeError:
            break
    return made
"""
KINDS["tcp_sockets"] = r"""
def f(n):
    made, keep = 0, []
    for i in range(min(n, 240)):
        s = socket.socket()
        keep.append(s)
        made += 1
    globals()["keep"] = keep
    return made
"""
KINDS["sysv_msg"] = r"""
def f(n):
    made = 0
    libc.msgget.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(struct.pack("l", 1) + b"x" * 8000)
    for i in range(min(n, 2000)):
        q = libc.msgget(0, 0o600 | 0o1000)  # IPC_PRIVATE | IPC_CREAT
        if q < 0:
            break
        for _ in range(2):
            if libc.msgsnd(q, buf, 8000, 0o4000) == 0:  # IPC_NOWAIT
                made += 1
    return made
"""

REFUSED_NOW = {"acl_dirs", "acl_memfds", "posix_locks", "ofd_locks", "flock", "socket_filters", "seccomp_filters",
               "inotify"}  # fmt: skip
"""Kinds the seccomp filter refuses (the rest are charged to the run's control group)."""

SIZES = {"acl_dirs": 1000, "acl_memfds": 200, "posix_locks": 200_000, "ofd_locks": 200_000, "flock": 200,
         "socket_filters": 200, "seccomp_filters": 7, "inotify": 10_000, "pipes": 100, "negative_dentries": 10_000,
         "tmpfs_inodes": 1000, "mappings": 1000, "epoll": 120, "sysv_msg": 2000, "sysv_sem": 2000,
         "timerfds_eventfds": 50, "threads": 55, "tcp_sockets": 240}  # fmt: skip


def meminfo() -> dict[str, int]:
    values = {}
    with open("/proc/meminfo") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            values[key] = int(rest.split()[0]) * 1024
    return values


def run_kernel_charge(dirs: list[str]) -> int:
    """The run's kernel-memory charge in bytes (v1 kmem counter, else v2 memory.stat kernel)."""
    for path in dirs:
        kmem = os.path.join(path, "memory.kmem.usage_in_bytes")
        if os.path.exists(kmem):
            with open(kmem) as handle:
                return int(handle.read())
        stat = os.path.join(path, "memory.stat")
        if os.path.exists(stat):
            with open(stat) as handle:
                for line in handle:
                    if line.startswith("kernel "):
                        return int(line.split()[1])
    return 0


def measure(kind: str, size: int, config: sandbox.SandboxConfig) -> dict:
    """Hold ``size`` objects of ``kind`` in one run; the host's and the run's figures meanwhile."""
    code = PRELUDE + KINDS[kind]
    before = meminfo()
    with FunctionSession(code, "f", config) as session:
        started = time.monotonic()
        outcome = session.call_outcome(size)
        made_s = time.monotonic() - started
        time.sleep(0.3)
        held = meminfo()
        charge = run_kernel_charge(session._run.cgroup_dirs)
    time.sleep(0.3)
    after = meminfo()
    grown = held["SUnreclaim"] - before["SUnreclaim"]
    return {
        "made": outcome.value if outcome.ok else f"error: {outcome.error}"[:80],
        "made_s": round(made_s, 2),
        "sunreclaim_mib": round(grown / MiB, 1),
        "vmalloc_mib": round((held["VmallocUsed"] - before["VmallocUsed"]) / MiB, 1),
        "run_kmem_mib": round(charge / MiB, 1),
        "outside_mib": round((grown - charge) / MiB, 1),
        "left_after_mib": round((after["SUnreclaim"] - before["SUnreclaim"]) / MiB, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds (default: all)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies each kind's size")
    parser.add_argument("--unfiltered", action="store_true", help="without the seccomp filter (use a small --scale)")
    args = parser.parse_args()
    config = sandbox.SandboxConfig(timeout_s=30.0, restrict_syscalls=not args.unfiltered)
    idle = sandbox.execute("pass", "", config)
    print(f"layers: {idle.layers}")
    print(f"{'kind':18} {'made':>8} {'SUnreclaim':>10} {'vmalloc':>8} {'run kmem':>9} {'outside':>8}  (MiB, median)")
    figures = {"unfiltered": args.unfiltered, "scale": args.scale, "kinds": {}}
    for kind in args.kinds.split(","):
        size = max(1, int(SIZES[kind] * args.scale))
        rows = [measure(kind, size, config) for _ in range(args.repeats)]
        idle_rows = [measure("tmpfs_inodes", 1, config) for _ in range(args.repeats)]
        summary = {key: round(statistics.median(row[key] for row in rows), 1) for key in rows[0] if key != "made"}
        summary["made"] = rows[-1]["made"]
        summary["idle_outside_mib"] = round(statistics.median(row["outside_mib"] for row in idle_rows), 1)
        summary["refused_by_filter"] = kind in REFUSED_NOW
        figures["kinds"][kind] = summary
        print(
            f"{kind:18} {str(summary['made']):>8} {summary['sunreclaim_mib']:>10} {summary['vmalloc_mib']:>8} "
            f"{summary['run_kmem_mib']:>9} {summary['outside_mib']:>8}  (idle run: {summary['idle_outside_mib']})"
        )
    worst = max(summary["outside_mib"] for summary in figures["kinds"].values())
    figures["worst_outside_mib"] = worst
    print(f"most kernel memory held outside the run's control group: {worst} MiB (target <= 64)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
