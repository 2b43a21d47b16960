"""The seccomp filter: its BPF program checked instruction by instruction (a small interpreter
below), then each refused call tried from inside a run, and ordinary programs still working."""

from __future__ import annotations

import logging
import os
import platform

import pytest

from decoding_adapters.sandbox import runner as sandbox
from decoding_adapters.sandbox import seccomp
from decoding_adapters.sandbox.functions import FunctionSession
from decoding_adapters.sandbox.runner import SandboxConfig
from sandbox_helpers import IS_ROOT, SLOW_OK_S, run

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox needs POSIX")

NR = seccomp.SYSCALLS_X86_64
ALLOW = "allow"


# --------------------------------------------------------------------------- the BPF program


def evaluate(
    program: bytes, nr: int, arg0: int = 0, arch: int = seccomp.AUDIT_ARCH_X86_64, arg1: int = 0, arg2: int = 0
) -> str | int:
    """Run the classic-BPF ``program`` on one system call: "allow", or the errno it returns."""
    data = {seccomp.OFFSET_NR: nr, seccomp.OFFSET_ARCH: arch, seccomp.OFFSET_ARG0: arg0 & 0xFFFFFFFF,
            seccomp.OFFSET_ARG1: arg1 & 0xFFFFFFFF, seccomp.OFFSET_ARG2: arg2 & 0xFFFFFFFF}
    insns = [program[i : i + 8] for i in range(0, len(program), 8)]
    pc, accumulator = 0, 0
    for _ in range(len(insns)):
        raw = insns[pc]
        code, jt, jf, k = int.from_bytes(raw[:2], "little"), raw[2], raw[3], int.from_bytes(raw[4:], "little")
        pc += 1
        if code == seccomp.LD_W_ABS:
            accumulator = data[k]
        elif code == seccomp.RET_K:
            if k == seccomp.RET_ALLOW:
                return ALLOW
            assert k & 0xFFFF0000 == seccomp.RET_ERRNO, hex(k)
            return k & 0xFFFF
        else:
            taken = {
                seccomp.JEQ_K: accumulator == k,
                seccomp.JGE_K: accumulator >= k,
                seccomp.JSET_K: bool(accumulator & k),
            }[code]
            pc += jt if taken else jf
    raise AssertionError("the program ran off its end")


PROGRAM = seccomp.build_filter()


def test_program_fits_the_kernel_limits():
    assert len(PROGRAM) % 8 == 0 and len(PROGRAM) // 8 < 4096
    assert PROGRAM[-8:] == seccomp._insn(seccomp.RET_K, seccomp.RET_ALLOW)


@pytest.mark.parametrize("flag", ["NEWNS", "NEWCGROUP", "NEWUTS", "NEWIPC", "NEWUSER", "NEWPID", "NEWNET", "NEWTIME"])
def test_unshare_with_any_namespace_flag_is_refused(flag):
    value = getattr(seccomp, f"CLONE_{flag}")
    assert evaluate(PROGRAM, NR["unshare"], value) == seccomp.EPERM
    assert evaluate(PROGRAM, NR["unshare"], value | 0x400) == seccomp.EPERM  # mixed with CLONE_FILES
    assert evaluate(PROGRAM, NR["unshare"], 0x400) == ALLOW  # unshare(CLONE_FILES) makes no namespace


def test_clone_is_allowed_without_namespace_flags_only():
    fork_flags = 0x01200000 | 17  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD: glibc's fork
    thread_flags = 0x003D0F00  # CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | ...
    assert evaluate(PROGRAM, NR["clone"], fork_flags) == ALLOW
    assert evaluate(PROGRAM, NR["clone"], thread_flags) == ALLOW
    for flag in ("NEWNS", "NEWCGROUP", "NEWUTS", "NEWIPC", "NEWUSER", "NEWPID", "NEWNET"):
        assert evaluate(PROGRAM, NR["clone"], getattr(seccomp, f"CLONE_{flag}") | 17) == seccomp.EPERM


