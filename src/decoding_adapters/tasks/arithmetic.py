"""The embedded default task: small, procedurally generated arithmetic problems.

It needs no files and is sized for SmolLM2-135M-Instruct: the default mixture of families is
calibrated (``benchmarks/calibrate_arithmetic.py``, numbers in ``docs/arithmetic_calibration.md``)
so that greedy decoding solves 35-55% of the test split (41.5% measured) and sampling several
times solves clearly more (62.5% pass@4 at T=0.5), which leaves a decoding adapter something to learn.

How splits are built (train, validation, test):

1. Each family enumerates its whole *pool* of distinct questions (e.g. the 81 "What is a + b?"
   with single digits), in a fixed order.
2. The family's share of a split is fixed by the mixture weights with a smooth weighted
   round-robin, so every prefix of a split has the mixture's proportions (±1 per family).
3. The pool is shuffled with the config seed and cut into disjoint blocks, test first, then
   validation, then train. When the pool is large enough, each block is exactly the split's
   demand and no question repeats. When it is not (tiny pools, large splits), the splits take their
   whole demand in that order while the pool lasts (one question kept for each later split) and a
   split cycles through its block, so questions may repeat *within* a later split but a question
   never appears in two splits: disjointness is by question text. Growing train or validation
   therefore never changes test, nor the first problems of validation.

The ``ood`` split (``test_size`` problems, for out-of-distribution evaluation) is built the same
way from the held-out families ``ood_families`` (default: subtraction, subtraction word problems,
three-term sums), which ``families`` may not contain, with a seed stream of its own
(``"{seed}/ood/{family}"``). Families never share a question, so ``ood`` is disjoint from the other
splits by question text; building it leaves the other three splits byte-identical.

The ``sealed`` split (``sealed_size`` problems) is the test split of the published evidence run,
which alone scores it; no default command reads it (they evaluate ``test``, whose results are
history). It is built on its own from a seed stream no other split uses
(``"{sealed_seed}/sealed/{family}"``) and only from questions no other split can hold: each
family's pool, shuffled with the config seed as above, is cut in half; train, validation and test
take their blocks from the front half (they use a few percent of the large pools), and the sealed
split draws from the back half, less any question another split holds. It therefore never changes
when train or validation grow, and building it leaves the other splits byte-identical. A family
whose back half cannot serve its share without repeating a question (the 81-question single-digit
families) is left out and the others keep their relative weights: with the default mixture the
sealed split is 75% word problems and 25% two-digit sums, all questions distinct.

The ``sealed2`` split (``sealed2_size`` problems, seed ``sealed2_seed``, stream
``"{sealed2_seed}/sealed2/{family}"``) is the next evidence run's test split, disjoint from every
other split (train, validation, test, ood and the old ``sealed``, which stays as it was) by content,
not only by text: no problem shares its family and operands (:func:`content_key`: "Tom has 3
apples and buys 4 more" and "Anna had 3 coins. A friend gave Anna 4 more" are one content) with a
problem of another split, nor with the front half of the family's config-seed shuffle, where
train, validation and test draw from whatever their sizes. Word problems there have 64 operand
pairs (2..9), which train alone uses up, so ``sealed2``'s word problems take their operands from
the wider ``sealed2_word_range`` (2..19) and keep only the pairs no other split holds (at least one
operand from 10); the single-digit families' 81 operand pairs are all used by train, validation and
test, so they are left out as in ``sealed``, and the others keep their relative weights: with the
default mixture ``sealed2`` is 750 word problems and 250 two-digit sums, all questions distinct.
Report its results per family: its word problems have larger operands than the training ones.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

from .base import SPLITS, Problem, Task, chat_messages, register_task, resolve_system_prompt
from .math import extract_boxed, has_closed_box

Pool = list[tuple[str, int]]
"""A family's distinct problems as ``(question, integer answer)``, in a fixed order."""

