"""Code in a model's completion: the one extractor the code tasks share.

:func:`code_blocks` finds the fenced blocks (```` ```python ... ``` ````) and a final block whose
closing fence is missing (generation stopped at its length limit), after dropping any
``<think>...</think>`` section; :func:`extract_code` (a whole program or a HumanEval body) and
:func:`extract_function_code` (one named function) choose among them.

Every scan here takes time linear in the completion's length (``str.find`` and regexes without
nested or adjacent repetition): a completion is hostile input, and a pattern that backtracks
(``<think>.*?</think>`` retried at each of thousands of unclosed ``<think>`` tags) would take
seconds per reward on a 64 KiB completion.
"""

from __future__ import annotations

import logging
import re
import textwrap
import threading
from typing import Any, Callable, NamedTuple, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")

FENCE = "```"
PYTHON_LABELS = frozenset({"python", "python3", "py"})
_LABEL = re.compile(r"[ \t]*([\w+#.-]*)")
_IMPORT = re.compile(r"import [\w., ]+|from [\w.]+ import [\w., ()*]+")
_DEF_INLINE = re.compile(r"(?<=\S)[ \t]+(?=def[ \t]+\w+[ \t]*\()")


class Block(NamedTuple):
    """One fenced block of a completion."""

    label: str
    """The word after the opening fence, lower-cased ("python", "py", "" when none)."""
    body: str
    """The text between the opening fence's line and the closing fence."""
    closed: bool
    """False for a final block whose closing fence never came."""
    header: str = ""
    """The rest of the opening fence's line (the label and anything after it)."""


def strip_think(text: str) -> str:
    """``text`` without its ``<think>...</think>`` sections (an unclosed ``<think>`` stays)."""
    parts, pos = [], 0
    while (start := text.find("<think>", pos)) >= 0:
        end = text.find("</think>", start + 7)
        if end < 0:
            break
        parts.append(text[pos:start])
        pos = end + 8
    parts.append(text[pos:])
    return "".join(parts)


def _label(header: str) -> str:
    return _LABEL.match(header).group(1).lower()


def _scan(completion: str) -> tuple[list[Block], str]:
    """(the closed blocks, the text around them) of ``completion`` without ``<think>`` sections."""
    text = strip_think(completion)
    blocks, rest, pos = [], [], 0
    while (start := text.find(FENCE, pos)) >= 0:
        newline = text.find("\n", start + 3)
        close = text.find(FENCE, newline + 1) if newline >= 0 else -1
        if close < 0:
            break  # no later fence can open a closed block either
        header = text[start + 3 : newline]
        blocks.append(Block(_label(header), text[newline + 1 : close], True, header))
        rest.append(text[pos:start])
        pos = close + 3
    rest.append(text[pos:])
    return blocks, "".join(rest)


def code_blocks(completion: str) -> list[Block]:
    """The fenced blocks of ``completion`` in order (``<think>`` sections dropped), the final
    unclosed one, if any, last.

    A block opens with three backticks anywhere on a line and ends at the next three backticks
    after that line. Once no opening fence has both a line end and a closing fence after it, the
    rest of the text (closed blocks removed) is searched for an unclosed block: an opening fence
    on the line of the last fence, followed by a line end, with no fence after it.
    """
    blocks, rest = _scan(completion)
    unclosed = _unclosed_block(rest)
    return blocks + ([unclosed] if unclosed else [])


def _unclosed_block(text: str, python_only: bool = False) -> Block | None:
    """The leftmost fence on the line of the last fence (with ``python_only``, the leftmost whose
    header is blank or a python label), when a line end follows: its block runs to the end."""
    last = text.rfind(FENCE)
    if last < 0:
        return None
    newline = text.find("\n", last + 3)
    if newline < 0:
        return None
    start = text.find(FENCE, text.rfind("\n", 0, last) + 1)
    while python_only and not _python_header(text, start + 3, newline):
        start = text.find(FENCE, start + 1)
        if start < 0 or start > last:
            return None
    header = text[start + 3 : newline]
    return Block(_label(header), text[newline + 1 :], False, header)


