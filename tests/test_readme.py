"""The README's smoke test: every command and Python snippet in README.md, then in the pages it hands
the reader on to for using an adapter (``DOCS``), runs as written at a tiny size.

The files are parsed when the test runs, so a new block is covered the day it is written. Blocks run
in order (README first) in one working folder (``runs/...`` written by one command is read by the
next) and Python blocks share one namespace, as in a session that follows the README top to bottom.

What "as written" allows, and nothing else:
- **Sizes**, through documented options appended to a command (argparse keeps the last value):
  ``TINY`` per sub-command, and ``--model`` naming the tiny random model wherever a command would
  load the default ``smollm2`` (``generate``/``serve`` use the adapter's own base model, as written).
- **The server's port**: ``serve`` gets a free port (``--port``), and the address in the Python
  snippets is rewritten to it, so the test never collides with whatever holds port 8000.
- **The user's files** a snippet assumes (``my/train.jsonl``, ``my/test.jsonl``, ``mypkg/check.py``)
  are written into the working folder first; ``examples/`` is linked there from the repository.
- ``NOT_RUN``: the blocks and commands that cannot run here, each with its reason, and
  ``EQUIVALENT``: commands run through their tiny-size equivalent (``make demo``).
A command or block the test does not know how to run fails the test: teach it (or add a reason).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [ROOT / "docs" / "using-adapters.md"]
"""Pages whose blocks run after the README's, in the same session (they use what it trained)."""
README_MAX_LINES = 220

TINY: dict[str, list[str]] = {
    "select-actions": ["--max-problems", "2", "--samples", "1", "--token-budget", "4", "--no-progress"],
    "train-sequence": ["--force",
                       "--steps", "1", "--prompts-per-step", "2", "--max-train-prompts", "4", "--val-problems", "2",
                       "--token-budget", "4"],
    "train-token": ["--force",
                       "--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--max-train-prompts", "4",
                    "--val-problems", "2", "--filter-samples", "0", "--token-budget", "4"],
    "train-draft": ["--force",
                       "--steps", "1", "--prompts-per-step", "2", "--max-train-prompts", "4", "--val-problems", "2",
                    "--table-samples", "1", "--token-budget", "4"],
    "evaluate": ["--max-problems", "2", "--seeds", "1", "--token-budget", "4", "--best-problems", "2", "--no-progress"],
    "generate": ["--token-budget", "4"],
    "serve": [],
    "domains": ["--size", "tiny", "--no-progress"],
    "reproduce": ["--size", "smoke", "--no-progress"],
    "demo": ["--size", "tiny", "--token-budget", "4", "--no-progress"],
    "model-path": [],
    "rules": ["--max-problems", "4", "--samples", "2", "--token-budget", "4"],
    "train-attempt": ["--steps", "2", "--prices", "0.1", "--train-problems", "4", "--val-problems", "4",
                      "--token-budget", "4"],
    "make-rule": [],
}
"""Sub-command -> the documented options that make it tiny (appended after the README's own)."""

USES_ADAPTER_BASE = ("generate", "serve")
"""Sub-commands whose model defaults to the adapter's own base model (no --model appended)."""

EXAMPLE_TINY = ["--force", "--token-budget", "3", "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
                "--val-problems", "1", "--filter-samples", "0", "--max-train-prompts", "4", "--eval-k", "1",
                "--max-problems", "2"]
"""``python examples/user_task/train.py``: its own documented size options."""

NOT_RUN: dict[str, str] = {
    "make test": "it is this test suite (CI runs it as .ci/run)",
    "make setup": "this test runs in the environment it sets up",
    ". .venv/bin/activate": "activates the environment this test already runs in",
}
"""Bash commands (matched at their start) that are not run, with the reason."""

EQUIVALENT: dict[str, str] = {
    "make demo": "decoding-adapters demo --out runs/demo",  # the Makefile's demo target, then sized by TINY
}
"""Bash commands run as their documented equivalent (then sized like any other command)."""

