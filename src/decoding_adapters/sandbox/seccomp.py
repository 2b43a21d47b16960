"""The seccomp filter a sandboxed program runs under: a small classic-BPF program, assembled here.

What it refuses (the kernel answers the program with an error; nothing is killed):

- **new namespaces**: ``unshare`` and ``clone`` with any ``CLONE_NEW*`` flag, and ``setns``, get
  EPERM; ``clone3`` gets ENOSYS, because its flags sit in a struct a filter cannot read, and on
  ENOSYS the C library falls back to ``clone`` (threads, ``posix_spawn``), whose flags are
  checked. A user namespace of its own would let the program bring up a loopback device and park
  memory in socket buffers that no control group counts, and reach kernel interfaces meant for
  privileged users;
- **sockets other than IPv4/IPv6** (``socket`` with another family, ``socketpair``) get
  EAFNOSUPPORT: Unix-domain and netlink socket buffers are kernel memory that no control group
  charges (measured: ~28 MB per process with 120 socket pairs, outside the run's memory limit),
  while IPv4/IPv6 buffers are charged (cgroup v2) or capped (v1, see the runner) and, with the
  loopback device down, cannot hold data anyway. So programs cannot use ``socket.socketpair``,
  asyncio's event loops or multiprocessing's duplex pipes; ``os.pipe`` (charged) still works;
- **kernel interfaces standard-library programs never need**: mounting (``mount``,
  ``umount2``, ``pivot_root``, ``chroot`` and the new mount API), ``io_uring``, ``bpf``,
  ``userfaultfd``, ``perf_event_open``, the key ring (``keyctl``, ``add_key``,
  ``request_key``) and ``ptrace`` get EPERM;
- **kernel objects no control group counts**: extended attributes (``setxattr``,
  ``lsetxattr``, ``fsetxattr``, ``setxattrat``; a POSIX ACL of 8,190 entries per directory held
  ~1 GiB of slab outside the run's memory limit) get EOPNOTSUPP, as on a file system without
  them; byte-range and open-file-description locks (``fcntl`` with ``F_SETLK``, ``F_SETLKW``,
  ``F_OFD_SETLK``, ``F_OFD_SETLKW``) and ``flock`` are *granted without being taken*: the call
  returns 0 and the kernel holds nothing (the lock cache is not charged, and a lock on the
  shared read-only standard library is a channel between concurrent runs). A single-process
  program that locks its own files, sqlite3 on a file, works as before; processes of one
  program that rely on locks to exclude each other are not excluded. Leases and directory
  notifications (``F_SETLEASE``, ``F_NOTIFY``: a watch is a channel too) get ENOLCK;
  socket filters (``setsockopt`` ``SO_ATTACH_FILTER``, ``SO_ATTACH_BPF`` and their
  ``SO_ATTACH_REUSEPORT_*`` forms) and seccomp filters of the program's own (``seccomp``,
  ``prctl(PR_SET_SECCOMP)``) get EPERM: their compiled code counts against the host-wide
  ``bpf_jit_limit``, and once that is spent no run could install this filter; ``inotify``
  (a channel: another run opening a shared file) and asynchronous I/O contexts (``io_setup``:
  a host-wide quota) get EPERM too;
- **other system-call ABIs**: a call made through the 32-bit (``int 0x80``) or x32 entry points,
  whose numbers differ, gets EPERM, so the numbers above cannot be dodged.

Only x86_64 has a table here; elsewhere :func:`syscall_filter` returns None and the runner
reports the layer as missing.
"""

from __future__ import annotations

import platform

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data {int nr; u32 arch; u64 instruction_pointer; u64 args[6];}: byte offsets.
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16  # the low 32 bits of args[0] (little-endian)
OFFSET_ARG1, OFFSET_ARG2 = 24, 32  # the low 32 bits of args[1], args[2]

