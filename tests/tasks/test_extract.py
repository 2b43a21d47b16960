"""The code extractor the code tasks share: the cases of a whole program (HumanEval, CodeContests)
and of one named function (pyfunc), and hostile completions that must not cost seconds."""

from __future__ import annotations

import gc
import time

import pytest

from decoding_adapters.tasks.extract import code_blocks, extract_code, extract_function_code, strip_think

# --------------------------------------------------------------------------- a whole program


def test_extract_prefers_the_last_python_block():
    completion = (
        "First try:\n```python\ndef f():\n    return 1\n```\n"
        "To install:\n```bash\npip install nothing\n```\n"
        "Better:\n```python\ndef f():\n    return 2\n```\nThat's it."
    )
    assert extract_code(completion) == "def f():\n    return 2\n"


@pytest.mark.parametrize("label", ["py", "Python", "python3", "python title='x.py'"])
def test_extract_accepts_python_labels(label):
    assert extract_code(f"```{label}\nprint(1)\n```") == "print(1)\n"


def test_extract_falls_back_to_any_fenced_block():
    assert extract_code("Sure:\n```\nprint(1)\n```\n") == "print(1)\n"


def test_extract_takes_an_unclosed_final_block():
    assert extract_code("Here:\n```python\nprint(1)\nprint(2)") == "print(1)\nprint(2)"
    assert extract_code("Here:\n```bash\nls") == "Here:\n```bash\nls"  # not python: the whole text


def test_extract_returns_raw_text_without_fences():
    assert extract_code("    return x + 1\n") == "    return x + 1\n"


def test_extract_ignores_code_inside_think():
    completion = "<think>draft:\n```python\nprint('draft')\n```\n</think>\nFinal:\n```python\nprint('final')\n```"
    assert extract_code(completion) == "print('final')\n"


# --------------------------------------------------------------------------- one named function


@pytest.mark.parametrize(
    "completion,expected",
    [
        ("```python\ndef f(x):\n    return x + 1\n```\nThis adds one.", "def f(x):\n    return x + 1\n"),
        ("Here:\n```\ndef f(x):\n    return x + 1\n```", "def f(x):\n    return x + 1\n"),
        ("```python\ndef f(x):\n    return x + 1\n", "def f(x):\n    return x + 1\n"),  # cut by the token limit
        ("Sure! def f(x):\n    return x + 1\nThis function adds one.", "def f(x):\n    return x + 1\n"),
        ("  def f(x):\n      return x + 1\n", "def f(x):\n    return x + 1\n"),  # indented
        (
            "import math\n\ndef f(x):\n    return math.floor(x)\n\nprint(f(2))",
            "import math\ndef f(x):\n    return math.floor(x)\n",
        ),
        (
            "```python\ndef g(x):\n    return 0\n```\n```python\ndef f(x):\n    return 1\n```\n"
            "```python\nprint(f(1))\n```",
            "def f(x):\n    return 1\n",
        ),
        (
            "```python\ndef f(x):\n    return 1\n```\nAnd faster:\n```python\ndef f(x):\n    return 2",
            "def f(x):\n    return 2\n",  # the unclosed final block counts too
        ),
        ("<think>def f(x): return 0</think>no code here", ""),
        ("I cannot write that function.", ""),
        (
            "from a.b import (c, d)   \nimport os, sys\ndef f(x):\n    return x",
            "from a.b import (c, d)\nimport os, sys\ndef f(x):\n    return x\n",
        ),
    ],
)
def test_extract_function_code(completion: str, expected: str) -> None:
    assert extract_function_code(completion, "f") == expected


# --------------------------------------------------------------------------- the shared pieces


def test_code_blocks_in_order_with_the_unclosed_one_last():
    text = "a ```py\none\n``` b\n```\ntwo\n```\n```Python3 x\nthree"
    blocks = [(block.label, block.body, block.closed) for block in code_blocks(text)]
    assert blocks == [("py", "one\n", True), ("", "two\n", True), ("python3", "three", False)]
    assert code_blocks("no fences") == [] and code_blocks("```python") == []  # no line after the fence


def test_strip_think_drops_closed_sections_only():
    assert strip_think("a<think>x</think>b<think>y</think>c") == "abc"
    assert strip_think("a<think>x</think>b<think>unclosed") == "ab<think>unclosed"


HOSTILE = {  # name -> completion of about n characters
    "unclosed think tags": lambda n: "<think>" * (n // 7),
    "fences without line ends": lambda n: "```x" * (n // 4),
    "fences between words": lambda n: "a ```" * (n // 5),
    "bare fences": lambda n: "```\n" * (n // 4),
    "import line with trailing junk": lambda n: "import a" + " " * n + "!\ndef f(x):\n    return x",
    "spaces before a def": lambda n: "x" + " " * n + "def f(x):\n    return x",
    "many defs": lambda n: "def f(" * (n // 6),
}


def scan_seconds(text: str) -> float:
    """The best of three timings of both extractors on ``text``, without the garbage collector
    (a full collection in a large test process takes longer than the scan)."""
    timings = []
    gc.disable()
    try:
        for _ in range(3):
            started = time.perf_counter()
            extract_code(text)
            extract_function_code(text, "f")
            timings.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return min(timings)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_completions_are_scanned_in_linear_time(name):
    # Patterns that backtrack took 1.6-6.9 s on 64 KiB of the first three; a linear scan takes
    # under 30 ms on any of them (the bound leaves room for a loaded machine).
    assert scan_seconds(HOSTILE[name](65_536)) < 1.0, name


def test_non_utf8_and_surrogates_pass_through():
    text = "```python\ndef f(x):\n    return '\udcff\ud800'\n```"
    assert extract_function_code(text, "f") == "def f(x):\n    return '\udcff\ud800'\n"
    assert extract_code(text) == "def f(x):\n    return '\udcff\ud800'\n"