def test_clone3_setns_and_the_refused_calls():
    assert evaluate(PROGRAM, NR["clone3"]) == seccomp.ENOSYS  # the C library falls back to clone
    for name in seccomp.REFUSED:
        assert evaluate(PROGRAM, NR[name]) == seccomp.EPERM, name
    assert "setns" in seccomp.REFUSED and "mount" in seccomp.REFUSED


def test_only_ipv4_and_ipv6_sockets():
    assert evaluate(PROGRAM, NR["socket"], seccomp.AF_INET) == ALLOW
    assert evaluate(PROGRAM, NR["socket"], seccomp.AF_INET6) == ALLOW
    for family in (1, 16, 17, 38, 40):  # AF_UNIX, AF_NETLINK, AF_PACKET, AF_ALG, AF_VSOCK
        assert evaluate(PROGRAM, NR["socket"], family) == seccomp.EAFNOSUPPORT
    assert evaluate(PROGRAM, NR["socketpair"], 1) == seccomp.EAFNOSUPPORT


def test_what_no_control_group_counts_is_refused():
    for name in seccomp.NO_XATTRS:  # POSIX ACLs and other extended attributes
        assert evaluate(PROGRAM, NR[name]) == seccomp.EOPNOTSUPP, name
    for command in seccomp.LOCK_COMMANDS:  # byte-range and OFD locks: granted, nothing held
        assert evaluate(PROGRAM, NR["fcntl"], 3, arg1=command) == seccomp.GRANTED, command
    for command in seccomp.WATCH_COMMANDS:  # leases, dnotify
        assert evaluate(PROGRAM, NR["fcntl"], 3, arg1=command) == seccomp.ENOLCK, command
    for command in (0, 1, 2, 3, 4, 5, 36, 1030):  # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_GETLK, ...
        assert evaluate(PROGRAM, NR["fcntl"], 3, arg1=command) == ALLOW, command
    assert evaluate(PROGRAM, NR["flock"], 3, arg1=2) == seccomp.GRANTED
    for option in seccomp.SOCKET_FILTER_OPTIONS:
        assert evaluate(PROGRAM, NR["setsockopt"], 3, arg1=seccomp.SOL_SOCKET, arg2=option) == seccomp.EPERM
        assert evaluate(PROGRAM, NR["setsockopt"], 3, arg1=6, arg2=option) == ALLOW  # IPPROTO_TCP: another option
    assert evaluate(PROGRAM, NR["setsockopt"], 3, arg1=seccomp.SOL_SOCKET, arg2=2) == ALLOW  # SO_REUSEADDR
    assert evaluate(PROGRAM, NR["prctl"], seccomp.PR_SET_SECCOMP) == seccomp.EPERM
    assert evaluate(PROGRAM, NR["prctl"], 15) == ALLOW  # PR_SET_NAME
    for name in ("seccomp", "inotify_init", "inotify_init1", "inotify_add_watch", "io_setup"):
        assert evaluate(PROGRAM, NR[name]) == seccomp.EPERM, name


def test_other_abis_cannot_dodge_the_numbers():
    assert evaluate(PROGRAM, NR["unshare"] | seccomp.X32_SYSCALL_BIT, seccomp.CLONE_NEWUSER) == seccomp.EPERM
    assert evaluate(PROGRAM, 0 | seccomp.X32_SYSCALL_BIT) == seccomp.EPERM
    assert evaluate(PROGRAM, 310, seccomp.CLONE_NEWUSER, arch=0x40000003) == seccomp.EPERM  # i386: unshare is 310


def test_ordinary_calls_pass():
    for nr in (0, 1, 2, 9, 57, 59, 60, 231, 257):  # read, write, open, mmap, fork, execve, exit, ...
        assert evaluate(PROGRAM, nr, 0x10000000) == ALLOW


# --------------------------------------------------------------------------- inside a run


