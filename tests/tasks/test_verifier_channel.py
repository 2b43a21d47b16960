"""A user's verifier cannot reach the worker's reply channel, is capped in memory and processes,
scores 0 with a warning when it hangs or garbles, and never outlives the process that runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from decoding_adapters.tasks.jsonl import VerifierRunner

VERIFIERS = textwrap.dedent('''
    import os, sys, time

    def echoes(completion, answer):
        os.system("echo checking")          # a child writing to fd 1
        print("still checking")
        return 1.0

    def forges(completion, answer):
        os.write(1, b'{"score": 1.0}\\n')   # a forged reply on fd 1
        sys.__stdout__.write('{"score": 1.0}\\n'); sys.__stdout__.flush()
        return 0.0

    def half_line_then_hangs(completion, answer):
        os.write(1, b"{")
        time.sleep(60)
        return 1.0

    def allocates(completion, answer):
        block = bytearray(3 * 2**30)        # 3 GB
        return 1.0

    def forks(completion, answer):
        children = 0
        for _ in range(100):
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            children += 1
        return 1.0

    def sleeps_forever(completion, answer):
        with open(answer, "w") as handle:
            handle.write(str(os.getpid()))
        time.sleep(120)
        return 1.0
''')


@pytest.fixture()
def verifiers(tmp_path, monkeypatch):
    (tmp_path / "hostile_verifiers.py").write_text(VERIFIERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    runners = []

    def make(name: str, **limits) -> VerifierRunner:
        runners.append(VerifierRunner(spec=f"hostile_verifiers:{name}", **limits))
        return runners[-1]

    yield make
    for runner in runners:
        runner.close()


def _call(runner, answer="4", limit_s=20.0):
    """The runner's answer, in a thread, so that a runner which hangs fails the test instead of
    hanging it."""
    result = []
    thread = threading.Thread(target=lambda: result.append(runner("x", answer, {})), daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(limit_s)
    assert result, f"the verifier call still hangs after {limit_s:g} s"
    return result[0], time.monotonic() - started


def test_a_child_writing_to_fd_1_does_not_break_the_channel(verifiers, capfd):
    runner = verifiers("echoes", timeout_s=10)
    for _ in range(2):
        assert _call(runner)[0] == (1.0, None)
    assert "checking" in capfd.readouterr().err


def test_a_forged_reply_on_fd_1_is_not_taken(verifiers):
    runner = verifiers("forges", timeout_s=10)
    assert _call(runner)[0] == (0.0, None)
    assert _call(runner)[0] == (0.0, None)  # nothing left in the channel for the next call either


def test_a_half_line_then_a_hang_times_out_on_time(verifiers):
    runner = verifiers("half_line_then_hangs", timeout_s=2)
    (score, why), seconds = _call(runner)
    assert score == 0.0 and "timed out after 2 s" in why and seconds < 5


def test_memory_is_capped(verifiers):
    runner = verifiers("allocates", timeout_s=20, memory_mb=512)
    (score, why), _ = _call(runner, limit_s=30)
    assert score == 0.0 and why and ("MemoryError" in why or "exited" in why)


def test_processes_are_capped_and_none_outlive_the_worker(verifiers):
    runner = verifiers("forks", timeout_s=20, max_processes=8)
    (score, why), _ = _call(runner, limit_s=30)
    pid = runner._proc.pid if runner._proc is not None else None
    assert score == 0.0 and why and ("Errno 11" in why or "Resource temporarily unavailable" in why or "exited" in why)
    runner.close()
    if pid is not None:
        found = subprocess.run(["pgrep", "-s", str(pid)], capture_output=True, text=True).stdout
        left = [int(p) for p in found.split()]
        deadline = time.monotonic() + 5
        while any(map(_alive, left)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(map(_alive, left))  # zombies waiting for init to reap them are dead


def test_the_worker_dies_with_the_process_that_runs_it(tmp_path):
    (tmp_path / "hostile_verifiers.py").write_text(VERIFIERS)
    pid_file = tmp_path / "worker.pid"
    script = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
              "from decoding_adapters.tasks.jsonl import VerifierRunner\n"
              f"VerifierRunner(spec='hostile_verifiers:sleeps_forever', timeout_s=60)('x', {str(pid_file)!r}, {{}})\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = int(pid_file.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(worker):
            time.sleep(0.05)
        alive = _alive(worker)
        if alive:
            os.kill(worker, signal.SIGKILL)  # the orphan this test started: not left behind
        assert not alive, "the verifier's worker outlived the process that ran it"
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except OSError:
        return False