# Classic BPF opcodes (linux/filter.h).
LD_W_ABS = 0x20  # A = 32-bit word at offset k of seccomp_data
JEQ_K = 0x15  # if A == k: jump jt else jf
JGE_K = 0x35  # if A >= k
JSET_K = 0x45  # if A & k
RET_K = 0x06  # return k

RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000  # | errno
EPERM, ENOLCK, ENOSYS, EAFNOSUPPORT, EOPNOTSUPP = 1, 37, 38, 97, 95

CLONE_NEWTIME = 0x00000080  # unshare only: in clone's flags these bits are the exit signal
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
CLONE_NAMESPACES = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)
UNSHARE_NAMESPACES = CLONE_NAMESPACES | CLONE_NEWTIME

AF_INET, AF_INET6 = 2, 10

GRANTED = 0
"""The "errno" of a call answered with success without running it."""
F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_NOTIFY = 6, 7, 37, 38, 1024, 1026
LOCK_COMMANDS = (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW)
"""``fcntl`` commands that take a lock (the kernel keeps one uncharged object per range): granted
without being taken."""
WATCH_COMMANDS = (F_SETLEASE, F_NOTIFY)
"""``fcntl`` commands that take a lease or watch a directory (dnotify): refused with ENOLCK."""
SOL_SOCKET = 1
SO_ATTACH_FILTER, SO_ATTACH_BPF, SO_ATTACH_REUSEPORT_CBPF, SO_ATTACH_REUSEPORT_EBPF = 26, 50, 51, 52
SOCKET_FILTER_OPTIONS = (SO_ATTACH_FILTER, SO_ATTACH_BPF, SO_ATTACH_REUSEPORT_CBPF, SO_ATTACH_REUSEPORT_EBPF)
"""``setsockopt(SOL_SOCKET, ...)`` options that attach a BPF program to a socket."""
PR_SET_SECCOMP = 22

SYSCALLS_X86_64 = {
    "ptrace": 101,
    "pivot_root": 155,
    "chroot": 161,
    "mount": 165,
    "umount2": 166,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "setns": 308,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "mount_setattr": 442,
    "clone": 56,
    "socket": 41,
    "socketpair": 53,
    "setsockopt": 54,
    "fcntl": 72,
    "flock": 73,
    "prctl": 157,
    "setxattr": 188,
    "lsetxattr": 189,
    "fsetxattr": 190,
    "io_setup": 206,
    "inotify_init": 253,
    "inotify_add_watch": 254,
    "inotify_init1": 294,
    "seccomp": 317,
    "setxattrat": 463,
}
"""System-call numbers the filter names (x86_64)."""

REFUSED = (
    "setns", "ptrace", "pivot_root", "chroot", "mount", "umount2", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "add_key", "request_key", "keyctl", "perf_event_open", "bpf", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "seccomp", "inotify_init", "inotify_init1",
    "inotify_add_watch", "io_setup",
)  # fmt: skip
"""Calls refused outright with EPERM."""
NO_XATTRS = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat")
"""Calls refused with EOPNOTSUPP (what a file system without extended attributes answers)."""


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    # struct sock_filter {u16 code; u8 jt; u8 jf; u32 k;}, native byte order (little-endian here).
    return code.to_bytes(2, "little") + bytes((jt, jf)) + k.to_bytes(4, "little")


def _errno(number: int) -> bytes:
    return _insn(RET_K, RET_ERRNO | number)


def _rule(nr: int, body: list[bytes]) -> list[bytes]:
    """If the call is ``nr``, run ``body`` (which must end every path in a return), else skip it."""
    return [_insn(JEQ_K, nr, 0, len(body)), *body]


def _refuse_flags(mask: int) -> list[bytes]:
    """EPERM when args[0] has any bit of ``mask`` (clone's and unshare's flags), else allow."""
    return [_insn(LD_W_ABS, OFFSET_ARG0), _insn(JSET_K, mask, 0, 1), _errno(EPERM), _insn(RET_K, RET_ALLOW)]