@pytest.fixture(scope="module")
def layers(layers):
    """The session's layers, where they include the seccomp filter."""
    if not layers.seccomp:
        pytest.skip("no seccomp filter on this machine")
    return layers


# Each probe prints "name=<errno name or 0>" for one call; -1 results are explained by errno.
PROBES = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def show(name, result):
    print("%s=%s" % (name, errno.errorcode.get(ctypes.get_errno(), "?") if result == -1 else "0"), flush=True)
def clone(flags):
    pid = libc.syscall(56, ctypes.c_ulong(flags), None, None, None, None)  # fork-like: the child returns 0
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return -1 if pid < 0 else 0
net = os.open("/proc/self/ns/net", os.O_RDONLY)
# setns and the clones first: once unshare(CLONE_NEWUSER) succeeds (without the filter) the
# process has no privileges left over its old namespaces.
show("setns", libc.setns(net, 0))
show("clone_user", clone(0x10000000 | 17))
show("clone_net", clone(0x40000000 | 17))
show("clone3", libc.syscall(435, None, ctypes.c_size_t(88)))
show("mount", libc.mount(b"none", b"/tmp", b"cgroup2", 0, None))
show("unshare_uts", libc.unshare(0x04000000))
show("unshare_mount", libc.unshare(0x00020000))
show("unshare_net", libc.unshare(0x40000000))
show("unshare_user", libc.unshare(0x10000000))
show("unshare_user_net", libc.unshare(0x10000000 | 0x40000000))
show("x32_unshare", libc.syscall(ctypes.c_long(0x40000000 | 272), ctypes.c_ulong(0x10000000)))
"""


def probe_results(result) -> dict[str, str]:
    assert result.ok, result.stderr
    return dict(line.split("=", 1) for line in result.stdout.split())


def test_every_namespace_call_is_refused(layers):
    results = probe_results(run(PROBES))
    assert results["clone3"] == "ENOSYS"
    assert results["mount"] == "EPERM"
    for name, outcome in results.items():
        assert outcome in ("EPERM", "ENOSYS"), (name, outcome)


@pytest.mark.skipif(not IS_ROOT, reason="needs root: runs the program as root, where only the filter refuses")
def test_every_namespace_call_is_refused_even_for_root(layers):
    # The program runs as root (drop_privileges=False): the kernel itself would allow every call,
    # so what refuses them is the filter. The same program without the filter shows the contrast.
    filtered = probe_results(run(PROBES, drop_privileges=False))
    unfiltered = probe_results(run(PROBES, drop_privileges=False, restrict_syscalls=False))
    calls = ("setns", "clone_user", "clone_net", "mount", "unshare_uts", "unshare_mount", "unshare_net", "unshare_user")
    for name in calls:
        assert (filtered[name], unfiltered[name]) == ("EPERM", "0"), name
    assert filtered["clone3"] == "ENOSYS" and unfiltered["clone3"] == "EFAULT"  # no struct: the kernel's own answer
    assert filtered["x32_unshare"] == "EPERM"


def test_a_nested_user_namespace_is_refused_where_it_was_possible(layers):
    # As the sandbox's unprivileged uid, unshare(CLONE_NEWUSER) is allowed by the kernel (this is
    # how a program could bring up a loopback of its own): only the filter refuses it.
    code = "import ctypes\nprint(ctypes.CDLL(None, use_errno=True).unshare(0x10000000))"
    assert run(code).stdout == "-1\n"
    if not (IS_ROOT and layers.unprivileged_uid):
        return
    unfiltered = run(code, restrict_syscalls=False)
    assert unfiltered.stdout == "0\n", "the kernel refuses user namespaces here anyway"


def test_unix_and_netlink_sockets_are_refused(layers):
    code = (
        "import errno, socket\n"
        "for name, make in [('pair', socket.socketpair), ('unix', lambda: socket.socket(socket.AF_UNIX)),\n"
        "                   ('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))]:\n"
        "    try:\n"
        "        make()\n"
        "        print(name, 'made')\n"
        "    except OSError as exc:\n"
        "        print(name, errno.errorcode[exc.errno])\n"
        "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()\n"
        "print('inet made')\n"
    )
    result = run(code)
    assert result.ok, result.stderr
    lines = result.stdout.split("\n")[:4]
    assert lines == ["pair EAFNOSUPPORT", "unix EAFNOSUPPORT", "netlink EAFNOSUPPORT", "inet made"]


def test_ordinary_programs_still_work_under_the_filter(layers):
    code = (
        "import os, subprocess, sys, threading, multiprocessing, concurrent.futures\n"
        "out = []\n"
        "t = threading.Thread(target=out.append, args=(1,)); t.start(); t.join()\n"
        "with concurrent.futures.ThreadPoolExecutor(4) as pool:\n"
        "    out += list(pool.map(abs, [-2, -3]))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(7)\n"
        "out.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
        "out.append(subprocess.run([sys.executable, '-S', '-c', 'print(5)'], capture_output=True, text=True).stdout)\n"
        "ctx = multiprocessing.get_context('fork')\n"
        "with ctx.Pool(2) as pool:\n"
        "    out += pool.map(abs, [-4, -6])\n"
        "print(out, os.cpu_count() > 0)\n"
    )
    result = run(code)
    assert result.ok, result.stderr
    assert result.stdout == "[1, 2, 3, 7, '5\\n', 4, 6] True\n"
    assert result.layers.seccomp


def test_without_the_filter_the_layer_is_reported_missing(layers):
    result = run("print(1)", restrict_syscalls=False)
    assert result.ok and not result.layers.seccomp and "seccomp" in result.layers.missing()


def test_a_filter_the_kernel_refuses_means_the_program_does_not_run(layers, monkeypatch, caplog):
    # A jump past the program's end: the kernel rejects the program (EINVAL), as it would any
    # program once the host's bpf_jit_limit is spent. Fail closed: the program never starts
    # (it would have written a file and printed), and the outcome names the layer.
    broken = seccomp._insn(seccomp.JEQ_K, 0, 5, 5) + seccomp._insn(seccomp.RET_K, seccomp.RET_ALLOW)
    monkeypatch.setattr(sandbox, "_syscall_filter", lambda: broken)
    monkeypatch.setattr(sandbox, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="decoding_adapters.sandbox.runner"):
        result = run("print('ran')")
    assert (result.status, result.stdout, result.returncode) == ("setup_failed", "", None)
    assert result.failed_layer == "seccomp: seccomp: Invalid argument" and not result.layers.seccomp
    assert "the program did not run (seccomp: seccomp: Invalid argument)" in caplog.text
    with FunctionSession("def f():\n    return 1\n", "f", SandboxConfig(timeout_s=SLOW_OK_S)) as session:
        outcome = session.call_outcome()
    assert not outcome.ok and "could not set up seccomp" in outcome.error
    assert session.result.status == "setup_failed"


def test_a_machine_without_a_table_reports_no_filter(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "sparc64")
    assert seccomp.syscall_filter() is None


# Each call the filter refuses to keep uncounted kernel objects out of reach, tried once from
# inside a run (the sizes are tiny: what is checked is the refusal, not the exhaustion).
UNCOUNTED = r"""
import ctypes, errno, fcntl, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
def show(name, result):
    print("%s=%s" % (name, errno.errorcode.get(ctypes.get_errno(), "?") if result == -1 else "0"), flush=True)
