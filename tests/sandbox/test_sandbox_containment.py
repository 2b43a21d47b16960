"""The sandbox contains a whole run: each known attack on it, with small sizes.

Each test states the layer it needs (see :class:`~decoding_adapters.sandbox.runner.Layers`) and is
skipped, with the reason, on a host where that layer is not available (no root, no cgroups, no
mount namespaces): the tests pass either way, and assert what is active. For each: the attack is
contained, nothing is left behind, the host is unaffected.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import decoding_adapters
from decoding_adapters.sandbox.runner import SandboxConfig
from sandbox_helpers import IS_ROOT, SLOW_OK_S, need, run

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox needs POSIX")



@pytest.fixture
def world_readable_dir():
    # Like a data set or a shared directory: readable (or writable) by every uid.
    directory = tempfile.mkdtemp(prefix="containment-", dir="/tmp")
    os.chmod(directory, 0o755)
    yield Path(directory)
    shutil.rmtree(directory, ignore_errors=True)


def test_memory_is_capped_for_the_whole_run(layers):
    # Issue: 6 children x 400 MiB reached 2.4 GiB with memory_mb=512. Here 4 x 100 MiB, cap 256.
    need(layers, "cgroup", "pid_namespace", "private_filesystem")
    hog = (
        "import os, time\n"
        "for _ in range(4):\n"
        "    if os.fork() == 0:\n"
        "        block = b'x' * (100 * 2**20)\n"
        "        print('held', flush=True)\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "time.sleep(1)\n"
        "total = 0\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        total += sum(int(l.split()[1]) for l in open('/proc/%s/status' % pid) if l.startswith('VmRSS:'))\n"
        "    except OSError:\n"
        "        pass\n"
        "print('total_mb', total // 1024, flush=True)\n"
    )
    result = run(hog, memory_mb=256)
    totals = [int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("total_mb")]
    # Either the survivors hold at most the cap, or the OOM killer took the parent too.
    assert all(total <= 256 for total in totals), result.stdout


def test_files_in_tmp_are_bounded_and_vanish(layers):
    # Issue: ~800 files, 3.3-3.5 GB left in /tmp, /var/tmp, /dev/shm after a 10 s run.
    need(layers, "private_filesystem")
    marker = f"containment-{secrets.token_hex(6)}"
    writer = (
        "import os\nwritten = 0\n"
        "for directory in ('/tmp', '/var/tmp', '/dev/shm', '.'):\n"
        "    for i in range(40):\n"
        "        try:\n"
        f"            with open(os.path.join(directory, '{marker}-%d' % i), 'wb') as f:\n"
        "                f.write(b'x' * 2**20)\n"
        "            written += 1\n"
        "        except OSError:\n"
        "            break\n"
        "print(written)\n"
    )
    result = run(writer, tmpfs_mb=16)
    assert result.ok, result.stderr
    assert int(result.stdout) <= 16  # one 16 MiB tmpfs for all four places, not 160 MiB
    for directory in ("/tmp", "/var/tmp", "/dev/shm"):
        assert not [name for name in os.listdir(directory) if name.startswith(marker)], directory


def test_nothing_persists_from_one_run_to_the_next(layers):
    # Issue: a later run under another uid read a secret a previous run left in /tmp.
    need(layers, "private_filesystem")
    secret = secrets.token_hex(8)
    paths = ["/tmp/left-" + secret, "/var/tmp/left-" + secret, "/dev/shm/left-" + secret]
    planted = run("".join(f"open({p!r}, 'w').write({secret!r})\n" for p in paths))
    assert planted.ok, planted.stderr
    reader = "import os\n" + "".join(f"print(os.path.exists({p!r}))\n" for p in paths)
    assert run(reader).stdout == "False\n" * 3
    assert not any(os.path.exists(p) for p in paths)  # nor on the host


def test_host_processes_and_their_arguments_are_invisible(layers):
    # Issue: 70 host processes visible, another process's --api-key argument readable.
    need(layers, "pid_namespace", "private_filesystem")
    key = secrets.token_hex(8)
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--api-key={key}"])
    try:
        spy = (
            "import os\nfound = []\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "for pid in pids:\n"
            "    try:\n"
            "        found.append(open('/proc/%s/cmdline' % pid, 'rb').read())\n"
            "    except OSError:\n"
            "        pass\n"
            f"print(len(pids), any(b'{key}' in c for c in found))\n"
        )
        result = run(spy)
        count, leaked = result.stdout.split()
        assert leaked == "False" and int(count) <= 3, result.stdout  # init, the program (and a reaped child)
    finally:
        host.kill()
        host.wait()


def test_project_and_data_are_invisible(layers, world_readable_dir):
    # Issue: world-readable data sets readable (a program could read the expected outputs).
    need(layers, "private_filesystem")
    data = world_readable_dir / "answers.jsonl"
    data.write_text('{"output": "42"}\n')
    data.chmod(0o644)
    package = os.path.dirname(decoding_adapters.__file__)
    probe = "import os\n" + "".join(
        f"print(os.path.exists({path!r}))\n" for path in (str(data), package, sys.prefix, os.getcwd())
    )
    result = run(probe)
    assert result.stdout == "False\n" * 4, result.stdout  # data, package, venv, our directory


def test_host_unix_socket_is_unreachable(layers, world_readable_dir):
    # Issue: a pathname unix socket on the host reachable despite the network namespace.
    need(layers, "private_filesystem")
    world_readable_dir.chmod(0o777)
    path = str(world_readable_dir / "service.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        os.chmod(path, 0o777)
        server.listen(1)
        server.settimeout(0.2)
        client = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\nprint('connected')"
        result = run(client)
        assert result.status == "error" and "connected" not in result.stdout
        with pytest.raises(socket.timeout):
            server.accept()


def test_host_files_under_a_world_writable_directory_are_safe(layers, world_readable_dir):
    # Issue: a root-owned path under a 0777 directory renamed.
    need(layers, "private_filesystem")
    world_readable_dir.chmod(0o777)
    victim = world_readable_dir / "owned-by-root"
    victim.write_text("keep me")
    result = run(f"import os\nos.rename({str(victim)!r}, {str(victim) + '.moved'!r})")
    assert result.status == "error"
    assert victim.read_text() == "keep me" and not (world_readable_dir / "owned-by-root.moved").exists()


def test_open_files_are_capped():
    # Issue: open files uncapped (~20,000 per process). RLIMIT_NOFILE is always set.
    opener = (
        "import os\nfds = []\n"
        "try:\n    while len(fds) < 5000:\n        fds.append(os.open(os.devnull, os.O_RDONLY))\n"
        "except OSError:\n    pass\nprint(len(fds))\n"
    )
    result = run(opener, max_open_files=64)
    assert result.ok and int(result.stdout) < 64, result.stdout


def test_processes_are_capped_for_the_whole_run(layers):
    need(layers, "cgroup")
    spawner = (
        "import os, time\nborn = 0\n"
        "for _ in range(40):\n"
        "    try:\n"
        "        if os.fork() == 0:\n            time.sleep(2)\n            os._exit(0)\n"
        "        born += 1\n"
        "    except OSError:\n        break\n"
        "print(born)\n"
    )
    result = run(spawner, max_processes=12)
    assert result.ok and int(result.stdout) < 12, result.stdout


def test_layers_are_reported(layers):
    result = run("pass")
    assert result.layers == layers
    if IS_ROOT and sys.platform.startswith("linux"):
        # Our machines: everything but possibly the control group is available to root.
        assert {"network", "pid_namespace", "unprivileged_uid"}.isdisjoint(result.layers.missing())


def test_the_view_is_read_only_except_the_scratch_places(layers):
    need(layers, "private_filesystem")
    probe = (
        "import os\n"
        "def writable(path):\n"
        "    try:\n"
        "        with open(os.path.join(path, 'probe'), 'w') as f:\n"
        "            f.write('x')\n"
        "        return True\n"
        "    except OSError:\n"
        "        return False\n"
        "print([writable(p) for p in ('/', '/usr', '/dev', '/etc', '/tmp', '/var/tmp', '/dev/shm', '.')])\n"
    )
    result = run(probe)
    assert result.stdout.strip() == str([False] * 4 + [True] * 4), result.stdout + result.stderr


# Spinners in sessions of their own (each would be an autogroup of its own, with a fair share
# each, where only the memory and pids controllers are set): CPU seconds used over wall seconds.
SESSION_SPINNERS = r"""
import os, time
pids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
start = time.monotonic()
for pid in pids:
    os.waitpid(pid, 0)
