"""MATH and GSM8K: competition / grade-school math with a boxed final answer.

Splits: train, validation, test, disjoint by content (the rules are in :mod:`.base`). The data is
not part of the package: name the files with ``data=`` (the CLI's ``--data``), or set the
environment variable ``DECODING_ADAPTERS_DATA`` to a folder that holds them under these names:

- ``math``:  ``math/train.jsonl`` (train), ``math/test500.jsonl`` (test); fields problem, solution,
  answer, level, type.
- ``gsm8k``: ``gsm8k/train.jsonl`` (train), ``gsm8k/test.jsonl`` (test); fields question, answer
  (reasoning, then ``#### N``).

Validation is carved from the train file by content hash (10%, :data:`~.base.VALIDATION_FRACTION`);
train keeps the other 90%. ``data="train=a.jsonl,test=b.jsonl"`` (or the mapping) names files per
split; one path ``data=file.jsonl`` is divided 80/10/10 into train/validation/test by content hash
(``data="test=file.jsonl"`` evaluates on the whole file). Problem ids are ``<task>/<content hash>``.

Verifier (:func:`score_math`). The predicted answer is the content of the last ``\\boxed{}`` (or
``\\fbox{}``), else a final-answer line ("The answer is X", "Answer: X", "#### X"). A fast
normaliser settles the easy cases (``\\frac12`` = ``1/2`` = ``0.5``, units, degrees, dollars,
thousands separators, ``x = 3``); anything else goes to math-verify, gold first:
``verify(parse(gold), parse(pred))``. math-verify's own timeouts use ``signal.alarm``, which fails
outside the main thread, so they are disabled; instead the time is bounded *before* calling it:
predictions longer than :data:`MAX_VERIFY_CHARS` (or 4x the gold's length) and expressions that
can make SymPy build astronomically large numbers (nested or 4+-digit exponents, factorials of
3+-digit numbers) are scored 0 without symbolic comparison.
"""

from __future__ import annotations

import logging
import os
import re
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar, Union

from .base import (
    SPLITS,
    DataSpec,
    Problem,
    SplitSource,
    Task,
    chat_messages,
    normalise_data_spec,
    read_jsonl,
    register_task,
    resolve_system_prompt,
)
from .splits import load_planned_split, plan_splits

MAX_VERIFY_CHARS = 300
"""Predictions longer than this (and than 4x the gold) skip math-verify: real MATH answers are
at most ~60 characters, and SymPy's time grows quickly with expression size."""


DATA_ENV = "DECODING_ADAPTERS_DATA"
"""Environment variable naming the folder that holds the math tasks' default files."""