# Word-problem vocabulary: plural nouns only, because operands start at 2 ("has 1 apples" is wrong).
_NAMES = ("Tom", "Anna", "Ben", "Maria", "Sam", "Lily", "Jack", "Emma", "Leo", "Mia")
_ITEMS = (
    "apples", "books", "marbles", "pencils", "stickers", "cookies", "coins", "cards", "shells", "balloons",
)
_WORD_TEMPLATES = (
    "{name} has {a} {items} and buys {b} more. How many {items} does {name} have now?",
    "{name} has {a} {items} and finds {b} more. How many {items} does {name} have now?",
    "{name} had {a} {items}. A friend gave {name} {b} more. How many {items} does {name} have now?",
)
# Subtraction word problems (held out for ood evaluation); b < a, so some are always left.
_SUB_WORD_TEMPLATES = (
    "{name} has {a} {items} and gives {b} away. How many {items} does {name} have left?",
    "{name} had {a} {items} and lost {b} of them. How many {items} does {name} have left?",
    "{name} has {a} {items} and uses {b} of them. How many {items} does {name} have left?",
)


DEFAULT_OOD_FAMILIES: dict[str, float] = {"sub_1digit": 0.2, "sub_word": 0.6, "add_chain": 0.2}
"""Held-out families of the ``ood`` split: subtraction (bare and in words) and three-term sums,
none of which the default mixture trains on."""


