"""The sandbox against hostile programs: each test is bounded in time (a few seconds at most)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from decoding_adapters.sandbox import cgroups
from decoding_adapters.sandbox import runner as sandbox
from decoding_adapters.sandbox.functions import FunctionSession, call_function, call_function_batch, parse_literal
from decoding_adapters.sandbox.runner import (
    UID_BASE,
    ExecutionResult,
    Layers,
    SandboxConfig,
    SandboxError,
    classify,
    execute_batch,
    run_code,
)
from sandbox_helpers import IS_ROOT, SLOW_OK_S

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox needs POSIX resource limits")



def processes_in(directory: str, settle_s: float = 10.0) -> list[int]:
    """Pids of live processes whose working directory is (or was) ``directory``, once killed ones
    have had up to ``settle_s`` to finish exiting (SIGKILL is asynchronous)."""
    deadline = time.monotonic() + settle_s
    while (found := _processes_in(directory)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def _processes_in(directory: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if cwd.removesuffix(" (deleted)") == directory:
            found.append(int(entry.name))
    return found


# --------------------------------------------------------------------------- unit: pure parts


@pytest.mark.parametrize(
    "field, value",
    [
        ("timeout_s", 0),
        ("timeout_s", float("inf")),
        ("memory_mb", -1),
        ("memory_mb", 1.5),
        ("max_output_bytes", 0),
        ("max_file_mb", True),
        ("max_processes", 0),
        ("cpu_cores", 0),
        ("cpu_cores", True),
        ("cpu_cores", float("nan")),
        ("python", ""),
    ],
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        SandboxConfig(**{field: value})


def test_cpu_limit_is_above_the_wall_clock_limit():
    assert SandboxConfig(timeout_s=0.5).cpu_limit_s == 2
    assert SandboxConfig(timeout_s=5).cpu_limit_s == 6


@pytest.mark.parametrize(
    "returncode, stderr, timed_out, expected",
    [
        (0, "", False, "ok"),
        (1, "Traceback ...\nValueError: x", False, "error"),
        (1, "Traceback ...\nMemoryError", False, "memory"),
        (-signal.SIGSEGV, "", False, "memory"),
        (-signal.SIGKILL, "", False, "memory"),
        (-signal.SIGXCPU, "", False, "timeout"),
        (None, "", True, "timeout"),
        (0, "", True, "timeout"),
        (None, "", False, "error"),
    ],
)
def test_classify(returncode, stderr, timed_out, expected):
    assert classify(returncode, stderr, timed_out) == expected


# --------------------------------------------------------------------------- behaviour


def test_hello_world():
    result = run_code("print('hello')", timeout_s=SLOW_OK_S)
    assert isinstance(result, ExecutionResult)
    assert (result.status, result.returncode, result.stdout, result.truncated) == ("ok", 0, "hello\n", False)
    assert result.ok and result.wall_s > 0


def test_stdin_passes_through():
    result = run_code("a, b = map(int, input().split())\nprint(a + b)", stdin="2 40\n", timeout_s=SLOW_OK_S)
    assert (result.status, result.stdout) == ("ok", "42\n")


def test_large_stdin_that_is_not_read_does_not_block():
    result = run_code("print('ignored')", stdin="x" * 5_000_000, timeout_s=SLOW_OK_S)
    assert (result.status, result.stdout) == ("ok", "ignored\n")


def test_exit_code_and_exception_are_errors():
    exited = run_code("raise SystemExit(3)", timeout_s=SLOW_OK_S)
    assert (exited.status, exited.returncode) == ("error", 3)
    raised = run_code("raise ValueError('boom')", timeout_s=SLOW_OK_S)
    assert raised.status == "error" and "ValueError: boom" in raised.stderr


def test_infinite_loop_times_out():
    result = run_code("while True:\n    pass", timeout_s=1.0)
    assert (result.status, result.returncode) == ("timeout", None)
    assert 1.0 <= result.wall_s < 3.0


def test_sleeping_program_times_out_on_wall_clock():
    # Uses no CPU, so only the wall-clock limit can stop it.
    result = run_code("import time\ntime.sleep(60)", timeout_s=1.0)
    assert result.status == "timeout" and result.wall_s < 3.0


def test_memory_hog_is_reported_as_memory():
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 2**20))"
    result = run_code(hog, timeout_s=SLOW_OK_S, memory_mb=256)
    assert result.status == "memory", result.stderr[-500:]


def test_fork_bomb_is_contained():
    bomb = (
        "import os\nprint(os.getcwd(), flush=True)\n"
        "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    result = run_code(bomb, timeout_s=1.5)
    assert result.status != "ok"
    workdir = result.stdout.strip()
    assert workdir and processes_in(workdir) == []
    assert not os.path.exists(workdir)
    # The host can still spawn processes, and so can the next run (even with a reused uid).
    assert subprocess.run(["true"], timeout=10).returncode == 0
    assert run_code("print('after')", timeout_s=SLOW_OK_S).stdout == "after\n"


def test_descendants_that_leave_the_group_do_not_survive(isolation):
    if not isolation.pid_namespace:
        pytest.skip("no PID namespace on this machine: a setsid()'d descendant may outlive the run")
    escape = (
        "import os, time\nprint(os.getcwd(), flush=True)\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
    )
    result = run_code(escape, timeout_s=SLOW_OK_S)
    assert result.status == "ok"
    assert processes_in(result.stdout.strip()) == []


def test_writing_a_huge_file_fails_and_leaves_nothing():
    writer = (
        "import os\nprint(os.getcwd(), flush=True)\n"
        "with open('big.bin', 'wb') as f:\n"
        "    for _ in range(1024):\n        f.write(b'x' * 2**20)\n"
    )
    result = run_code(writer, timeout_s=SLOW_OK_S, max_file_mb=10)
    assert result.status == "error" and "File too large" in result.stderr
    workdir = result.stdout.strip()
    assert workdir.startswith(tempfile.gettempdir()) and not os.path.exists(workdir)


def test_working_directory_is_fresh_and_removed():
    first = run_code("import os\nprint(os.getcwd())\nprint(sorted(os.listdir()))", timeout_s=SLOW_OK_S)
    workdir, listing = first.stdout.splitlines()
    assert listing == "['main.py']" and not os.path.exists(workdir)
    second = run_code("import os\nprint(os.getcwd())", timeout_s=SLOW_OK_S)
    assert second.stdout.strip() != workdir


@pytest.mark.skipif(not IS_ROOT, reason="without root the code runs as the calling user and may touch its files")
def test_files_outside_the_working_directory_are_protected(tmp_path):
    with tempfile.NamedTemporaryFile(dir="/tmp", delete=False) as handle:
        victim = handle.name
    os.chmod(victim, 0o644)
    os.chmod(tmp_path, 0o755)
    # Refused by the uid, or not even visible in a private filesystem view.
    try:
        removal = run_code(f"import os\nos.remove({victim!r})", timeout_s=SLOW_OK_S)
        assert removal.status == "error" and (
            "PermissionError" in removal.stderr or "FileNotFoundError" in removal.stderr
        )
        assert os.path.exists(victim)
        creation = run_code(f"open({str(tmp_path / 'planted.txt')!r}, 'w').write('x')", timeout_s=SLOW_OK_S)
        assert creation.status == "error"
        assert "PermissionError" in creation.stderr or "FileNotFoundError" in creation.stderr
        assert not (tmp_path / "planted.txt").exists()
    finally:
        os.remove(victim)


def test_network_is_unreachable(isolation):
    if not isolation.network:
        pytest.skip("network namespaces are unavailable here (unshare refused): code has network")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.2)
        port = server.getsockname()[1]
        client = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
        result = run_code(client, timeout_s=SLOW_OK_S)
        assert result.status == "error" and "connected" not in result.stdout
        assert result.network_isolated
        with pytest.raises(socket.timeout):
            server.accept()


def test_environment_is_minimal(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2-do-not-leak")
    result = run_code("import os\nprint(sorted(os.environ.items()))", timeout_s=SLOW_OK_S)
    assert result.status == "ok"
    assert "hunter2" not in result.stdout and "SECRET_TOKEN" not in result.stdout
    assert "PYTHONHASHSEED', '0'" in result.stdout


def test_many_runs_in_parallel():
    def square(i: int) -> ExecutionResult:
        return run_code("import sys\nn = int(sys.stdin.read())\nprint(n * n)", stdin=str(i), timeout_s=SLOW_OK_S)

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(square, range(16)))
    assert [r.status for r in results] == ["ok"] * 16
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(16)]


def test_output_over_the_cap_stops_the_run_and_says_so():
    chatty = "import sys\nsys.stderr.write('e' * 10)\nsys.stderr.flush()\nprint('x' * 200_000)\nprint('not reached')"
    result = run_code(chatty, timeout_s=SLOW_OK_S, max_output_bytes=1000)
    assert result.status == "output_limit" and result.truncated and result.stdout_truncated
    assert result.stdout == "x" * 1000 and result.stderr == "e" * 10


def test_stderr_over_the_cap_is_cut_but_fails_nothing():
    noisy = "import sys\nsys.stderr.write('e' * 200_000)\nprint('answer')"
    result = run_code(noisy, timeout_s=SLOW_OK_S, max_output_bytes=1000)
    assert (result.status, result.stdout) == ("ok", "answer\n")
    assert result.truncated and not result.stdout_truncated and len(result.stderr) == 1000


def test_endless_output_is_an_output_limit_not_a_timeout():
    result = run_code("while True:\n    print('spam' * 1000)", timeout_s=SLOW_OK_S)
    assert result.status == "output_limit" and result.truncated
    assert result.wall_s < SLOW_OK_S / 2  # stopped at the cap, not at the deadline
    assert len(result.stdout) == SandboxConfig().max_output_bytes


def test_network_flag_off_leaves_the_network():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        client = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\nprint('connected')"
        result = run_code(client, timeout_s=SLOW_OK_S, isolate_network=False)
    assert (result.status, result.stdout, result.network_isolated) == ("ok", "connected\n", False)


def test_probe_reports_the_isolation(isolation):
    assert os.path.isfile(isolation.python)
    if IS_ROOT:
        assert isolation.uid is not None and isolation.uid >= UID_BASE
    else:
        assert isolation.uid is None


def test_private_filesystem_can_be_turned_off(tmp_path):
    # Then the run sees the host's files (and the interpreter is probed for that view).
    result = run_code(
        "import os\nprint(os.path.isdir('/proc/1'), os.path.exists('/etc/hostname'))",
        timeout_s=SLOW_OK_S,
        private_filesystem=False,
        use_cgroup=False,
    )
    assert result.ok, result.stderr
    assert not result.layers.private_filesystem and result.layers.cgroup is None


def test_unusable_interpreter_is_a_sandbox_error():
    with pytest.raises(SandboxError, match="set-up failed"):
        run_code("print(1)", timeout_s=SLOW_OK_S, python="/nonexistent/python3")


def test_degraded_platform_warns_once(monkeypatch, caplog):
    monkeypatch.setattr(sandbox, "_warned", set())
    events = {"setup": {"event": "setup", "net": "0", "net_error": "Operation not permitted", "pid": "1"}}
    streams = sandbox._Streams(b"", b"", False, False, [])
    with caplog.at_level(logging.WARNING, logger="decoding_adapters.sandbox.runner"):
        sandbox._warn_once_if_degraded(SandboxConfig(), events, streams)
        sandbox._warn_once_if_degraded(SandboxConfig(), events, streams)
    network_warnings = [r for r in caplog.records if "network isolation unavailable" in r.getMessage()]
    assert len(network_warnings) == 1 and "Operation not permitted" in network_warnings[0].getMessage()


def test_uid_pool_is_first_in_first_out():
    pool = sandbox._UidPool(3)
    first, second = pool.acquire(), pool.acquire()
    assert first != second
    pool.release(first)
    third = pool.acquire()
    assert third not in (first, second)  # the released uid waits behind the never-used one
    assert pool.acquire() == first


def test_runs_degrade_gracefully_where_namespaces_are_refused(monkeypatch, caplog):
    # Simulate a platform that refuses unshare(CLONE_NEWNET), (CLONE_NEWNS) and (CLONE_NEWPID),
    # and has no control groups.
    bootstrap = sandbox._BOOTSTRAP
    calls = (
        'unshare(CLONE_NEWNET) if s.net == "1"',
        'unshare(CLONE_NEWNS | CLONE_NEWIPC) if s.private_fs == "1"',
        "unshare(CLONE_NEWPID)",
    )
    for call in calls:
        assert call in bootstrap
        bootstrap = bootstrap.replace(call, call.replace("unshare(", "'Operation not permitted' or ("))
    monkeypatch.setattr(sandbox, "_BOOTSTRAP", bootstrap)
    monkeypatch.setattr(sandbox, "_warned", set())
    monkeypatch.setattr(sandbox, "_SEEN_LAYERS", set())  # a platform that never had the namespaces
    monkeypatch.setattr(cgroups, "CONTROL_GROUPS", cgroups.ControlGroups())
    monkeypatch.setattr(cgroups.CONTROL_GROUPS, "_probed", True)  # as if nothing were writable
    monkeypatch.setattr(cgroups.CONTROL_GROUPS, "unavailable", "simulated")
    # Which interpreter the sandbox uid can run depends on the filesystem view: probe again.
    monkeypatch.setattr(sandbox, "_interpreter_for_sandbox_uid", {})
    with caplog.at_level(logging.WARNING, logger="decoding_adapters.sandbox.runner"):
        result = run_code("import os\nprint(os.getpid() != 1)", timeout_s=SLOW_OK_S)
        timed_out = run_code("while True:\n    pass", timeout_s=1.0)
    assert (result.status, result.stdout, result.network_isolated) == ("ok", "True\n", False)
    expected_missing = ["network", "pid_namespace", "private_filesystem", "socket_memory", "cpu", "cgroup"]
    assert result.layers.missing() == expected_missing or not IS_ROOT
    assert timed_out.status == "timeout"
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert "no private filesystem view (Operation not permitted)" in messages
    assert "no control group for the run (simulated)" in messages
    assert "network isolation unavailable (unshare(CLONE_NEWNET) refused: Operation not permitted)" in messages
    assert "no PID namespace" in messages


# --------------------------------------------------------------------------- calling a function


def test_call_function_returns_values_and_errors():
    code = "def add(a, b):\n    print('chatter')\n    return a + b\n"
    result = call_function(code, "add", [(2, 3), ("a", "b"), ([1], [2.5]), (1,)], SandboxConfig(timeout_s=SLOW_OK_S))
    assert result.values == [5, "ab", [1, 2.5], None]
    assert result.errors[:3] == [None, None, None] and result.errors[3].startswith("TypeError")
    assert result.execution.status == "ok" and "chatter" in result.execution.stderr  # prints go to stderr
    assert isinstance(result.layers, Layers)


def test_call_function_values_are_literals_only():
    code = (
        "class Anything:\n    def __eq__(self, other):\n        return True\n"
        "def f(kind):\n"
        "    return Anything() if kind == 'object' else [float('inf'), set(), 1 - 2j, b'x', -0.0, (None,)]\n"
    )
    result = call_function(code, "f", [("object",), ("literals",)], SandboxConfig(timeout_s=SLOW_OK_S))
    assert result.values[0] is None and "not a literal" in result.errors[0]
    assert result.values[1][:5] == [float("inf"), set(), 1 - 2j, b"x", -0.0] and result.values[1][5] == (None,)


@pytest.mark.parametrize(
    "code, error",
    [
        ("def f(x) return", "did not load: SyntaxError"),
        ("import os\nos._exit(0)\ndef f(x):\n    return x", "ended before answering"),
        ("def f(x):\n    import os\n    os._exit(0)", "ended before answering"),
        ("g = 1", "did not load: KeyError"),
    ],
)
def test_call_function_failures_fail_every_call(code, error):
    result = call_function(code, "f", [(1,), (2,)], SandboxConfig(timeout_s=SLOW_OK_S))
    assert result.values == [None, None] and all(error in e for e in result.errors)


def test_call_function_times_out():
    result = call_function("def f(x):\n    while True:\n        pass", "f", [(1,), (2,)], SandboxConfig(timeout_s=1.0))
    assert result.errors == ["timeout", "timeout"] and result.execution.status == "timeout"


def test_session_sends_one_call_at_a_time():
    # The program cannot read ahead: it sees the second call's arguments only after answering.
    code = "import sys\ndef f(x):\n    return sys.stdin.read()\n"
    with FunctionSession(code, "f", SandboxConfig(timeout_s=SLOW_OK_S)) as session:
        assert session.candidate("first") == ""
        assert session.candidate("second") == ""
    assert session.result.status == "ok"


def test_call_function_batch_keeps_order():
    jobs = [(f"def f(x):\n    return x * {i}", "f", [(i,)]) for i in range(5)]
    results = call_function_batch(jobs, SandboxConfig(timeout_s=SLOW_OK_S), workers=2)
    assert [r.values for r in results] == [[i * i] for i in range(5)]
    programs = [(f"print(input() * {i})", "ab") for i in range(3)]
    assert [r.stdout for r in execute_batch(programs, SandboxConfig(timeout_s=SLOW_OK_S))] == ["\n", "ab\n", "abab\n"]
    with pytest.raises(ValueError, match="workers"):
        execute_batch(programs, workers=0)


@pytest.mark.parametrize(
    "text, value",
    [
        ("1", 1),
        ("-2.5", -2.5),
        ("inf", float("inf")),
        ("-inf", float("-inf")),
        ("(1+2j)", 1 + 2j),
        ("set()", set()),
        ("frozenset({1})", frozenset({1})),
        ("{'a': [1, (2,)]}", {"a": [1, (2,)]}),
        ("b'\\x00'", b"\x00"),
        ("'line\\nbreak'", "line\nbreak"),
        ("None", None),
        ("True", True),
    ],
)
def test_parse_literal(text, value):
    assert parse_literal(text) == value


@pytest.mark.parametrize(
    "text", ["__import__('os')", "x", "[1, 2", "2 ** 100", "{**a}", "open('f')", "[" * 10_000 + "]" * 10_000]
)
def test_parse_literal_refuses_code(text):
    with pytest.raises(ValueError):
        parse_literal(text)


def test_private_filesystem_needs_the_pid_namespace(monkeypatch, caplog):
    # A fresh /proc without a PID namespace would show the host's processes: no private view then.
    call = "unshare(CLONE_NEWPID)"
    assert call in sandbox._BOOTSTRAP
    monkeypatch.setattr(
        sandbox, "_BOOTSTRAP", sandbox._BOOTSTRAP.replace(call, "'Operation not permitted' or (CLONE_NEWPID)")
    )
    monkeypatch.setattr(sandbox, "_warned", set())
    monkeypatch.setattr(sandbox, "_SEEN_LAYERS", set())
    monkeypatch.setattr(sandbox, "_interpreter_for_sandbox_uid", {})
    with caplog.at_level(logging.WARNING, logger="decoding_adapters.sandbox.runner"):
        result = run_code("print('ran')", timeout_s=SLOW_OK_S)
    assert result.stdout == "ran\n" and not result.layers.private_filesystem and not result.layers.pid_namespace
    assert "no private filesystem view (needs a PID namespace)" in caplog.text


def test_a_namespace_that_worked_before_is_required_after(isolation, monkeypatch):
    # Once a run of this process had a PID namespace, a run that cannot get one (the host ran out
    # of namespaces) does not run at all, and says why.
    if not isolation.pid_namespace:
        pytest.skip("no PID namespace on this machine")
    call = "unshare(CLONE_NEWPID)"
    monkeypatch.setattr(
        sandbox, "_BOOTSTRAP", sandbox._BOOTSTRAP.replace(call, "'No space left on device' or (CLONE_NEWPID)")
    )
    result = run_code("print('ran')", timeout_s=SLOW_OK_S)
    assert (result.status, result.stdout) == ("setup_failed", "")
    assert result.failed_layer == "pid_namespace: No space left on device"


def test_cgroup_v2_gets_the_cpu_controller_and_quota(tmp_path):
    # A stand-in cgroup2 tree (plain files): where the parent offers cpu, runs get cpu.max.
    mount, own = tmp_path, "/agents/me"
    parent = tmp_path / "agents"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (parent / "cgroup.subtree_control").write_text("")
    (parent / "decoding-adapters-sandbox").mkdir()
    (parent / "decoding-adapters-sandbox" / "cgroup.subtree_control").write_text("")
    groups = cgroups.ControlGroups()
    base = groups._make_v2_base(str(mount), own)
    assert (parent / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert Path(base, "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    run_dir = Path(base, "run-1")
    run_dir.mkdir()
    for name in ("memory.max", "memory.swap.max", "pids.max", "cpu.max"):
        (run_dir / name).write_text("max\n")
    groups._limit(str(run_dir), SandboxConfig(memory_mb=256, max_processes=32, cpu_cores=0.5))
    assert (run_dir / "cpu.max").read_text() == "50000 100000"
    assert (run_dir / "memory.max").read_text() == str(256 * 2**20)
    assert (run_dir / "pids.max").read_text() == "32"
    (parent / "cgroup.controllers").write_text("memory pids\n")  # no cpu offered: runs go without a quota
    cgroups.ControlGroups()._make_v2_base(str(mount), own)
    assert (parent / "cgroup.subtree_control").read_text() == "+memory +pids"