def default_data_dir() -> Path | None:
    """``$DECODING_ADAPTERS_DATA`` if set, else None: no folder outside the project is ever read
    unless the user names it."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else None


# --------------------------------------------------------------------------- answer extraction

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"####\s*(.+)")
_ANSWER_LINE = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*:?\s*(.+)", re.IGNORECASE)
_INLINE_MATH = re.compile(r"\$+([^$]+)\$+|\\\((.+?)\\\)")
_GSM_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}`` (nested braces matched), else None.

    An unclosed last box (a completion cut off mid-answer) is skipped in favour of an earlier,
    complete one.
    """
    for match in reversed(list(_BOX_OPEN.finditer(text))):
        depth = 1
        for i in range(match.end(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[match.end() : i].strip()
    return None


def _answer_from_line(rest: str) -> str:
    """The answer in the remainder of a final-answer line: its first ``$...$`` if any, else the
    text up to the end of the sentence ("5. I hope it is correct." -> "5")."""
    inline = _INLINE_MATH.search(rest)
    if inline:
        return (inline.group(1) or inline.group(2)).strip()
    return re.split(r"\.\s+(?=[A-Z])", rest.strip(), maxsplit=1)[0].strip().rstrip(".").strip()


def extract_final_answer(text: str) -> str | None:
    """The final answer a completion states: last ``\\boxed{}``, else the last ``#### X``, else
    the last "answer is X" / "Answer: X" line; None if there is none."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    for pattern in (_HASHES, _ANSWER_LINE):
        matches = pattern.findall(text)
        if matches:
            answer = _answer_from_line(matches[-1])
            return answer or None
    return None


def has_closed_box(text: str) -> bool:
    """Whether some ``\\boxed{`` / ``\\fbox{`` of ``text`` is closed (nested braces matched), in one
    pass over the text (a check run after every generated token must stay linear)."""
    openers = {m.end() - 1 for m in _BOX_OPEN.finditer(text)}  # index of each box's "{"
    if not openers:
        return False
    stack: list[bool] = []  # for each open brace: whether it opened a box
    for i in range(min(openers), len(text)):
        if text[i] == "{":
            stack.append(i in openers)
        elif text[i] == "}" and stack and stack.pop():
            return True
    return False


def final_answer_complete(text: str) -> bool:
    """Whether ``text`` (a completion so far) holds a finished final answer: a closed ``\\boxed{}``,
    or a ``#### X`` / "answer is X" / "Answer: X" line that a newline has ended."""
    if has_closed_box(text):
        return True
    lines = (match for pattern in (_HASHES, _ANSWER_LINE) for match in pattern.finditer(text))
    return any(text.find("\n", match.end()) >= 0 for match in lines)


# --------------------------------------------------------------------------- fast normaliser

_SIZING = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])")
_THIN_SPACE = re.compile(r"\\[,!]")  # used inside numbers: 10\!000, 10\,000
_SPACING = re.compile(r"\\[;: ]|\\q?quad(?![a-zA-Z])")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°")
_TEXT = re.compile(r"\\(?:text|textbf|textrm|mbox|mathrm)\s*\{([^{}]*)\}")
_ASSIGNMENT = re.compile(r"^[a-zA-Z](?:_\{?[a-zA-Z0-9]+\}?)?\s*=\s*([^=]+)$")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_CHOICE = re.compile(r"^\(([A-Ea-e])\)$")


def _strip_text(s: str) -> str:
    """Drop ``\\text{...}`` units ("5 \\text{ cm}") when other content remains; otherwise the
    text is the answer ("\\text{Evelyn}") and is unwrapped."""
    without = _TEXT.sub("", s).strip()
    return without if without else _TEXT.sub(r"\1", s).strip()


def clean_answer(s: str) -> str:
    """Meaning-preserving clean-up of an answer string (still valid LaTeX for math-verify)."""
    s = s.strip().strip("$").strip()
    if s.startswith(("\\(", "\\[")) and s.endswith(("\\)", "\\]")):
        s = s[2:-2].strip()
    s = _SIZING.sub("", s).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _SPACING.sub(" ", _THIN_SPACE.sub("", s))
    s = _DEGREES.sub("", s).replace("\\%", "").replace("%", "").replace("\\$", "")
    s = _strip_text(s).rstrip(".").strip()
    assignment = _ASSIGNMENT.match(s)
    if assignment:  # "x = 3" -> "3": the variable name is not part of the answer
        s = assignment.group(1).strip()
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    choice = _CHOICE.match(s)
    return choice.group(1).upper() if choice else s


def canonical_answer(s: str) -> str:
    """``clean_answer`` plus spelling-only changes for string comparison: no whitespace,
    ``\\frac12`` -> ``\\frac{1}{2}``, ``\\sqrt2`` -> ``\\sqrt{2}`` (one-digit arguments, as in
    LaTeX). Not for math-verify: removing spaces can glue LaTeX commands to letters."""
    s = re.sub(r"\s+", "", clean_answer(s))
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    return re.sub(r"\\sqrt(\d)", r"\\sqrt{\1}", s)  # LaTeX reads \sqrt23 as sqrt(2)*3


def as_number(s: str) -> Fraction | None:
    """A canonical answer that is a plain number ("3", "-0.5", "1/2", "-\\frac{1}{2}"), else None."""
    frac = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s) or re.fullmatch(r"(-?)(\d+)/(\d+)", s)
    try:
        if frac:
            value = Fraction(int(frac.group(2)), int(frac.group(3)))
            return -value if frac.group(1) else value
        if re.fullmatch(r"[-+]?(?:\d+\.?\d*|\.\d+)", s):
            return Fraction(s)
    except (ZeroDivisionError, ValueError):
        return None
    return None


def numbers_match(gold: Fraction, pred: Fraction) -> bool:
    """Exact, or within 1e-6 when either is not an integer (a rounded decimal such as 0.333333
    for 1/3, as math-verify's 6-digit rounding would also accept)."""
    if gold == pred:
        return True
    integers = gold.denominator == 1 and pred.denominator == 1
    return not integers and abs(gold - pred) <= Fraction(1, 10**6)


# --------------------------------------------------------------------------- math-verify

_EXPLOSIVE = re.compile(
    r"\^\s*\{[^{}]*\^"  # nested exponent: 10^{10^{10}}
    r"|\^\s*\{?\s*-?\d{4,}"  # 4+-digit exponent: 2^{12345}
    r"|\*\*\s*\(?\s*\d{4,}|\*\*[^*]*\*\*"  # the same in Python notation
    r"|\d{3,}\s*!"  # factorial of a 3+-digit number
)


class _DropTimeoutWarning(logging.Filter):
    """math-verify logs a warning when its timeouts are off; ours are off on purpose (see module
    docstring), so that one message is dropped and everything else it logs is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutWarning())


def _too_costly(pred: str, gold: str) -> bool:
    return len(pred) > max(MAX_VERIFY_CHARS, 4 * len(gold)) or bool(_EXPLOSIVE.search(pred))


def math_verify_equal(gold: str, pred: str) -> bool:
    """math-verify's judgement, gold first, with signal-based timeouts off (thread-safe)."""
    from math_verify import parse, verify  # imported lazily: it pulls in SymPy (~1 s)

    def _parse(answer: str):
        return parse(f"$\\boxed{{{answer}}}$", parsing_timeout=None)

    parsed_gold, parsed_pred = _parse(gold), _parse(pred)
    if not parsed_gold or not parsed_pred:
        return False
    return bool(verify(parsed_gold, parsed_pred, timeout_seconds=None))


def answers_equal(gold: str, pred: str) -> bool:
    """Whether two extracted answers agree: string and numeric checks first, then math-verify."""
    gold_c, pred_c = canonical_answer(gold), canonical_answer(pred)
    if not pred_c:
        return False
    if gold_c == pred_c:
        return True
    gold_n, pred_n = as_number(gold_c), as_number(pred_c)
    if gold_n is not None and pred_n is not None:
        return numbers_match(gold_n, pred_n)  # two plain numbers: no need for SymPy
    gold_m, pred_m = clean_answer(gold), clean_answer(pred)
    if _too_costly(pred_m, gold_m):
        return False
    return math_verify_equal(gold_m, pred_m)


def score_math(completion: str, answer: str) -> float:
    """1.0 if the completion's final answer equals the gold ``answer``, else 0.0; never raises."""
    try:
        pred = extract_final_answer(completion)
        return float(pred is not None and answers_equal(answer, pred))
    except Exception:  # a verifier must not crash a rollout: an unjudgeable answer is wrong
        return 0.0


def gsm8k_gold(answer_field: str) -> str:
    """The number after ``####`` in a GSM8K answer field (the field itself if it has none)."""
    return answer_field.rsplit("####", 1)[-1].strip()


def _gsm8k_number(text: str) -> Fraction | None:
    """A number from an answer string, tolerant of "$", commas, units and trailing "."."""
    value = as_number(canonical_answer(text))
    if value is None:
        numbers = _GSM_NUMBER.findall(text)
        value = as_number(numbers[-1].replace(",", "").rstrip(".")) if numbers else None
    return value


NumericValue = Union[Fraction, tuple[int, ...]]
"""What the ``numeric`` verifier compares: a number, or the parts of a ratio or clock time
(``"3:4"`` -> ``(3, 4)``, ``"3:30 p.m."`` -> ``(3, 30)``)."""

_PAREN_FRACTION = re.compile(r"(-?)\((-?\d+)/(\d+)\)")  # "-(1/3)", "(2/5)" (canonical: no spaces)
_RATIO = re.compile(r"(?<![\d.])(\d+)\s*:\s*(\d+)(?!\d|\.\d)")
_NUMBER_OR_FRACTION = re.compile(r"(-?)\(?(\d+)/(\d+)\)?|-?\d[\d,]*(?:\.\d+)?")  # "a/b" read as one


def read_numeric(text: str) -> NumericValue | None:
    """The one value an answer string states, read whole: a number with its dressing ("$1,000",
    "9 (apples)", "12.5%"), a fraction ("3/4", "-(1/3)", "\\frac{1}{3}") or a ratio or clock time
    ("3:4", "3:30 p.m.", as the tuple of its parts); None when it states no number or several
    ("Yes", "Mrs. Hilt", "3 and 4")."""
    canonical = canonical_answer(text)
    value = as_number(canonical)
    if value is not None:
        return value
    fraction = _PAREN_FRACTION.fullmatch(canonical)
    if fraction:
        sign, top, bottom = fraction.groups()
        return None if int(bottom) == 0 else Fraction(int(top), int(bottom)) * (-1 if sign else 1)
    numbers = _GSM_NUMBER.findall(text)
    ratios = _RATIO.findall(text)
    if len(ratios) == 1 and len(numbers) == 2:
        return tuple(int(part) for part in ratios[0])
    if len(numbers) == 1:
        return as_number(numbers[0].replace(",", "").rstrip("."))
    return None


def _predicted_numeric(completion: str, gold: NumericValue | None = None) -> NumericValue | None:
    """The value a completion gives as its answer: its final answer (boxed / "####" / "answer is")
    read whole, else that answer's last number, else the completion's last number (a fraction
    "a/b" there when the gold is not an integer); for a ratio gold, the last ratio of the final
    answer, else of the completion."""
    ratio = isinstance(gold, tuple)
    final = extract_final_answer(completion)
    if ratio:
        ratios = _RATIO.findall(final) if final is not None else []
        ratios = ratios or _RATIO.findall(completion)
        return tuple(int(part) for part in ratios[-1]) if ratios else None
    if final is not None:
        whole = read_numeric(final)
        if isinstance(whole, Fraction):
            return whole
    if final is None and gold is not None and gold.denominator != 1:
        last = [m.groups() for m in _NUMBER_OR_FRACTION.finditer(completion)][-1:]
        if last and last[0][1] is not None and int(last[0][2]):
            sign, top, bottom = last[0]
            return Fraction(int(top), int(bottom)) * (-1 if sign else 1)
    pred = _gsm8k_number(final if final is not None else completion)
    if pred is None and final is not None:  # e.g. a box with only text: use the last number
        pred = _gsm8k_number(completion)
    return pred


def score_gsm8k(completion: str, gold_answer_field: str) -> float:
    """1.0 if the completion's answer equals the gold (a ``#### N`` field, or an answer string read
    whole by :func:`read_numeric`: a number, a fraction, a ratio or a time), else 0.0.

    The prediction is the final answer (boxed / "####" / "answer is"), else the last number in
    the completion; a number is compared as a number, so "1,000", "$1000" and "1000.0" all match
    1000; a ratio or time gold needs the same parts ("3:4"). A gold that states no number, or
    several, never scores (the ``jsonl`` task refuses such rows when it loads them). Never raises.
    """
    try:
        gold = read_numeric(gsm8k_gold(gold_answer_field))
        if gold is None:
            return 0.0
        pred = _predicted_numeric(completion, gold)
        if isinstance(gold, tuple) or pred is None:
            return float(gold == pred)
        return float(isinstance(pred, Fraction) and numbers_match(gold, pred))
    except Exception:
        return 0.0


def numeric_answer_key(completion: str, gold: str | None = None) -> str:
    """The answer :func:`score_gsm8k` reads in ``completion``, as text that is equal for equal
    values ("1,000", "$1000" and "1000.0" -> "1000"; "-(1/3)" -> "-1/3"; a ratio "3:4"); a ratio
    when ``gold`` is one; "" when it reads none."""
    try:
        value = _predicted_numeric(completion, None if gold is None else read_numeric(gsm8k_gold(gold)))
    except Exception:
        return ""
    return _value_text(value)


def _value_text(value: NumericValue | None) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ":".join(map(str, value))
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def math_answer_key(completion: str) -> str:
    """The answer :func:`score_math` reads in ``completion`` (its final answer), in the form the
    comparison treats alike: :func:`canonical_answer`, a plain number as its value ("0.5",
    "\\frac{1}{2}" and "1/2" -> "1/2"); "" when it states none."""
    answer = extract_final_answer(completion)
    if answer is None:
        return ""
    canonical = canonical_answer(answer)
    number = as_number(canonical)
    return canonical if number is None else _value_text(number)


# --------------------------------------------------------------------------- tasks


@dataclass
class _JsonlMathTask(Task):
    """A math task read from JSONL files; subclasses say which fields and files."""

    data: DataSpec = None
    """None (the default files), a mapping split -> path or its text form ``"train=a,test=b"``, or
    one path (divided 80/10/10 by content hash)."""
    system_prompt: str | None = None
    """A preset name from ``SYSTEM_PROMPTS``, literal text, or None (the model's default)."""

    instruction: ClassVar[str] = "Put the final answer within \\boxed{}."
    cot_instruction: ClassVar[str] = "Think step by step."
    required_fields: ClassVar[tuple[str, ...]] = ()
    default_files: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        self.data = normalise_data_spec(self.data)
        if self.data is not None and not isinstance(self.data, (str, Path, Mapping)):
            raise ValueError(
                "data must be a path, a mapping split -> path, 'split=path,...' or None; "
                f"got {type(self.data).__name__}"
            )
        self.system_prompt = resolve_system_prompt(self.system_prompt)
        # The splits on offer follow from data= (all three unless a mapping leaves one out).
        self.splits = tuple(self.split_sources())

    def split_sources(self) -> dict[str, SplitSource]:
        folder = default_data_dir()
        # No data named: the default files plan the splits (all three), and load() says what to pass.
        default = {s: (folder or Path(".")) / f for s, f in self.default_files.items()}
        return plan_splits(self.data, default, self.name, SPLITS)

    def load(self, split: str) -> list[Problem]:
        self.check_split(split)
        if self.data is None and default_data_dir() is None:
            files = ",".join(f"{s}=<path to {f.rsplit('/', 1)[-1]}>" for s, f in self.default_files.items())
            raise ValueError(
                f"task {self.name!r} needs data files: pass --data {files} (Python: data=...), or set "
                f"{DATA_ENV} to a folder holding {' and '.join(self.default_files.values())}"
            )
        return load_planned_split(self.split_sources(), split, self._read, self.name, id_prefix=self.name)

    def _read(self, path: Path) -> list[Problem]:
        rows = read_jsonl(path, self.required_fields)
        return [self.to_problem(row, f"{self.name}/{i}") for i, row in enumerate(rows)]

    def prompt(self, problem: Problem, cot: bool = False) -> list[dict[str, str]]:
        parts = [problem.question, self.cot_instruction if cot else None, self.instruction]
        return chat_messages(self.system_prompt, "\n\n".join(p for p in parts if p))

    def extract_answer(self, problem: Problem, completion: str) -> str:
        return math_answer_key(completion)

    def answer_complete(self, problem: Problem, text: str) -> bool:
        """A closed ``\\boxed{}``, or a ``####`` / "answer is" line ended by a newline."""
        return final_answer_complete(text)

    @abstractmethod
    def to_problem(self, row: dict[str, Any], problem_id: str) -> Problem:
        """One JSONL row (already checked for ``required_fields``) as a Problem."""


@register_task("math")
@dataclass
class MathTask(_JsonlMathTask):
    """Hendrycks MATH (default files: train, test = the 500-problem MATH-500 subset)."""

    required_fields: ClassVar[tuple[str, ...]] = ("problem", "answer")
    default_files: ClassVar[dict[str, str]] = {"train": "math/train.jsonl", "test": "math/test500.jsonl"}

    def to_problem(self, row: dict[str, Any], problem_id: str) -> Problem:
        meta = {k: row[k] for k in ("level", "type", "solution") if k in row}
        return Problem(problem_id, row["problem"], str(row["answer"]), meta)

    def reward(self, problem: Problem, completion: str) -> float:
        return score_math(completion, problem.answer)


@register_task("gsm8k")
@dataclass
class GSM8KTask(_JsonlMathTask):
    """GSM8K grade-school word problems (default files: train, test). ``Problem.answer`` is the
    number after ``####``; the full worked answer is kept in ``meta["solution"]``."""

    required_fields: ClassVar[tuple[str, ...]] = ("question", "answer")
    default_files: ClassVar[dict[str, str]] = {"train": "gsm8k/train.jsonl", "test": "gsm8k/test.jsonl"}

    def to_problem(self, row: dict[str, Any], problem_id: str) -> Problem:
        answer = str(row["answer"])
        return Problem(problem_id, row["question"], gsm8k_gold(answer), {"solution": answer})

    def reward(self, problem: Problem, completion: str) -> float:
        return score_gsm8k(completion, problem.answer)

    def extract_answer(self, problem: Problem, completion: str) -> str:
        return numeric_answer_key(completion, problem.answer)