wall = time.monotonic() - start
cpu = os.times().children_user + os.times().children_system
print(round(cpu / wall, 2))
"""


def test_the_whole_run_shares_one_cpu_quota(layers):
    need(layers, "cgroup", "cpu")
    from decoding_adapters.sandbox.functions import FunctionSession

    # The quota is set on the run's group while it runs (read from the host side)...
    with FunctionSession("def f():\n    return 1\n", "f", SandboxConfig(timeout_s=SLOW_OK_S)) as session:
        assert session.call_outcome().value == 1
        quotas = {}
        for path in session._run.cgroup_dirs:
            for name in ("cpu.cfs_quota_us", "cpu.max"):
                if os.path.exists(os.path.join(path, name)):
                    quotas[name] = Path(path, name).read_text().split()[0]
    assert quotas in ({"cpu.cfs_quota_us": "100000"}, {"cpu.max": "100000"}), quotas
    assert session.result.layers.cpu
    # ... and holds whatever sessions the program starts: three spinners share one core.
    result = run(SESSION_SPINNERS)
    assert result.ok, result.stderr
    assert float(result.stdout) <= 1.25, result.stdout
    half = run(SESSION_SPINNERS, cpu_cores=0.5)
    assert float(half.stdout) <= 0.7, half.stdout