def _python_header(text: str, i: int, newline: int) -> bool:
    """Whether ``text[i:newline]`` is blank or a python label between blanks. Stops at the first
    other character, so trying every fence of a long line stays linear."""
    while i < newline and text[i] in " \t":
        i += 1
    for label in ("python3", "python", "py"):
        if text[i : i + len(label)].lower() == label:
            i += len(label)
            break
    while i < newline and text[i] in " \t":
        i += 1
    return i == newline


def extract_code(completion: str) -> str:
    """The program in a model's completion.

    In order of preference: the last closed block labelled python (```python, ```py,
    ```python3); else the last closed block with any or no label; else a final unclosed block
    whose fence line holds nothing but a python label or nothing at all; else the whole
    completion (``<think>`` sections dropped).
    """
    closed, rest = _scan(completion)
    python = [block for block in closed if block.label in PYTHON_LABELS]
    if python:
        return python[-1].body
    if closed:
        return closed[-1].body
    unclosed = _unclosed_block(rest, python_only=True)
    return unclosed.body if unclosed else rest


def _def_line(name: str) -> re.Pattern[str]:
    return re.compile(rf"^([ \t]*)def[ \t]+{re.escape(name)}[ \t]*\(", re.MULTILINE)


def extract_function_code(completion: str, name: str) -> str:
    """The code that defines ``name`` in a model's completion ("" if none does).

    In order of preference: the last block (closed, or left open by the token limit) that
    defines ``name``; else the function cut out of the text (the ``def`` line, then every line
    indented deeper or blank, up to the first line that is not), with the import lines found
    before it. Common indentation is removed. A ``<think>`` section is ignored.
    """
    pattern = _def_line(name)
    for block in reversed(code_blocks(completion)):
        if pattern.search(block.body):
            return textwrap.dedent(block.body).strip("\n") + "\n"
    return _cut_function(strip_think(completion), pattern)


def _cut_function(text: str, pattern: re.Pattern[str]) -> str:
    """The function starting at the last ``def name(`` of ``text`` (without fences), or ""."""
    text = text.replace(FENCE, "\n")
    text = _DEF_INLINE.sub("\n", text)  # "Sure! def f(x):" -> the def on a line of its own
    matches = list(pattern.finditer(text))
    if not matches:
        return ""
    match = matches[-1]
    indent = len(match.group(1).expandtabs())
    lines = text[match.start() :].splitlines()
    kept = [lines[0]]
    for line in lines[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        kept.append(line)
    imports = [line.strip() for line in text[: match.start()].splitlines() if _IMPORT.fullmatch(line.strip())]
    function = textwrap.dedent("\n".join(kept)).rstrip()
    return "\n".join(imports + [function]) + "\n"


# --------------------------------------------------------------------------- scoring hostile output

HOSTILE_OUTPUT_ERRORS = (RecursionError, MemoryError, OverflowError, UnicodeError, ValueError)
"""What output shaped by a completion (its code, the values or text its program sends back) could
still provoke in the trainer's process despite the size and nesting caps of the parsers. A reward
that meets one scores 0.0 (see :func:`guarded`): one completion must not end a run or take the
rewards of the completions batched with it. Anything else, and the sandbox's own
:class:`~decoding_adapters.sandbox.runner.SandboxError`, still raises: those are faults here."""

_failures = 0
_failures_lock = threading.Lock()


def guarded(score: Callable[..., T], *args: Any, default: T) -> T:
    """``score(*args)``, or ``default`` when it raises one of :data:`HOSTILE_OUTPUT_ERRORS`
    (logged: the first 10, then every 100th)."""
    global _failures
    try:
        return score(*args)
    except HOSTILE_OUTPUT_ERRORS as err:
        with _failures_lock:
            _failures += 1
            count = _failures
        if count <= 10 or count % 100 == 0:
            logger.warning("scoring a completion failed (%d so far), scored as %r: %s: %s",
                           count, default, type(err).__name__, str(err)[:200])
        return default
