"""A run owns its ``--out``: a second run into the same folder is refused in one line naming the
first (pid and command), and the lock goes with the process that held it, kill -9 included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from decoding_adapters.cli import main
from decoding_adapters.core.files import check_output_dir

NO_MODEL = ["--model", "/nonexistent/model-dir"]

HOLDER = """
import sys, time
from decoding_adapters.core.files import check_output_dir
check_output_dir(sys.argv[1])  # the pre-flight every command that writes a folder runs first
print("ready", flush=True)
time.sleep(120)
"""


def _hold(out):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), "--seed", "0"], env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_second_run_into_the_same_out_is_refused_naming_the_first(tmp_path, capsys):
    out = tmp_path / "run"
    holder = _hold(out)
    try:
        code = main(["train-token", *NO_MODEL, "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "is in use by another run" in err and f"pid {holder.pid}" in err and "--seed 0" in err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # kill -9 freed it: this run gets past the lock (and stops at the missing model)
    code = main(["train-token", *NO_MODEL, "--out", str(out)])
    err = capsys.readouterr().err
    assert "in use" not in err and "/nonexistent/model-dir" in err


def test_the_same_process_may_take_its_own_folder_again(tmp_path):
    out = tmp_path / "run"
    for _ in range(2):
        check_output_dir(out)
    assert (out / ".lock").read_text().startswith('{"pid": %d' % os.getpid())