PYTHON_NOT_RUN: dict[str, str] = {
    "vllm": "needs vLLM, which the main environment does not install: the vLLM lane (make test-vllm, "
            "tests/vllm_lane) runs these paths on a real engine",
}
"""Python blocks that mention this word are not run, with the reason."""


@dataclass(frozen=True)
class Block:
    language: str
    line: int
    """1-based line of the block's first code line in its file."""
    text: str
    source: Path = README


def readme_blocks(text: str, source: Path = README) -> list[Block]:
    """The fenced ``bash``/``sh``/``python`` blocks of a Markdown text, in order."""
    blocks = []
    for match in re.finditer(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", text, flags=re.M | re.S):
        language = match.group(1).lower()
        if language in ("bash", "sh", "shell", "console", "python", "py"):
            line = text.count("\n", 0, match.start(2)) + 1
            blocks.append(Block("python" if language.startswith("py") else "bash", line, match.group(2), source))
    return blocks


def bash_commands(text: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, blank and comment lines dropped."""
    joined = re.sub(r"[ \t]*\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    return env


class Session:
    """One reader following the README: a working folder, a Python namespace, a running server."""

    def __init__(self, workdir: Path, tiny_model_dir: Path):
        self.workdir, self.model = workdir, str(tiny_model_dir)
        self.port = _free_port()
        self.namespace: dict = {"__name__": "__readme__"}
        self.server: subprocess.Popen | None = None
        self.ran: list[str] = []
        self.skipped: list[tuple[str, str]] = []

    # ---- bash ---------------------------------------------------------------------------------
    def run_command(self, command: str) -> None:
        command = shlex.join(shlex.split(command, comments=True))  # without its comment
        for prefix, reason in NOT_RUN.items():
            if command.startswith(prefix):
                self.skipped.append((command, reason))
                return
        for prefix, equivalent in EQUIVALENT.items():
            if command.startswith(prefix):
                command = equivalent + command[len(prefix):]
        argv = shlex.split(command, comments=True)
        assert "..." not in argv, f"not runnable as written (an elided '...'): {command}"
        if argv[0] == "decoding-adapters":
            self._cli(argv[1:], command)
        elif argv[0] == "python" and argv[1:3] == ["-m", "decoding_adapters"]:
            assert "--help" in argv, f"teach the smoke test a size for: {command}"
            self._subprocess([sys.executable, *argv[1:]], command)
        elif argv[0] == "python" and argv[1:2] == ["examples/user_task/train.py"]:
            self._subprocess([sys.executable, *argv[1:], "--model", self.model, *EXAMPLE_TINY], command)
        else:
            raise AssertionError(f"the README smoke test does not know how to run: {command!r} (teach "
                                 "tests/test_readme.py, or add it to NOT_RUN with the reason)")
        self.ran.append(command)

    def _cli(self, args: list[str], command: str) -> None:
        from decoding_adapters.cli import main

        sub = next((a for a in args if not a.startswith("-")), None)
        if sub is None or "--help" in args or "--plan" in args:  # prints, no work: run exactly as written
            extra = []
        else:
            assert sub in TINY, f"no tiny size known for `decoding-adapters {sub}`: add it to TINY ({command})"
            extra = list(TINY[sub]) + ([] if sub in USES_ADAPTER_BASE else ["--model", self.model])
        if sub == "serve" and self.server is not None:  # a later example serves another adapter: checked on
            other = _free_port()  # its own port and stopped, the first server stays for the snippets
            second = self._start_server([*args, *extra, "--port", str(other)], command, port=other)
            second.terminate()
            second.wait(timeout=20)
            return
        if sub == "serve":
            self.server = self._start_server([*args, *extra, "--port", str(self.port)], command)
            return
        try:
            code = main([*args, *extra])
        except SystemExit as stop:  # --help
            code = stop.code or 0
        assert code == 0, f"exit status {code}: {command}"

    def _subprocess(self, argv: list[str], command: str) -> None:
        done = subprocess.run(argv, cwd=self.workdir, env=_env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"

    def _start_server(self, args: list[str], command: str, port: int | None = None) -> subprocess.Popen:
        import httpx

        port = port or self.port
        code = "import sys; from decoding_adapters.cli import main; sys.exit(main())"
        server = subprocess.Popen([sys.executable, "-c", code, *args], cwd=self.workdir, env=_env(),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise AssertionError(f"{command} exited: {server.stderr.read()[-4000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"{command}: the server did not come up in 120 s")

    # ---- python -------------------------------------------------------------------------------
    def run_python(self, block: Block) -> None:
        where = f"{block.source.name}:{block.line}"
        for word, reason in PYTHON_NOT_RUN.items():
            if word in block.text:
                self.skipped.append((f"python block at {where}", reason))
                return
        code = block.text.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
        # line numbers in a traceback are the file's own
        exec(compile("\n" * (block.line - 1) + code, str(block.source), "exec"), self.namespace)
        self.ran.append(f"python block at {where}")

    def close(self) -> None:
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.server.kill()


USER_FILES = {
    # A user task as the README's "Your own task" describes it: JSONL rows and a verifier module.
    "my/train.jsonl": "".join(f'{{"question": "What is {i} + {i}?", "answer": "{2 * i}"}}\n' for i in range(12)),
    "my/test.jsonl": "".join(f'{{"question": "What is {i} + 1?", "answer": "{i + 1}"}}\n' for i in range(100, 104)),
    # one file with other field names (divided 80/10/10 by content hash)
    "my/rows.jsonl": "".join(f'{{"input": "What is {i} + {2 * i}?", "target": "{3 * i}"}}\n' for i in range(60)),
    # a question in two fields and a numeric answer, as SVAMP has them
    "my/svamp.jsonl": "".join(f'{{"Body": "Ann has {i} apples and buys {i + 3} more.", "Question": "How many apples '
                              f'does Ann have now?", "Answer": {2.0 * i + 3}}}\n' for i in range(40)),
    "mypkg/__init__.py": "",
    "mypkg/check.py": "def score(completion, answer):\n    return float(completion.strip() == answer.strip())\n",
}


@pytest.fixture(scope="module")
def session(tmp_path_factory, tiny_model_dir):
    workdir = tmp_path_factory.mktemp("readme")
    for name, text in USER_FILES.items():
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text(text)
    (workdir / "examples").symlink_to(ROOT / "examples")
    cwd, path = os.getcwd(), list(sys.path)
    os.chdir(workdir)
    sys.path.insert(0, str(workdir))  # `python` in that folder: its modules (mypkg) import
    s = Session(workdir, tiny_model_dir)
    try:
        yield s
    finally:
        s.close()
        os.chdir(cwd)
        sys.path[:] = path
        sys.modules.pop("mypkg.check", None)
        sys.modules.pop("mypkg", None)


BLOCKS = readme_blocks(README.read_text(encoding="utf-8")) + [
    block for page in DOCS for block in readme_blocks(page.read_text(encoding="utf-8"), page)]


def test_the_readme_has_blocks_to_run_and_starts_short():
    readme = [b for b in BLOCKS if b.source == README]
    assert sum(b.language == "bash" for b in readme) >= 3 and sum(b.language == "python" for b in readme) >= 3
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    commands = [c for b in readme if b.language == "bash" for c in bash_commands(b.text)]
    # a single JSONL file, the module entry point, the set-up and the tiny demo are shown
    assert any("--task jsonl --data my/rows.jsonl" in c for c in commands)
    assert "python -m decoding_adapters --help" in " ".join(commands)
    assert any(c.startswith("make setup") for c in commands) and any("--size tiny" in c for c in commands)
    # the planted benchmark's "current defaults" start at a prior: the README's own train-token sets one
    assert any("train-token --task arithmetic" in c and "--prior-action" in c for c in commands)
    assert "--prior-action" in (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    # the commands come with their sizes and a measured time, and how to make them small
    assert all(word in text for word in ("--max-problems", "--baselines", "7 minutes"))
    for link in re.findall(r"\]\((docs/[^)#]+)", text):  # every page the README hands on to exists
        assert (ROOT / link).exists(), link


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.source.stem}-L{b.line}-{b.language}" for b in BLOCKS])
def test_readme_block_runs_as_written(block: Block, session: Session, capsys):
    ran, skipped = len(session.ran), len(session.skipped)
    if block.language == "python":
        session.run_python(block)
    else:
        for command in bash_commands(block.text):
            session.run_command(command)
    with capsys.disabled():  # what this block ran and left out, in the test log
        print(f" {block.source.name}:{block.line}: ran {len(session.ran) - ran}"
              + "".join(f"; not run: {c} ({r})" for c, r in session.skipped[skipped:]), end=" ")


def test_parsing_follows_the_markdown():
    text = ("x\n```bash\na \\\n  --b 1   # note\n# only a comment\n\nc\n```\n"
            "```python\nprint(1)\n```\n```json\n{}\n```\n")
    blocks = readme_blocks(text)
    assert [(b.language, b.line) for b in blocks] == [("bash", 3), ("python", 10)]
    assert bash_commands(blocks[0].text) == ["a --b 1   # note", "c"]
    assert shlex.split(bash_commands(blocks[0].text)[0], comments=True) == ["a", "--b", "1"]


MINUTES = re.compile(r"\d+(?:\.\d+)? ?(?:min\b|minutes|h\b|hours)")
PROBLEM_COUNT = re.compile(r"\d[\d,]* (?:test |sealed |evaluated )?problems")
SPLIT_COUNT = re.compile(r"\d[\d,]* (?:test|sealed) problems")


def test_the_reproduce_plan_and_problems_are_stated_once_and_true(capsys):
    """The ``reproduce`` study's plan (minutes on the reference machine) and its problem count are
    stated in docs/results.md, as the code plans them, and nowhere else: the README, the other pages
    and the command-line help point there instead of restating (or contradicting) them."""
    from decoding_adapters.cli import COMMANDS, main
    from decoding_adapters.experiments.planning import estimate_minutes
    from decoding_adapters.experiments.presets import FULL
    from decoding_adapters.experiments.probe import REFERENCE_PROBE_TOKENS_PER_SECOND

    plan = f"{sum(estimate_minutes(FULL, REFERENCE_PROBE_TOKENS_PER_SECOND).values()):.1f}"
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert results.count(f"{plan} minutes") == 1
    assert f"{FULL.eval_problems:,} problems of the sealed2 split" in results
    assert main(["reproduce", "--help"]) == 0
    help_text = capsys.readouterr().out + COMMANDS["reproduce"][1]
    assert not MINUTES.findall(help_text) and not PROBLEM_COUNT.findall(help_text)
    readme = README.read_text(encoding="utf-8")
    assert not SPLIT_COUNT.findall(readme)
    sentences = re.split(r"(?<=[.;])\s+", readme)
    assert not [text for text in sentences if "reproduce" in text and MINUTES.search(text)]
    rounded = re.compile(rf"(?<![\d.]){re.escape(plan)}(?![\d])|~{round(float(plan))} ?min")
    elsewhere = [path.name for path in [README, *(ROOT / "docs").glob("*.md")]
                 if path.name != "results.md" and rounded.search(path.read_text(encoding="utf-8"))]
    # in results.md once, with its unit (a table's token count may hold the same digits)
    assert elsewhere == [] and not re.findall(rf"~{round(float(plan))} ?min", results)