def _socket_families() -> list[bytes]:
    """Allow AF_INET and AF_INET6 (args[0] of socket), refuse every other family."""
    return [
        _insn(LD_W_ABS, OFFSET_ARG0),
        _insn(JEQ_K, AF_INET, 2, 0),
        _insn(JEQ_K, AF_INET6, 1, 0),
        _errno(EAFNOSUPPORT),
        _insn(RET_K, RET_ALLOW),
    ]


def _answer_values(offset: int, answers: list[tuple[tuple[int, ...], int]]) -> list[bytes]:
    """For each ``(values, errno)`` of ``answers``: that errno when the 32-bit argument word at
    ``offset`` is one of ``values``; allow any other value."""
    count = sum(len(values) for values, _ in answers)
    body, done = [_insn(LD_W_ABS, offset)], 0
    for index, (values, _) in enumerate(answers):
        for value in values:
            done += 1
            # Jump over the tests left, the allow and the returns of earlier answers.
            body.append(_insn(JEQ_K, value, (count - done) + 1 + index, 0))
    body.append(_insn(RET_K, RET_ALLOW))
    return body + [_errno(number) for _, number in answers]


def _refuse_values(offset: int, values: tuple[int, ...], number: int) -> list[bytes]:
    """``number`` (an errno) when the 32-bit argument word at ``offset`` is one of ``values``, else allow."""
    return _answer_values(offset, [(values, number)])


def _socket_options() -> list[bytes]:
    """EPERM for ``setsockopt(fd, SOL_SOCKET, SO_ATTACH_*)``, allow everything else."""
    level = [_insn(LD_W_ABS, OFFSET_ARG1), _insn(JEQ_K, SOL_SOCKET, 1, 0), _insn(RET_K, RET_ALLOW)]
    return level + _refuse_values(OFFSET_ARG2, SOCKET_FILTER_OPTIONS, EPERM)


def build_filter(numbers: dict[str, int] = SYSCALLS_X86_64, arch: int = AUDIT_ARCH_X86_64) -> bytes:
    """The filter as the kernel takes it: an array of ``struct sock_filter``."""
    program = [
        _insn(LD_W_ABS, OFFSET_ARCH),
        _insn(JEQ_K, arch, 1, 0),
        _errno(EPERM),  # another ABI (i386 through int 0x80)
        _insn(LD_W_ABS, OFFSET_NR),
        _insn(JGE_K, X32_SYSCALL_BIT, 0, 1),
        _errno(EPERM),  # the x32 ABI: same calls, numbers with this bit set
    ]
    program += _rule(numbers["clone"], _refuse_flags(CLONE_NAMESPACES))
    program += _rule(numbers["unshare"], _refuse_flags(UNSHARE_NAMESPACES))
    program += _rule(numbers["clone3"], [_errno(ENOSYS)])
    program += _rule(numbers["socket"], _socket_families())
    program += _rule(numbers["socketpair"], [_errno(EAFNOSUPPORT)])
    program += _rule(numbers["setsockopt"], _socket_options())
    locks = [(LOCK_COMMANDS, GRANTED), (WATCH_COMMANDS, ENOLCK)]
    program += _rule(numbers["fcntl"], _answer_values(OFFSET_ARG1, locks))
    program += _rule(numbers["flock"], [_errno(GRANTED)])
    program += _rule(numbers["prctl"], _refuse_values(OFFSET_ARG0, (PR_SET_SECCOMP,), EPERM))
    for name in NO_XATTRS:
        program += _rule(numbers[name], [_errno(EOPNOTSUPP)])
    for name in REFUSED:
        program += _rule(numbers[name], [_errno(EPERM)])
    program.append(_insn(RET_K, RET_ALLOW))
    return b"".join(program)


def syscall_filter() -> bytes | None:
    """The filter for this machine, or None where there is no system-call table for it."""
    if platform.machine() != "x86_64":
        return None
    return build_filter()
