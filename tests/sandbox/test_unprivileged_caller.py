"""The sandbox run by a caller without root (most users' machines): the bootstrap makes its own user
namespace and the program runs as the caller's uid, the same as its init. Run here as ``nobody``
(with a system interpreter and a world-readable copy of the package) when the tests run as root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import decoding_adapters
from sandbox_helpers import IS_ROOT

SYSTEM_PYTHON = "/usr/bin/python3"

pytestmark = pytest.mark.skipif(
    not (IS_ROOT and shutil.which("setpriv") and os.access(SYSTEM_PYTHON, os.X_OK)),
    reason="needs root, setpriv and a system python3 to run a caller as nobody",
)

# The program reaches for the status pipe of its init through /proc/1/fd (same uid), to write
# forged status lines: a set-up failure (which would make execute raise) and an exit status of 0.
# Init keeps the capabilities of the run's user namespace and the program has none, so the
# kernel refuses it access to init's /proc entries.
FORGER = r"""
import os
opened = 0
try:
    fds = os.listdir("/proc/1/fd")
except OSError:
    fds = [str(fd) for fd in range(3, 64)]
for fd in fds:
    try:
        w = os.open("/proc/1/fd/" + fd, os.O_WRONLY)
    except OSError:
        continue
    opened += 1
    try:
        for _ in range(100):
            os.write(w, b"setup_error\tmessage=forged\nexit\tstatus=0\n" * 1000)
    except OSError:
        pass
print("opened", opened, flush=True)
raise SystemExit(3)
"""

CALLER = r"""
import json, sys
from decoding_adapters.sandbox.runner import SandboxConfig, execute
try:
    result = execute(sys.argv[1], "", SandboxConfig(timeout_s=30))
    print(json.dumps({"status": result.status, "returncode": result.returncode, "stdout": result.stdout,
                      "seccomp": result.layers.seccomp, "private_filesystem": result.layers.private_filesystem}))
except Exception as exc:
    print(json.dumps({"raised": type(exc).__name__, "message": str(exc)[:200]}))
"""


@pytest.fixture(scope="module")
def package_copy():
    root = Path(tempfile.mkdtemp(prefix="unprivileged-", dir="/tmp"))  # pytest's own are private
    try:
        shutil.copytree(Path(decoding_adapters.__file__).parent, root / "decoding_adapters")
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_as_nobody(package_copy: Path, code: str) -> dict:
    out = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", SYSTEM_PYTHON, "-S", "-c", CALLER, code],
        capture_output=True, text=True, timeout=120, cwd="/", env={"PYTHONPATH": str(package_copy), "PATH": os.defpath},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_program_cannot_forge_its_status(package_copy):
    outcome = run_as_nobody(package_copy, FORGER)
    assert "raised" not in outcome, outcome  # no forged set-up failure reached the caller
    assert outcome["stdout"] == "opened 0\n" and (outcome["status"], outcome["returncode"]) == ("error", 3)


def test_every_layer_but_the_uid_and_cgroup_without_root(package_copy):
    code = "import ctypes, os\nprint(ctypes.CDLL(None).unshare(0x10000000), len(open('/proc/meminfo').read()))"
    outcome = run_as_nobody(package_copy, code)
    assert outcome["status"] == "ok", outcome
    if not outcome["private_filesystem"]:
        pytest.skip("this kernel refuses unprivileged user namespaces")
    assert outcome["seccomp"] and outcome["stdout"] == "-1 0\n"
