"""Memory a run could hold outside its limit (socket buffers), and honest reports of memory kills.

Each test parks memory the way a hostile program would and counts, inside the run, how many bytes
the kernel accepted; the contrast run (the layer switched off) shows the attack is real here.
"""

from __future__ import annotations

import os

import pytest

from decoding_adapters.sandbox.cgroups import SOCKET_MEMORY_BYTES
from sandbox_helpers import need, run

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox needs POSIX")

MiB = 2**20


# A user and network namespace of its own, the loopback brought up, then TCP connections to
# itself whose send buffers are filled: kernel memory outside the run's memory limit, unless the
# control group charges or caps it. Prints "refused" or the bytes parked.
TCP_PARKING = r"""
import ctypes, fcntl, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000 | 0x40000000) != 0:
    print("refused")
    raise SystemExit
for name, text in (("setgroups", "deny"), ("uid_map", "0 %d 1" % uid), ("gid_map", "0 %d 1" % gid)):
    with open("/proc/self/" + name, "w") as f:
        f.write(text)
fcntl.ioctl(socket.socket(socket.AF_INET, socket.SOCK_DGRAM), 0x8914, struct.pack("16sH", b"lo", 0x41))  # lo up
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(128)
keep, total, target = [], 0, TARGET
for _ in range(60):
    client = socket.create_connection(server.getsockname())
    keep.append((client, server.accept()[0]))
    client.setblocking(False)
    while total < target:
        try:
            total += client.send(b"x" * 65536)
        except OSError:
            break
    if total >= target:
        break
print(total)
"""


def test_a_nested_network_cannot_park_memory(layers):
    need(layers, "seccomp")
    assert run(TCP_PARKING.replace("TARGET", str(64 * MiB))).stdout == "refused\n"


def test_socket_buffers_are_capped_even_without_the_filter(layers):
    # The second layer on its own: the filter off, the attack gets its namespace and loopback,
    # and the control group bounds what its sockets hold (cap plus the kernel's small overshoot).
    need(layers, "socket_memory", "unprivileged_uid")
    result = run(TCP_PARKING.replace("TARGET", str(64 * MiB)), restrict_syscalls=False)
    assert result.ok, result.stderr
    if result.stdout == "refused\n":
        pytest.skip("the kernel refuses unprivileged user namespaces here")
    parked = int(result.stdout)
    assert 0 < parked <= 4 * SOCKET_MEMORY_BYTES, parked


UNIX_PARKING = r"""
import socket
total, keep = 0, []
try:
    for _ in range(60):
        a, b = socket.socketpair()
        a.setblocking(False)
        keep.append((a, b))
        while True:
            try:
                total += a.send(b"x" * 65536)
            except BlockingIOError:
                break
    print(total)
except OSError as exc:
    print("refused", exc.errno, total)
"""


def test_unix_socket_buffers_cannot_be_filled(layers):
    # No control group charges Unix socket buffers: ~200 KiB per socket, 60 pairs per process.
    need(layers, "seccomp")
    assert run(UNIX_PARKING).stdout.split()[::2] == ["refused", "0"]
    unfiltered = run(UNIX_PARKING, restrict_syscalls=False)
    assert int(unfiltered.stdout) > 4 * MiB  # the attack, where nothing stops it


def test_a_memory_kill_of_the_runs_init_is_reported_as_memory(layers):
    # Files in the run's tmpfs count against its memory limit but belong to no process: when the
    # limit is hit, the OOM killer picks the largest process, the run's init or bootstrap (Python)
    # rather than the small shell writing, and the program leaves no exit status.
    need(layers, "cgroup", "private_filesystem")
    filler = (
        "import os\n"
        "os.execv('/bin/sh', ['sh', '-c', 'i=0; while [ $i -lt 40 ]; do head -c 8000000 /dev/zero > /tmp/f$i"
        " || exit 3; i=$((i+1)); done; echo survived'])\n"
    )
    result = run(filler, memory_mb=64, tmpfs_mb=320)
    assert "survived" not in result.stdout
    assert result.status == "memory", (result.status, result.returncode, result.stderr[-300:])


def test_a_memory_kill_of_a_child_is_reported_as_memory(layers):
    # Each child stays under the per-process limit; together they pass the run's: the control
    # group kills one, and the program, which needed it, fails.
    need(layers, "cgroup", "pid_namespace")
    hog = (
        "import os, sys, time\n"
        "children = []\n"
        "for _ in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = bytearray(40 * 2**20)\n"
        "        for i in range(0, len(block), 4096):\n"
        "            block[i] = 1\n"
        "        time.sleep(3)\n"
        "        os._exit(0)\n"
        "    children.append(pid)\n"
        "codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]\n"
        "sys.exit(1 if any(codes) else 0)\n"
    )
    result = run(hog, memory_mb=96)
    assert result.status == "memory", (result.status, result.returncode, result.stderr[-300:])


def test_posix_timers_are_capped():
    # Each timer holds a signal-queue entry: kernel memory no control group counts (~96,000 per
    # uid by default). RLIMIT_SIGPENDING caps them.
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "timer, made = ctypes.c_void_p(), 0\n"
        "while made < 20000 and libc.timer_create(1, None, ctypes.byref(timer)) == 0:\n"
        "    made += 1\n"
        "print(made)\n"
    )
    result = run(code)
    assert result.ok, result.stderr
    assert 0 < int(result.stdout) <= 1024