@dataclass(frozen=True)
class ArithmeticConfig:
    """Everything that determines the generated problems; same config, same problems."""

    # Default mixture, from measurements with SmolLM2-135M (docs/arithmetic_calibration.md): word
    # problems are the one family with a large pool *and* middling accuracy, so they carry most of
    # the weight; the single-digit families are easy but have only 81 questions each, and 0.1 of
    # 500 + 100 + 200 problems (80) is what they can serve without repeating a question.
    families: Mapping[str, float] = field(
        default_factory=lambda: {"add_1digit": 0.1, "mul_1digit": 0.1, "add_word": 0.6, "add_2digit": 0.2},
        hash=False,
    )
    """Mixture weights by family name (see :data:`FAMILIES`); a list means equal weights."""
    small_range: tuple[int, int] = (1, 9)
    """Inclusive operand range of the "single-digit" families (and of word problems, from 2)."""
    large_range: tuple[int, int] = (10, 99)
    """Inclusive operand range of the "two-digit" families."""
    chain_steps: int = 2
    """Operations in an ``add_chain`` question: 2 gives "What is 3 + 4 + 5?"."""
    train_size: int = 500
    """Problems in the train split."""
    validation_size: int = 100
    """Problems in the validation split."""
    test_size: int = 200
    """Problems in the test split."""
    seed: int = 0
    """Seed for the shuffles that choose and order the questions of each split."""
    sealed_size: int = 1000
    """Problems in the ``sealed`` split (the published evidence run's test split)."""
    sealed_seed: int = 20261127
    """Seed of the ``sealed`` split's own shuffles (a stream no other split or earlier run used)."""
    sealed2_size: int = 1000
    """Problems in the ``sealed2`` split (the next evidence run's test split, disjoint by content)."""
    sealed2_seed: int = 20261128
    """Seed of the ``sealed2`` split's own shuffles (a stream no other split or earlier run used)."""
    sealed2_word_range: tuple[int, int] = (2, 19)
    """Inclusive operand range of the ``sealed2`` split's word problems, of which it keeps only the
    operand pairs no other split holds (with the defaults: at least one operand from 10)."""
    ood_families: Mapping[str, float] | None = field(default=None, hash=False)
    """Held-out families of the ``ood`` split (``test_size`` problems), never in ``families``;
    None means :data:`DEFAULT_OOD_FAMILIES` less any family that ``families`` uses."""

    def __post_init__(self) -> None:
        # Normalise the forms JSON gives back (lists) so that configs round-trip.
        families = self.families
        if isinstance(families, str) or not isinstance(families, (Mapping, Sequence)):
            raise ValueError(f"families must be a mapping name -> weight or a list of names; got {families!r}")
        if not isinstance(families, Mapping):
            families = {name: 1.0 for name in families}
        object.__setattr__(self, "families", dict(families))
        ood = self.ood_families
        if ood is None:
            ood = {name: w for name, w in DEFAULT_OOD_FAMILIES.items() if name not in self.families}
        if isinstance(ood, str) or not isinstance(ood, (Mapping, Sequence)):
            raise ValueError(f"ood_families must be a mapping name -> weight or a list of names; got {ood!r}")
        object.__setattr__(self, "ood_families", dict(ood) if isinstance(ood, Mapping) else dict.fromkeys(ood, 1.0))
        object.__setattr__(self, "small_range", tuple(self.small_range))
        object.__setattr__(self, "large_range", tuple(self.large_range))
        object.__setattr__(self, "sealed2_word_range", tuple(self.sealed2_word_range))
        self._validate()

    def _validate(self) -> None:
        if not self.families:
            raise ValueError(f"families must name at least one of {sorted(FAMILIES)}")
        for name, weight in self.families.items():
            if name not in FAMILIES:
                raise ValueError(f"unknown arithmetic family {name!r}; known: {sorted(FAMILIES)}")
            if not weight > 0:
                raise ValueError(f"family weight must be > 0, got {name}={weight} (drop the family instead)")
        for name, weight in self.ood_families.items():
            if name not in FAMILIES:
                raise ValueError(f"unknown arithmetic ood family {name!r}; known: {sorted(FAMILIES)}")
            if not weight > 0:
                raise ValueError(f"ood family weight must be > 0, got {name}={weight}")
        shared = sorted(set(self.families) & set(self.ood_families))
        if shared:
            raise ValueError(f"ood_families must be held out of families; both have {shared}")
        ranges = (("small_range", self.small_range), ("large_range", self.large_range),
                  ("sealed2_word_range", self.sealed2_word_range))
        for label, (lo, hi) in ranges:
            if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi):
                raise ValueError(f"{label} must be two integers 0 <= lo <= hi, got {(lo, hi)}")
        if self.small_range[1] < 2:
            raise ValueError(f"small_range must reach 2 (word problems use 2..max), got {self.small_range}")
        if not 1 <= self.chain_steps <= 4:
            raise ValueError(f"chain_steps must be in [1, 4] (pools are enumerated), got {self.chain_steps}")
        for name in ("train_size", "validation_size", "test_size", "sealed_size", "sealed2_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def sizes(self) -> dict[str, int]:
        """Problems per split."""
        return {"train": self.train_size, "validation": self.validation_size, "test": self.test_size}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``ArithmeticConfig(**d)`` rebuilds the same config."""
        return asdict(self)


# --------------------------------------------------------------------------- families
# Each family enumerates its pool. Questions are unique within a pool and across families
# (the templates differ), which is what makes "disjoint by question text" well defined.


def _small(cfg: ArithmeticConfig) -> range:
    return range(cfg.small_range[0], cfg.small_range[1] + 1)


def _large(cfg: ArithmeticConfig) -> range:
    return range(cfg.large_range[0], cfg.large_range[1] + 1)


def pool_add_1digit(cfg: ArithmeticConfig) -> Pool:
    """Single-digit addition: "What is 7 + 5?"."""
    return [(f"What is {a} + {b}?", a + b) for a in _small(cfg) for b in _small(cfg)]


def pool_mul_1digit(cfg: ArithmeticConfig) -> Pool:
    """Single-digit multiplication: "What is 7 * 8?"."""
    return [(f"What is {a} * {b}?", a * b) for a in _small(cfg) for b in _small(cfg)]


def pool_add_word(cfg: ArithmeticConfig) -> Pool:
    """One-step addition word problem: "Tom has 3 apples and buys 4 more. How many ..."."""
    operands = range(max(2, cfg.small_range[0]), cfg.small_range[1] + 1)
    return [
        (template.format(name=name, items=items, a=a, b=b), a + b)
        for template in _WORD_TEMPLATES
        for name in _NAMES
        for items in _ITEMS
        for a in operands
        for b in operands
    ]


def pool_add_2digit(cfg: ArithmeticConfig) -> Pool:
    """Two-digit addition: "What is 34 + 58?"."""
    return [(f"What is {a} + {b}?", a + b) for a in _large(cfg) for b in _large(cfg)]


def pool_sub_2digit(cfg: ArithmeticConfig) -> Pool:
    """Two-digit subtraction with a non-negative result: "What is 71 - 38?"."""
    return [(f"What is {a} - {b}?", a - b) for a in _large(cfg) for b in _large(cfg) if a >= b]


def pool_add_2digit_1digit(cfg: ArithmeticConfig) -> Pool:
    """Two-digit plus single-digit addition: "What is 34 + 8?"."""
    return [(f"What is {a} + {b}?", a + b) for a in _large(cfg) for b in _small(cfg)]


def pool_sub_1digit(cfg: ArithmeticConfig) -> Pool:
    """Single-digit subtraction with a non-negative result: "What is 9 - 4?" (held out: ood)."""
    return [(f"What is {a} - {b}?", a - b) for a in _small(cfg) for b in _small(cfg) if a >= b]


def pool_sub_word(cfg: ArithmeticConfig) -> Pool:
    """One-step subtraction word problem: "Tom has 9 apples and gives 4 away. ..." (held out: ood)."""
    operands = range(max(2, cfg.small_range[0]), cfg.small_range[1] + 1)
    return [
        (template.format(name=name, items=items, a=a, b=b), a - b)
        for template in _SUB_WORD_TEMPLATES
        for name in _NAMES
        for items in _ITEMS
        for a in operands
        for b in operands
        if b < a
    ]


def pool_add_chain(cfg: ArithmeticConfig) -> Pool:
    """A chain of single-digit additions: "What is 3 + 4 + 5?" (``chain_steps`` operations)."""
    terms = itertools.product(_small(cfg), repeat=cfg.chain_steps + 1)
    return [("What is " + " + ".join(map(str, t)) + "?", sum(t)) for t in terms]


FAMILIES: dict[str, Callable[[ArithmeticConfig], Pool]] = {
    "add_1digit": pool_add_1digit,
    "mul_1digit": pool_mul_1digit,
    "add_word": pool_add_word,
    "add_2digit": pool_add_2digit,
    "sub_2digit": pool_sub_2digit,
    "add_2digit_1digit": pool_add_2digit_1digit,
    "add_chain": pool_add_chain,
    "sub_1digit": pool_sub_1digit,
    "sub_word": pool_sub_word,
}
"""Problem families by name (the value stored in ``Problem.meta["family"]``)."""


# --------------------------------------------------------------------------- splits

_SPLIT_ORDER = ("test", "validation", "train")  # test is served first: it must never repeat if avoidable


def family_schedule(weights: Mapping[str, float], n: int) -> list[str]:
    """The family of each of ``n`` problems by smooth weighted round-robin.

    Every prefix of the result has each family's weighted share up to ±1, so evaluating the first
    k problems of a split keeps the mixture; ties go to the family listed first.
    """
    total = sum(weights.values())
    credit = dict.fromkeys(weights, 0.0)
    schedule = []
    for _ in range(n):
        for name, weight in weights.items():
            credit[name] += weight
        chosen = max(credit, key=credit.__getitem__)  # max keeps the first on ties
        credit[chosen] -= total
        schedule.append(chosen)
    return schedule


def allocate_blocks(pool_size: int, demands: Mapping[str, int]) -> dict[str, int]:
    """How many distinct pool items each split gets (blocks are disjoint), splits served in the
    order of ``demands`` (test, validation, train).

    Exactly the demand when the pool covers all demands; otherwise each split in turn gets its whole
    demand while the pool lasts, keeping one item for every later split that asks for any (so a
    split grown past the pool never changes the blocks of the splits served before it: growing
    train or validation leaves test, and the first validation problems, as they were).
    """
    total = sum(demands.values())
    if total <= pool_size:
        return dict(demands)
    wanted = [s for s, d in demands.items() if d > 0]
    if len(wanted) > pool_size:
        raise ValueError(f"a pool of {pool_size} question(s) cannot be split among {len(wanted)} splits")
    shares, left = dict.fromkeys(demands, 0), pool_size
    for position, split in enumerate(wanted):
        later = len(wanted) - position - 1  # one item kept for each
        shares[split] = min(demands[split], left - later)
        left -= shares[split]
    return shares


def build_splits(cfg: ArithmeticConfig) -> dict[str, list[Problem]]:
    """All three splits of ``cfg`` (see the module docstring for the construction)."""
    schedules = {s: family_schedule(cfg.families, n) for s, n in cfg.sizes.items()}
    served: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for family in cfg.families:
        pool = FAMILIES[family](cfg)
        random.Random(f"{cfg.seed}/{family}").shuffle(pool)  # str seeds are stable across runs
        demands = {s: schedules[s].count(family) for s in _SPLIT_ORDER}
        start = 0
        for split, share in allocate_blocks(len(pool), demands).items():
            block = pool[start : start + share]
            start += share
            served[split, family] = [block[i % len(block)] for i in range(demands[split])] if block else []
    return {split: _problems(split, schedules[split], served) for split in cfg.sizes}


def build_ood_split(cfg: ArithmeticConfig) -> list[Problem]:
    """The ``ood`` split: ``test_size`` problems of the held-out ``ood_families``, each family's pool
    shuffled with a seed stream of its own (``"{seed}/ood/{family}"``); [] without ood families."""
    if not cfg.ood_families:
        return []
    schedule = family_schedule(cfg.ood_families, cfg.test_size)
    served: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for family in cfg.ood_families:
        pool = FAMILIES[family](cfg)
        random.Random(f"{cfg.seed}/ood/{family}").shuffle(pool)
        demand = schedule.count(family)
        served["ood", family] = [pool[i % len(pool)] for i in range(demand)]
    return _problems("ood", schedule, served)


def sealed_weights(cfg: ArithmeticConfig, pool_sizes: Mapping[str, int] | None = None) -> dict[str, float]:
    """The sealed split's mixture: ``cfg.families`` less every family whose back half (see the
    module docstring) cannot serve its share of ``sealed_size`` distinct questions, the others at
    their relative weights (dropping one raises the others' shares, so this repeats until none is
    dropped); empty when no family can. ``pool_sizes``: each family's pool size, when known."""
    sizes = pool_sizes or {f: len(FAMILIES[f](cfg)) for f in cfg.families}
    weights = dict(cfg.families)
    while weights:
        schedule = family_schedule(weights, cfg.sealed_size)
        short = [f for f in weights if sizes[f] // 2 < schedule.count(f)]
        if not short:
            return weights
        for family in short:
            del weights[family]
    return {}


def build_sealed_split(cfg: ArithmeticConfig, others: Mapping[str, list[Problem]]) -> list[Problem]:
    """The ``sealed`` split: ``sealed_size`` distinct questions of :func:`sealed_weights`' families,
    each family's share drawn with its own seed stream (``"{sealed_seed}/sealed/{family}"``) from
    the back half of its pool in the config seed's shuffle, skipping any question of ``others``
    (the other splits); a family that runs short gives what it has (fewer problems, never a repeat)."""
    pools = {family: FAMILIES[family](cfg) for family in cfg.families}
    weights = sealed_weights(cfg, {family: len(pool) for family, pool in pools.items()})
    schedule = family_schedule(weights, cfg.sealed_size) if weights else []
    taken = {p.question for problems in others.values() for p in problems}
    served: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for family in weights:
        pool = pools[family]
        random.Random(f"{cfg.seed}/{family}").shuffle(pool)  # the order the other splits' blocks follow
        back = [item for item in pool[len(pool) - len(pool) // 2:] if item[0] not in taken]
        random.Random(f"{cfg.sealed_seed}/sealed/{family}").shuffle(back)
        served["sealed", family] = back[: schedule.count(family)]
    # a family that ran short ends the schedule early for itself: its slots go unfilled
    cursor, kept = dict.fromkeys(weights, 0), []
    for family in schedule:
        if cursor[family] < len(served["sealed", family]):
            kept.append(family)
        cursor[family] += 1
    return _problems("sealed", kept, served)


_DIGITS = re.compile(r"\d+")
_WORD_FAMILIES = frozenset({"add_word", "sub_word"})
"""Families whose operands come from ``small_range`` inside a sentence: ``sealed2`` widens their range."""


def operands(question: str) -> tuple[int, ...]:
    """The numbers a generated question holds, in order ("Tom has 3 apples and buys 4 more..." ->
    ``(3, 4)``): with the family, what a problem asks whatever its wording."""
    return tuple(map(int, _DIGITS.findall(question)))


def content_key(problem: Problem) -> tuple[str, tuple[int, ...]]:
    """A generated problem's family and operands: two problems with the same key ask the same sum."""
    return problem.meta["family"], operands(problem.question)


def _sealed2_candidates(cfg: ArithmeticConfig, family: str, used: set) -> Pool:
    """The questions of ``family`` that ``sealed2`` may hold: its pool (word problems over
    ``sealed2_word_range``) less every question whose operands ``used`` holds for the family or
    that the front half of the family's config-seed shuffle holds (where train, validation and test
    draw from, whatever their sizes), in the order of the split's own seed stream."""
    pool = FAMILIES[family](cfg)
    random.Random(f"{cfg.seed}/{family}").shuffle(pool)
    reserved = {operands(q) for q, _ in pool[: len(pool) - len(pool) // 2]}
    reserved |= {ops for fam, ops in used if fam == family}
    if family in _WORD_FAMILIES:
        pool = FAMILIES[family](replace(cfg, small_range=cfg.sealed2_word_range))
    kept = [item for item in pool if operands(item[0]) not in reserved]
    random.Random(f"{cfg.sealed2_seed}/sealed2/{family}").shuffle(kept)
    return kept


def build_sealed2_split(cfg: ArithmeticConfig, others: Mapping[str, list[Problem]]) -> list[Problem]:
    """The ``sealed2`` split: ``sealed2_size`` distinct questions that share no family and operands
    with ``others`` (every other split, the old sealed one included) nor with the front half of
    any family's pool, of the families of ``cfg.families`` that have enough such questions, at
    their relative weights (see the module docstring)."""
    used = {content_key(p) for problems in others.values() for p in problems}
    candidates = {family: _sealed2_candidates(cfg, family, used) for family in cfg.families}
    weights = dict(cfg.families)
    while weights:  # a family without enough content-disjoint questions is left out
        schedule = family_schedule(weights, cfg.sealed2_size)
        short = [f for f in weights if len(candidates[f]) < schedule.count(f)]
        if not short:
            break
        for family in short:
            del weights[family]
    if not weights:
        return []
    served = {("sealed2", family): candidates[family] for family in weights}
    return _problems("sealed2", family_schedule(weights, cfg.sealed2_size), served)


_SEALED2_BUILT: dict[str, list[Problem]] = {}
"""``sealed2`` by config (JSON): ~1 s to build (the word problems' wider pool), so once per process."""


def _problems(split: str, schedule: list[str], served: Mapping[tuple[str, str], list]) -> list[Problem]:
    cursor = dict.fromkeys(schedule, 0)
    problems = []
    for index, family in enumerate(schedule):
        question, answer = served[split, family][cursor[family]]
        cursor[family] += 1
        meta = {"family": family, "split": split}
        problems.append(Problem(f"arithmetic/{split}/{index}", question, str(answer), meta))
    return problems


# --------------------------------------------------------------------------- verifier

# A number not glued to a word or to a preceding digit/point ("x2", "3.5" inside "13.5");
# a minus sign counts only when it is not a binary minus ("8-3" yields 8 and 3, "= -3" yields -3).
_NUMBER = re.compile(r"(?<![\w.])(?:(?<![\w)])-)?\d+(?:,\d{3})*(?:\.\d+)?")
# "answer is ..." up to the end of its sentence; the answer is the sentence's last number, so that
# "The answer is 3 + 4 = 7" gives 7 while "The answer is 12. Because 7 + 5" gives 12.
_ANSWER_IS = re.compile(r"answer\s*(?:is|:|=)\s*(.*?)(?:\.(?!\d)|\n|$)", re.IGNORECASE)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_COMPLETE_ENDING = re.compile(r"(?:[.!?)\]}*$]|\d)\s*$")  # ends like a finished sentence or number
_EQUATION_RESULT = re.compile(r"=\s*-?\d")
_BARE_FIRST_LINE = re.compile(r"^\s*[*$]*\s*(-?\d[\d,]*(?:\.\d+)?)\s*[*$]*\s*\.?\s*$")


def _to_int(text: str) -> int | None:
    """``"1,000"`` -> 1000, ``"12.0"`` -> 12, ``"12.5"`` -> None (not an integer answer)."""
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    return int(value) if value == value.to_integral_value() else None


def extract_integer_answer(completion: str) -> int | None:
    """The integer a completion gives as its answer, or None.

    In order of trust: the content of the last ``\\boxed{}``; the last number of the last
    "answer is ..." / "Answer: ..." sentence that has one; a first line that is only a number
    (the reply the prompt asks for, kept even when an explanation after it is cut off
    mid-sentence by the token limit); otherwise the last number in the text, because small
    models often restate the sum ("7 + 5 = 12"), which puts the result last.
    Number words ("twelve") are not read.
    """
    boxed = extract_boxed(completion)
    if boxed is not None:
        numbers = _NUMBER.findall(boxed)
        return _to_int(numbers[-1]) if numbers else None
    for sentence in reversed(_ANSWER_IS.findall(completion)):
        numbers = _NUMBER.findall(sentence)
        if numbers:
            return _to_int(numbers[-1])
    first_line = completion.strip().split("\n", 1)[0]
    bare = _BARE_FIRST_LINE.match(first_line)
    if bare:
        return _to_int(bare.group(1))
    numbers = _NUMBER.findall(_drop_cut_off_sentence(completion))
    return _to_int(numbers[-1]) if numbers else None


def _drop_cut_off_sentence(text: str) -> str:
    """``text`` without a final sentence that stops mid-way ("... so Lily now", "She has 4 + 6 =").

    Completions are capped at a few dozen tokens, and a model that answered "6 + 2 = 8 pencils."
    and kept talking would otherwise be scored on whatever number the cut-off sentence held.
    A single sentence is kept: then there is nothing better to read.
    """
    sentences = _SENTENCE_BREAK.split(text.strip())
    last = sentences[-1]
    # "... = 11 marbles" without a period may be a finished answer the model ended (EOS) early.
    if len(sentences) > 1 and not _COMPLETE_ENDING.search(last) and not _EQUATION_RESULT.search(last):
        sentences = sentences[:-1]
    return "\n".join(sentences)


# Where a stated number is an answer: after "=", "equals", "answer is / : / =", "####" (markdown or
# "$" between allowed); and a first line that is only a number, once the line has ended. No two
# adjacent repetitions can match the same characters, so a scan stays linear in the text.
_ANSWER_CONTEXT = re.compile(
    r"(?:=|\bequals\b|answer\s*(?:is|:|=)|####)[ \t]*(?:[*$]+[ \t]*)?(-?\d+(?:,\d{3})*(?:\.\d+)?)", re.IGNORECASE
)
# After the number: a line end, a character that can neither continue the number nor the
# expression (an operator, "=", "x", a digit), or punctuation followed by a non-digit.
_NUMBER_FINISHED = re.compile(r"[ \t]*\n|[ \t]*[^\s\d.,+\-*/×÷=^(xX]|\*\*|[.,;:!?](?:\s|[^\d\s])")
_BARE_NUMBER = re.compile(r"[*$]*\s*-?\d[\d,]*(?:\.\d+)?\s*[*$]*\.?")  # a stripped line that is one number


def arithmetic_answer_complete(text: str) -> bool:
    """Whether a completion so far already states a finished answer (the "stop at the first
    answer" condition): a closed ``\\boxed{}``; a first line that is only a number, ended by a line
    break; or a number after "=", "equals", "answer is" or "####" that something other than a
    digit, a decimal point or an operator follows ("= 16 pencils", "= 16.\\n", but not "= 7 + 4"
    or "= 1" that may still become 16). Linear in the text's length."""
    if has_closed_box(text):
        return True
    stripped = text.lstrip()
    newline = stripped.find("\n")
    if newline >= 0 and _BARE_NUMBER.fullmatch(stripped[:newline].strip()):
        return True
    return any(_NUMBER_FINISHED.match(text, m.end()) for m in _ANSWER_CONTEXT.finditer(text))


def score_arithmetic(completion: str, answer: str) -> float:
    """1.0 if the completion's integer answer equals ``answer``, else 0.0; never raises."""
    try:
        predicted = extract_integer_answer(completion)
        return float(predicted is not None and predicted == int(answer))
    except Exception:  # a verifier must not crash a rollout; unparsable means wrong
        return 0.0


# --------------------------------------------------------------------------- task


@register_task("arithmetic")
class ArithmeticTask(Task):
    """Procedural arithmetic (splits: train, validation, test, ood: held-out families, sealed: the
    published evidence run's test split, and sealed2: the next one's, disjoint by content; no
    default command reads the sealed splits).

    Options are :class:`ArithmeticConfig` fields (``get_task("arithmetic", seed=0, test_size=100)``),
    or a whole ``config=``, plus ``system_prompt=`` (a preset name or literal text).
    """

    splits: ClassVar[tuple[str, ...]] = SPLITS + ("ood", "sealed", "sealed2")
    instruction: ClassVar[str] = " Answer with just the number."
    cot_instruction: ClassVar[str] = " Think step by step, then give the final number."

    def __init__(
        self, config: ArithmeticConfig | None = None, *, system_prompt: str | None = None, **overrides: Any
    ) -> None:
        known = {f.name for f in fields(ArithmeticConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            accepted = sorted(known | {"config", "system_prompt"})
            raise ValueError(f"task 'arithmetic' has no option(s) {unknown}; accepted: {accepted}")
        self.config = replace(config or ArithmeticConfig(), **overrides)
        self.system_prompt = resolve_system_prompt(system_prompt)
        self._splits: dict[str, list[Problem]] | None = None
        self._sealed: list[Problem] | None = None

    def load(self, split: str) -> list[Problem]:
        self.check_split(split)
        if split == "ood":  # built on its own: the other splits never depend on it
            return build_ood_split(self.config)
        if self._splits is None:  # built once: all splits come from one allocation
            self._splits = build_splits(self.config)
        if split == "sealed":  # built on its own (once), clear of every other split's questions
            if self._sealed is None:
                self._sealed = build_sealed_split(self.config, {**self._splits, "ood": build_ood_split(self.config)})
            return list(self._sealed)
        if split == "sealed2":  # built on its own (once), clear of every other split's family and operands
            key = json.dumps(self.config.to_dict(), sort_keys=True)
            if key not in _SEALED2_BUILT:
                others = {**self._splits, "ood": build_ood_split(self.config), "sealed": self.load("sealed")}
                if len(_SEALED2_BUILT) >= 4:  # a few configs at most: tests build several
                    _SEALED2_BUILT.clear()
                _SEALED2_BUILT[key] = build_sealed2_split(self.config, others)
            return list(_SEALED2_BUILT[key])
        return list(self._splits[split])

    def draw_order(self, problems: Sequence[Problem], seed: int) -> list[Problem]:
        """The split's own order: every prefix keeps the family mix (a subset is its first problems)."""
        return list(problems)

    def prompt(self, problem: Problem, cot: bool = False) -> list[dict[str, str]]:
        suffix = self.cot_instruction if cot else self.instruction
        return chat_messages(self.system_prompt, problem.question + suffix)

    def reward(self, problem: Problem, completion: str) -> float:
        return score_arithmetic(completion, problem.answer)

    def extract_answer(self, problem: Problem, completion: str) -> str:
        answer = extract_integer_answer(completion)
        return "" if answer is None else str(answer)

    def answer_complete(self, problem: Problem, text: str) -> bool:
        return arithmetic_answer_complete(text)
