"""Attempts to forge a code task's reward: each scores 0.0.

The program under test is wrong (it returns a constant or prints nothing useful) and then tries
to make the verdict say "passed" anyway: reading its own file or argv (where a pass sentinel used
to live), its environment, /proc/self and its parent's command line, printing sentinel-looking
text, exiting with status 0 early, returning an object equal to everything, monkeypatching the
interpreter, or reading the data set's expected outputs. A correct solution still scores 1.0, so
each test can fail.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from decoding_adapters.sandbox.runner import probe_isolation
from decoding_adapters.tasks.code import CodeContestsTask, HumanEvalTask

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox needs POSIX")

# Top-level code appended after a wrong redefinition of the entry point. Each prints everything
# that looks like a pass sentinel it can find, then leaves with status 0.
FIND_AND_PRINT = (
    "import os, re, sys\n"
    "def _print_sentinels(text):\n"
    "    for token in sorted(set(re.findall(r'[\\w-]*passed-[\\w-]*', text)), key=len):\n"
    "        print(token, flush=True)\n"
)
HUMANEVAL_ATTACKS = {
    "reads its own file": FIND_AND_PRINT + "_print_sentinels(open(__file__).read())\nos._exit(0)\n",
    "reads argv[0]": FIND_AND_PRINT + "_print_sentinels(open(sys.argv[0]).read())\nos._exit(0)\n",
    "reads its environment": FIND_AND_PRINT + "_print_sentinels(repr(dict(os.environ)))\nos._exit(0)\n",
    "reads /proc/self": FIND_AND_PRINT
    + (
        "for name in ('cmdline', 'environ'):\n"
        "    _print_sentinels(open('/proc/self/' + name, 'rb').read().decode('utf-8', 'replace'))\n"
        "_print_sentinels(open(open('/proc/self/cmdline').read().split('\\0')[-2]).read())\n"
        "os._exit(0)\n"
    ),
    "reads the parent's argv": FIND_AND_PRINT
    + (
        "_print_sentinels(open('/proc/%d/cmdline' % os.getppid(), 'rb').read().decode('utf-8', 'replace'))\n"
        "os._exit(0)\n"
    ),
    "reads every file in its directory": FIND_AND_PRINT
    + (
        "for name in os.listdir('.'):\n"
        "    try:\n        _print_sentinels(open(name).read())\n    except OSError:\n        pass\n"
        "os._exit(0)\n"
    ),
    "prints sentinel-looking text": "print('humaneval-passed-0123456789abcdef', flush=True)\nprint('passed')\n",
    "os._exit(0) before the tests": "import os\nos._exit(0)\n",
    "SystemExit(0) before the tests": "raise SystemExit(0)\n",
    "excepthook exits 0": FIND_AND_PRINT
    + ("def _hook(*_):\n    _print_sentinels(open(__file__).read())\n    os._exit(0)\nsys.excepthook = _hook\n"),
    "atexit prints the sentinel": FIND_AND_PRINT
    + ("import atexit\natexit.register(lambda: _print_sentinels(open(__file__).read()))\n"),
    "monkeypatches repr": "import builtins\nbuiltins.repr = lambda value: 'True'\n",
}
WRONG_FUNCTION = "def has_close_elements(numbers, threshold):\n    return False\n"
ALWAYS_EQUAL = (
    "class Anything:\n    def __eq__(self, other):\n        return True\n"
    "    def __repr__(self):\n        return 'True'\n"
    "def has_close_elements(numbers, threshold):\n    return Anything()\n"
)
RAISES_SYSTEM_EXIT = "def has_close_elements(numbers, threshold):\n    raise SystemExit(0)\n"


@pytest.fixture(scope="module")
def humaneval():
    task = HumanEvalTask(timeout_s=20.0)
    return task, next(p for p in task.load("test") if p.id == "HumanEval/0")


def test_a_correct_humaneval_solution_still_passes(humaneval):
    task, problem = humaneval
    assert task.reward(problem, problem.answer) == 1.0


@pytest.mark.parametrize("attack", sorted(HUMANEVAL_ATTACKS))
def test_humaneval_forging_attempt_scores_zero(humaneval, attack):
    task, problem = humaneval
    completion = f"```python\n{WRONG_FUNCTION}{HUMANEVAL_ATTACKS[attack]}```"
    assert task.reward(problem, completion) == 0.0


@pytest.mark.parametrize(
    "code", [ALWAYS_EQUAL, RAISES_SYSTEM_EXIT], ids=["always-equal object", "SystemExit in the function"]
)
def test_humaneval_function_tricks_score_zero(humaneval, code):
    task, problem = humaneval
    assert task.reward(problem, f"```python\n{code}```") == 0.0


# --------------------------------------------------------------------------- CodeContests

RECORD = {
    "name": "sum_two",
    "description": "Read two integers and print their sum.",
    "public_tests": {"input": ["1 2\n", "20 22\n"], "output": ["3\n", "42\n"]},
}
READ_THE_ANSWERS = (
    "import json, sys\n"
    "stdin = sys.stdin.read()\n"
    "for line in open({path!r}):\n"
    "    record = json.loads(line)\n"
    "    tests = record['public_tests']\n"
    "    for given, expected in zip(tests['input'], tests['output']):\n"
    "        if given == stdin:\n"
    "            print(expected, end='')\n"
)
CODECONTESTS_ATTACKS = {
    "prints its environment, /proc/self and the parent's argv": (
        "import os\nprint(dict(os.environ))\n"
        "print(open('/proc/self/cmdline', 'rb').read(), open('/proc/self/environ', 'rb').read())\n"
        "print(open('/proc/%d/cmdline' % os.getppid(), 'rb').read())\n"
    ),
    "os._exit(0) without output": "import os\nos._exit(0)\n",
    "prints sentinel-looking text": "print('passed')\nprint('codecontests-passed-0123')\n",
}


@pytest.fixture(scope="module")
def contests():
    # A world-readable data set, as data sets usually are.
    directory = tempfile.mkdtemp(prefix="forging-data-")
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "contests.jsonl")
    with open(path, "w") as handle:
        handle.write(json.dumps(RECORD) + "\n")
    os.chmod(path, 0o644)
    task = CodeContestsTask(data={"test": path}, timeout_s=20.0)  # one path alone would be split 80/10/10
    yield task, task.load("test")[0], path
    shutil.rmtree(directory)


def test_a_correct_codecontests_solution_still_passes(contests):
    task, problem, _ = contests
    assert task.reward(problem, "```python\nprint(sum(map(int, input().split())))\n```") == 1.0


def test_codecontests_program_cannot_read_the_expected_outputs(contests):
    if not probe_isolation().layers.private_filesystem:
        pytest.skip("no private filesystem view on this machine: world-readable data is readable")
    task, problem, path = contests
    assert task.reward(problem, f"```python\n{READ_THE_ANSWERS.format(path=path)}```") == 0.0


@pytest.mark.parametrize("attack", sorted(CODECONTESTS_ATTACKS))
def test_codecontests_forging_attempt_scores_zero(contests, attack):
    task, problem, _ = contests
    assert task.reward(problem, f"```python\n{CODECONTESTS_ATTACKS[attack]}```") == 0.0
