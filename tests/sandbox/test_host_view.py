"""What a run sees of the host: /proc entries about the host read as empty, and no third-party
package folder is reachable, even when the program puts it on ``sys.path`` itself."""

from __future__ import annotations

import glob
import os
import sys

import pytest

from decoding_adapters.sandbox import runner as sandbox
from sandbox_helpers import IS_ROOT, run

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox needs POSIX")

HOST_ENTRIES = ("cmdline", "loadavg", "meminfo", "stat", "uptime", "cgroups")


@pytest.fixture(scope="module")
def isolation(isolation):
    """The session's isolation, where it has a private filesystem view."""
    if not isolation.layers.private_filesystem:
        pytest.skip("no private filesystem view on this machine")
    return isolation


def test_host_proc_entries_read_as_empty(isolation):
    assert set(HOST_ENTRIES) <= set(sandbox.MASKED_PROC_ENTRIES)
    on_host = {entry: open(f"/proc/{entry}").read() for entry in HOST_ENTRIES}
    assert all(on_host.values())  # the host has something to hide
    reader = (
        "import os\n"
        f"for entry in {HOST_ENTRIES!r}:\n"
        "    with open('/proc/' + entry) as f:\n"
        "        print(entry, len(f.read()))\n"
        "print('pressure', os.listdir('/proc/pressure') if os.path.isdir('/proc/pressure') else None)\n"
        "print('cpus', os.cpu_count() > 0, len(open('/proc/self/status').read()) > 0)\n"
    )
    result = run(reader)
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    assert lines[: len(HOST_ENTRIES)] == [f"{entry} 0" for entry in HOST_ENTRIES]
    assert lines[-2] in ("pressure []", "pressure None")
    assert lines[-1] == "cpus True True"  # the run's own entries and the CPU count still work


def host_site_packages(python: str) -> list[str]:
    """Non-empty package folders of the host that the run's read-only view includes."""
    paths = sandbox._site_packages(python)
    return [path for path in paths if os.listdir(path)]


def test_site_packages_are_empty_even_on_sys_path(isolation):
    folders = host_site_packages(isolation.python)
    if not folders:
        pytest.skip("no third-party packages installed for the sandbox's interpreter")
    # Everything importable from them on the host: a package the program could otherwise load.
    names = sorted({name.split(".")[0].split("-")[0] for folder in folders for name in os.listdir(folder)})
    names = [n for n in names if n.isidentifier() and not n.startswith("_") and n not in sys.stdlib_module_names][:40]
    probe = (
        "import importlib, os, sys\n"
        f"folders = {folders!r}\n"
        "sys.path.extend(folders)\n"
        "print(sum(len(os.listdir(f)) for f in folders if os.path.isdir(f)))\n"
        "loaded = []\n"
        f"for name in {names!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        loaded.append(name)\n"
        "    except Exception:\n"
        "        pass\n"
        "print(loaded)\n"
    )
    result = run(probe)
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["0", "[]"]


def test_the_interpreters_site_packages_are_among_the_hidden(isolation):
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(isolation.python)))
    expected = [p for p in glob.glob(prefix + "/lib*/python3*/site-packages") if os.path.isdir(p)]
    assert set(expected) <= set(sandbox._site_packages(isolation.python))


@pytest.mark.skipif(not IS_ROOT, reason="the names are hidden where the bootstrap may create namespaces")
def test_host_name_and_control_group_paths_are_hidden(isolation):
    code = (
        "import os\n"
        "print(os.uname().nodename, os.path.exists('/proc/sys/kernel/hostname'))\n"
        "print(sorted({line.strip().split(':', 2)[2] for line in open('/proc/self/cgroup')}))\n"
    )
    result = run(code)
    assert result.ok, result.stderr
    names, paths = result.stdout.splitlines()
    assert names == "sandbox False" and os.uname().nodename != "sandbox"
    assert paths == "['/']", paths  # no decoding-adapters-sandbox/run-<caller's pid>-<n>


def test_no_host_counts_or_paths_in_proc_sys_and_mountinfo(isolation):
    # /proc/sys (the host's boot id, open files, dentries, AIO contexts, RAM-derived limits) is an
    # empty directory; mountinfo names no host device file system (devtmpfs gives the RAM size).
    assert "sys" in sandbox.MASKED_PROC_ENTRIES
    code = (
        "import os\n"
        "print(os.listdir('/proc/sys'))\n"
        "print(os.path.exists('/proc/sys/kernel/random/boot_id'), os.path.exists('/proc/sys/fs/file-nr'))\n"
        "print(repr(open('/proc/locks').read()))\n"
        "info = open('/proc/self/mountinfo').read()\n"
        "print('devtmpfs' in info, len(open('/dev/urandom', 'rb').read(8)), open('/dev/null').read() == '')\n"
    )
    result = run(code)
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["[]", "False False", "''", f"{not IS_ROOT} 8 True"]


@pytest.mark.skipif(not IS_ROOT, reason="a time namespace needs the privileges the bootstrap has as root")
def test_host_uptime_is_hidden(isolation):
    with open("/proc/uptime") as handle:
        host_uptime = float(handle.read().split()[0])
    if host_uptime < 120:
        pytest.skip("the host has just booted: nothing to hide")
    code = (
        "import ctypes, time\n"
        "info = ctypes.create_string_buffer(128)\n"
        "ctypes.CDLL(None).sysinfo(info)\n"
        "print(time.clock_gettime(time.CLOCK_BOOTTIME) < 60, int.from_bytes(info.raw[:8], 'little') < 60)\n"
    )
    result = run(code)
    assert result.ok, result.stderr
    assert result.stdout == "True True\n"