def attempt(name, call):
    try:
        call()
        print(name + "=0", flush=True)
    except OSError as exc:
        print("%s=%s" % (name, errno.errorcode.get(exc.errno, "?")), flush=True)
os.mkdir("d")
acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 7, 0xFFFFFFFF) for tag in (1, 4, 32))
show("acl_access", libc.setxattr(b"d", b"system.posix_acl_access", acl, len(acl), 0))
show("acl_default", libc.setxattr(b"d", b"system.posix_acl_default", acl, len(acl), 0))
show("user_xattr", libc.setxattr(b"d", b"user.x", b"y", 1, 0))
show("lsetxattr", libc.lsetxattr(b"d", b"user.x", b"y", 1, 0))
fd = os.open("f", os.O_CREAT | os.O_RDWR)
show("fsetxattr", libc.fsetxattr(fd, b"user.x", b"y", 1, 0))
show("setxattrat", libc.syscall(463, -100, b"d", 0, b"user.x", None, 0))
def held(start):
    # What another process sees at byte ``start`` of "f" (through a file description of its own).
    pid = os.fork()
    if pid == 0:
        other = os.open("f", os.O_RDWR)
        answer = fcntl.fcntl(other, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, start, 1, 0))
        os._exit(0 if struct.unpack("hhqqi", answer)[0] == fcntl.F_UNLCK else 1)
    print("held_%d=%s" % (start, "yes" if os.waitpid(pid, 0)[1] else "no"), flush=True)
