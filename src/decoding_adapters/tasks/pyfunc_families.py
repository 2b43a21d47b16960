"""The embedded code task's family data: each family of :mod:`~decoding_adapters.tasks.pyfunc` as
operation templates (:class:`Op`) that expand into its pool of distinct problems, and which families
train and which are held out (``ood``).

A family is a list of operation templates; each template is expanded over function names,
parameter names and constants into the pool (``pyfunc.expand``). Test inputs are drawn from a
generator seeded by the question text, so they are fixed per question (and independent of the
split seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple


class Op(NamedTuple):
    """One operation template of a family."""

    phrase: str
    """What the function returns, with ``{p}`` (or ``{a}``, ``{b}``) for parameters and ``{c}``, ``{d}``
    for constants."""
    body: str
    """Reference expression with the same placeholders (``{c!r}`` for literal constants)."""
    names: tuple[str, ...]
    """Function names to choose from."""
    params: tuple[str, ...]
    """Parameter lists to choose from: one name, or two ("a, b") that phrases call ``{a}`` and ``{b}``."""
    constants: Sequence[tuple[Any, ...]] = ((),)
    """Constant tuples ``(c,)`` or ``(c, d)`` the template is expanded over."""
    inputs: str = "int"
    """Kind of test input: int, str, list, words, pair."""


_INTS = tuple(range(2, 30))
_SMALL = tuple(range(2, 10))
_WORDS = ("ab", "xyz", "!", "ing", "py", "ok", "end", "-")
_LETTERS = tuple("aeiorst")
_NUM_PARAMS = ("x", "n", "value")
_STR_PARAMS = ("s", "text", "word")
_LIST_PARAMS = ("nums", "values", "items")
_WORD_PARAMS = ("words", "names", "strings", "parts")
_PAIRS = ("a, b", "x, y", "m, n", "first, second")


def _consts(*ranges: Sequence[Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = [()]
    for values in ranges:
        out = [c + (v,) for c in out for v in values]
    return out


FAMILY_OPS: dict[str, tuple[Op, ...]] = {
    "add_const": (
        Op("returns {p} plus {c}", "{p} + {c!r}", ("add_const", "increase", "plus_n"), _NUM_PARAMS, _consts(_INTS)),
        Op(
            "returns {p} minus {c}",
            "{p} - {c!r}",
            ("subtract_const", "decrease", "minus_n"),
            _NUM_PARAMS,
            _consts(_INTS),
        ),
    ),
    "affine": (
        Op(
            "returns {c} times {p} plus {d}",
            "{c!r} * {p} + {d!r}",
            ("scale_shift", "linear", "transform"),
            _NUM_PARAMS,
            _consts(_SMALL, _INTS),
        ),
        Op(
            "returns {p} multiplied by {c}, minus {d}",
            "{p} * {c!r} - {d!r}",
            ("scale_down", "compute", "formula"),
            _NUM_PARAMS,
            _consts(_SMALL, _INTS),
        ),
        Op(
            "returns the square of {p} plus {c}",
            "{p} * {p} + {c!r}",
            ("square_plus", "poly", "calc"),
            _NUM_PARAMS,
            _consts(_INTS),
        ),
        Op(
            "returns {p} plus {c}, all multiplied by {d}",
            "({p} + {c!r}) * {d!r}",
            ("shift_scale", "combine", "apply"),
            _NUM_PARAMS,
            _consts(_INTS, _SMALL),
        ),
    ),
    "str_basic": (
        Op(
            "returns the string {p} in upper case",
            "{p}.upper()",
            ("shout", "to_upper", "loud"),
            _STR_PARAMS,
            inputs="str",
        ),
        Op(
            "returns the string {p} reversed",
            "{p}[::-1]",
            ("reverse_text", "backwards", "flip"),
            _STR_PARAMS,
            inputs="str",
        ),
        Op(
            "returns the first character of the string {p}",
            "{p}[0]",
            ("first_char", "initial", "head"),
            _STR_PARAMS,
            inputs="str",
        ),
        Op(
            "returns the last character of the string {p}",
            "{p}[-1]",
            ("last_char", "final_letter", "tail_char"),
            _STR_PARAMS,
            inputs="str",
        ),
        Op(
            "returns the number of characters in the string {p}",
            "len({p})",
            ("text_length", "count_chars", "size"),
            _STR_PARAMS,
            inputs="str",
        ),
        Op(
            "returns the string {p} written twice",
            "{p} + {p}",
            ("double_text", "twice", "echo"),
            _STR_PARAMS,
            inputs="str",
        ),
    ),
    "str_param": (
        Op(
            "returns the string {p} followed by {c!r}",
            "{p} + {c!r}",
            ("add_suffix", "append_text", "decorate"),
            _STR_PARAMS,
            _consts(_WORDS),
            "str",
        ),
        Op(
            "returns {c!r} followed by the string {p}",
            "{c!r} + {p}",
            ("add_prefix", "prepend", "label"),
            _STR_PARAMS,
            _consts(_WORDS),
            "str",
        ),
        Op(
            "returns the string {p} repeated {c} times",
            "{p} * {c!r}",
            ("repeat_text", "multiply_text", "copies"),
            _STR_PARAMS,
            _consts(_SMALL),
            "str",
        ),
        Op(
            "returns the first {c} characters of the string {p}",
            "{p}[:{c!r}]",
            ("prefix_of", "take_start", "clip_text"),
            _STR_PARAMS,
            _consts(_SMALL),
            "str",
        ),
        Op(
            "returns the last {c} characters of the string {p}",
            "{p}[-{c!r}:]",
            ("suffix_of", "take_end", "ending"),
            _STR_PARAMS,
            _consts(_SMALL),
            "str",
        ),
        Op(
            "returns how many times the letter {c!r} appears in the string {p}",
            "{p}.count({c!r})",
            ("count_letter", "letter_count", "occurrences"),
            _STR_PARAMS,
            _consts(_LETTERS),
            "str",
        ),
        Op(
            "returns the string {p} with every {c!r} replaced by {d!r}",
            "{p}.replace({c!r}, {d!r})",
            ("swap_letter", "replace_letter", "substitute"),
            _STR_PARAMS,
            _consts(_LETTERS, ("x", "_", "*")),
            "str",
        ),
    ),
    "list_basic": (
        Op(
            "returns the sum of the list {p}", "sum({p})", ("total", "list_sum", "add_all"), _LIST_PARAMS, inputs="list"
        ),
        Op(
            "returns the number of elements in the list {p}",
            "len({p})",
            ("count_items", "list_length", "how_many"),
            _LIST_PARAMS,
            inputs="list",
        ),
        Op(
            "returns the largest number in the list {p}",
            "max({p})",
            ("largest", "list_max", "biggest"),
            _LIST_PARAMS,
            inputs="list",
        ),
        Op(
            "returns the smallest number in the list {p}",
            "min({p})",
            ("smallest", "list_min", "lowest"),
            _LIST_PARAMS,
            inputs="list",
        ),
        Op(
            "returns the first element of the list {p}",
            "{p}[0]",
            ("first_item", "head", "front"),
            _LIST_PARAMS,
            inputs="list",
        ),
        Op(
            "returns the last element of the list {p}",
            "{p}[-1]",
            ("last_item", "tail", "back"),
            _LIST_PARAMS,
            inputs="list",
        ),
    ),
    "list_param": (
        Op(
            "returns how many numbers in the list {p} are greater than {c}",
            "sum(1 for v in {p} if v > {c!r})",
            ("count_above", "how_many_big", "tally"),
            _LIST_PARAMS,
            _consts(_SMALL),
            "list",
        ),
        Op(
            "returns a new list with every number of the list {p} multiplied by {c}",
            "[v * {c!r} for v in {p}]",
            ("scale_all", "multiply_each", "times_list"),
            _LIST_PARAMS,
            _consts(_SMALL),
            "list",
        ),
        Op(
            "returns the sum of the list {p} plus {c}",
            "sum({p}) + {c!r}",
            ("sum_plus", "total_plus", "offset_sum"),
            _LIST_PARAMS,
            _consts(_INTS),
            "list",
        ),
        Op(
            "returns a new list with the numbers of the list {p} that are less than {c}",
            "[v for v in {p} if v < {c!r}]",
            ("keep_small", "filter_below", "under"),
            _LIST_PARAMS,
            _consts(_SMALL),
            "list",
        ),
        Op(
            "returns a new list with {c} added to every number of the list {p}",
            "[v + {c!r} for v in {p}]",
            ("add_to_all", "shift_list", "bump_all"),
            _LIST_PARAMS,
            _consts(_SMALL),
            "list",
        ),
        Op(
            "returns True if the number {c} is in the list {p}, and False otherwise",
            "{c!r} in {p}",
            ("contains", "has_value", "includes"),
            _LIST_PARAMS,
            _consts(_SMALL),
            "list",
        ),
    ),
    "cond": (
        Op(
            "returns the absolute value of {p}",
            "abs({p})",
            ("absolute", "magnitude", "distance_from_zero"),
            _NUM_PARAMS,
        ),
        Op(
            "returns True if {p} is even, and False otherwise",
            "{p} % 2 == 0",
            ("is_even", "even", "check_even"),
            _NUM_PARAMS,
        ),
        Op(
            "returns True if {p} is odd, and False otherwise",
            "{p} % 2 == 1",
            ("is_odd", "odd", "check_odd"),
            _NUM_PARAMS,
        ),
        Op(
            "returns 1 if {p} is positive, -1 if it is negative, and 0 if it is zero",
            "({p} > 0) - ({p} < 0)",
            ("sign", "signum", "direction"),
            _NUM_PARAMS,
        ),
        Op(
            "returns 'big' if {p} is greater than {c}, and 'small' otherwise",
            "'big' if {p} > {c!r} else 'small'",
            ("size_label", "classify", "big_or_small"),
            _NUM_PARAMS,
            _consts(_INTS),
        ),
        Op(
            "returns {p} if it is less than {c}, and {c} otherwise",
            "min({p}, {c!r})",
            ("cap", "at_most", "limit"),
            _NUM_PARAMS,
            _consts(_INTS),
        ),
        Op(
            "returns True if {p} is divisible by {c}, and False otherwise",
            "{p} % {c!r} == 0",
            ("divisible", "is_multiple", "check_divisor"),
            _NUM_PARAMS,
            _consts(_SMALL),
        ),
    ),
    # Held-out (ood) families: shapes the training families never show.
    "two_args": (
        Op(
            "returns {a} times {b} plus {c}",
            "{a} * {b} + {c!r}",
            ("mul_add", "product_plus", "combine2"),
            _PAIRS,
            _consts(_INTS),
            "pair",
        ),
        Op(
            "returns the sum of {a} and {b} multiplied by {c}",
            "({a} + {b}) * {c!r}",
            ("sum_times", "scaled_sum", "mix2"),
            _PAIRS,
            _consts(_SMALL),
            "pair",
        ),
        Op("returns {a} minus {b}", "{a} - {b}", ("difference", "subtract", "minus"), _PAIRS, inputs="pair"),
        Op(
            "returns the larger of {a} and {b}",
            "max({a}, {b})",
            ("larger", "max_of_two", "bigger"),
            _PAIRS,
            inputs="pair",
        ),
        Op(
            "returns the remainder of {a} divided by {b}",
            "{a} % {b}",
            ("remainder", "modulo", "leftover"),
            _PAIRS,
            inputs="pair",
        ),
    ),
    "words": (
        Op(
            "returns the longest string in the list {p}",
            "max({p}, key=len)",
            ("longest", "longest_word", "widest"),
            _WORD_PARAMS,
            inputs="words",
        ),
        Op(
            "returns the strings of the list {p} joined with {c!r} between them",
            "{c!r}.join({p})",
            ("join_words", "glue", "connect"),
            _WORD_PARAMS,
            _consts((", ", "-", " ", "+")),
            "words",
        ),
        Op(
            "returns how many strings in the list {p} start with the letter {c!r}",
            "sum(1 for w in {p} if w.startswith({c!r}))",
            ("count_starting", "starts_with", "initial_count"),
            _WORD_PARAMS,
            _consts(_LETTERS),
            "words",
        ),
        Op(
            "returns the total number of characters in all the strings of the list {p}",
            "sum(len(w) for w in {p})",
            ("total_length", "char_total", "letters"),
            _WORD_PARAMS,
            inputs="words",
        ),
        Op(
            "returns a new list with every string of the list {p} in upper case",
            "[w.upper() for w in {p}]",
            ("upper_all", "shout_all", "caps"),
            _WORD_PARAMS,
            inputs="words",
        ),
    ),
}
"""Operation templates by family name (the value stored in ``Problem.meta["family"]``)."""

TRAIN_FAMILIES = ("add_const", "affine", "str_basic", "str_param", "list_basic", "list_param", "cond")
"""Families of the default training mixture."""
OOD_FAMILIES = ("two_args", "words")
"""Held-out families: never in the default mixture, they make the ``ood`` split."""
ALL_FAMILIES = TRAIN_FAMILIES + OOD_FAMILIES