attempt("lockf", lambda: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0))
held(0)
attempt("ofd_lock", lambda: fcntl.fcntl(fd, 37, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 10, 1, 0)))
held(10)
attempt("flock", lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB))
attempt("lease", lambda: fcntl.fcntl(fd, 1024, fcntl.F_RDLCK))
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
accept_all = struct.pack("HBBI", 0x06, 0, 0, 0xFFFF)  # one classic-BPF instruction: ret #65535
keep = ctypes.create_string_buffer(accept_all)
fprog = struct.pack("HL", 1, ctypes.addressof(keep))
attempt("so_attach_filter", lambda: sock.setsockopt(socket.SOL_SOCKET, 26, fprog))
attempt("so_attach_reuseport_cbpf", lambda: sock.setsockopt(socket.SOL_SOCKET, 51, fprog))
show("seccomp", libc.syscall(317, 1, 0, ctypes.c_void_p(0)))
show("prctl_seccomp", libc.prctl(22, 2, ctypes.c_void_p(0), 0, 0))
show("inotify", libc.inotify_init1(0))
ctx = ctypes.c_ulong(0)
show("io_setup", libc.syscall(206, 1, ctypes.byref(ctx)))
attempt("reuseaddr", lambda: sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1))
attempt("getfl", lambda: fcntl.fcntl(fd, fcntl.F_GETFL))
"""


def test_sqlite_on_a_file_still_works(layers):
    # It takes byte-range locks on its file: granted (nothing held), so a one-process program works.
    code = (
        "import sqlite3\n"
        "db = sqlite3.connect('db.sqlite')\n"
        "db.execute('create table t(x)'); db.execute('insert into t values (7)'); db.commit()\n"
        "print(db.execute('select x from t').fetchall())\n"
    )
    result = run(code)
    assert (result.status, result.stdout) == ("ok", "[(7,)]\n"), result.stderr


def test_uncounted_kernel_objects_are_refused_inside_a_run(layers):
    results = probe_results(run(UNCOUNTED))
    expected = {name: "ENOTSUP" for name in ("acl_access", "acl_default", "user_xattr", "lsetxattr",
                                                   "fsetxattr", "setxattrat")}
    expected.update(lockf="0", ofd_lock="0", flock="0", held_0="no", held_10="no", lease="ENOLCK")  # granted, not held
    expected.update({name: "EPERM" for name in ("so_attach_filter", "so_attach_reuseport_cbpf", "seccomp",
                                                "prctl_seccomp", "inotify", "io_setup")})
    expected.update(reuseaddr="0", getfl="0")
    assert results == expected


@pytest.mark.skipif(not IS_ROOT, reason="needs root to show the contrast: the same calls without the filter")
def test_without_the_filter_the_kernel_would_take_them(layers):
    results = probe_results(run(UNCOUNTED, restrict_syscalls=False))
    for name in ("acl_access", "acl_default", "lockf", "ofd_lock", "flock", "so_attach_filter", "inotify"):
        assert results[name] == "0", (name, results[name])
    assert results["held_0"] == results["held_10"] == "yes"
