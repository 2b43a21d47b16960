"""The embedded arithmetic task: config, families, disjoint splits, prompts and the verifier."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from decoding_adapters.tasks import get_task
from decoding_adapters.tasks.arithmetic import (
    FAMILIES,
    ArithmeticConfig,
    ArithmeticTask,
    allocate_blocks,
    build_splits,
    extract_integer_answer,
    family_schedule,
    score_arithmetic,
)

SPLITS = ("train", "validation", "test")


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(families={"nope": 1.0}), "unknown arithmetic family"),
        (dict(families={"add_1digit": 0.0}), "weight must be > 0"),
        (dict(families={}), "at least one"),
        (dict(families="add_1digit"), "mapping"),
        (dict(small_range=(5, 3)), "small_range"),
        (dict(large_range=(-1, 9)), "large_range"),
        (dict(chain_steps=0), "chain_steps"),
        (dict(test_size=-1), "test_size"),
    ],
)
def test_config_rejects_bad_values(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        ArithmeticConfig(**kwargs)


def test_config_round_trips_through_json_and_accepts_a_family_list() -> None:
    cfg = ArithmeticConfig(families=["add_1digit", "add_word"], small_range=[2, 8], seed=3)
    assert cfg.families == {"add_1digit": 1.0, "add_word": 1.0} and cfg.small_range == (2, 8)
    assert ArithmeticConfig(**json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert ArithmeticConfig().sizes == {"train": 500, "validation": 100, "test": 200}


# --------------------------------------------------------------------------- families


def _evaluate(question: str) -> int:
    """Recompute a "What is a op b ...?" question independently of the generator."""
    expression = re.fullmatch(r"What is ([\d +*-]+)\?", question).group(1)
    assert re.fullmatch(r"[\d +*-]+", expression)
    return eval(expression)  # safe: only digits, spaces and + - * (checked above)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_pool_is_unique_and_correct(family: str) -> None:
    pool = FAMILIES[family](ArithmeticConfig(chain_steps=3))
    questions = [q for q, _ in pool]
    assert len(set(questions)) == len(questions) > 0
    for question, answer in pool[:: max(1, len(pool) // 200)]:
        if family == "add_word":
            a, b = map(int, re.findall(r"\d+", question))
            assert answer == a + b and question.endswith("have now?")
        elif family == "sub_word":
            a, b = map(int, re.findall(r"\d+", question))
            assert answer == a - b > 0 and question.endswith("have left?")
        else:
            assert answer == _evaluate(question)
    if family == "sub_2digit":
        assert min(a for _, a in pool) >= 0
    if family == "add_chain":
        assert all(q.count("+") == 3 for q in questions)


def test_families_do_not_share_questions() -> None:
    cfg = ArithmeticConfig()
    owners = Counter(q for pool in FAMILIES.values() for q, _ in set(pool(cfg)))
    assert max(owners.values()) == 1


# --------------------------------------------------------------------------- splits


def test_family_schedule_keeps_the_mixture_in_every_prefix() -> None:
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    schedule = family_schedule(weights, 300)
    for n in range(1, 301):
        counts = Counter(schedule[:n])
        assert all(abs(counts[f] - w * n) <= 1 for f, w in weights.items())


def test_allocate_blocks_is_exact_when_the_pool_suffices_and_serves_splits_in_order_otherwise() -> None:
    assert allocate_blocks(100, {"test": 20, "validation": 10, "train": 50}) == {
        "test": 20, "validation": 10, "train": 50}
    shares = allocate_blocks(10, {"test": 20, "validation": 10, "train": 70})
    assert sum(shares.values()) == 10 and shares == {"test": 8, "validation": 1, "train": 1}
    assert allocate_blocks(81, {"test": 20, "validation": 40, "train": 150}) == {
        "test": 20, "validation": 40, "train": 21}
    assert allocate_blocks(3, {"test": 1, "validation": 1, "train": 100}) == {"test": 1, "validation": 1, "train": 1}
    assert allocate_blocks(5, {"test": 0, "validation": 0, "train": 9}) == {"test": 0, "validation": 0, "train": 5}


def test_growing_train_and_validation_leaves_test_and_the_first_validation_problems() -> None:
    small = build_splits(ArithmeticConfig())
    large = build_splits(ArithmeticConfig(train_size=1500, validation_size=400))
    assert large["test"] == small["test"] and large["validation"][:100] == small["validation"]
    texts = {s: {p.question for p in large[s]} for s in large}
    assert not (texts["test"] & texts["validation"]) and not (texts["train"] & (texts["test"] | texts["validation"]))
    assert len(texts["validation"]) == 400  # no repeats in validation; train repeats the small families' rest
    with pytest.raises(ValueError, match="cannot be split"):
        allocate_blocks(2, {"test": 1, "validation": 1, "train": 1})


@pytest.mark.parametrize(
    "cfg",
    [
        ArithmeticConfig(),
        ArithmeticConfig(families=list(FAMILIES), seed=5),
        # Tiny pool (9 questions) far smaller than the splits: repeats within, never across.
        ArithmeticConfig(families=["add_1digit"], small_range=(1, 3), train_size=40, validation_size=10, test_size=20),
    ],
)
def test_splits_are_disjoint_by_question_text_and_sized(cfg: ArithmeticConfig) -> None:
    splits = build_splits(cfg)
    questions = {s: {p.question for p in splits[s]} for s in SPLITS}
    assert not questions["test"] & questions["train"]
    assert not questions["test"] & questions["validation"]
    assert not questions["validation"] & questions["train"]
    for split in SPLITS:
        problems = splits[split]
        assert len(problems) == cfg.sizes[split]
        assert len({p.id for p in problems}) == len(problems)
        assert all(p.meta["family"] in cfg.families and p.meta["split"] == split for p in problems)


def test_default_test_and_validation_splits_do_not_repeat_questions() -> None:
    splits = build_splits(ArithmeticConfig())
    for split in ("test", "validation"):
        questions = [p.question for p in splits[split]]
        assert len(set(questions)) == len(questions), split


def test_splits_are_deterministic_and_seeded() -> None:
    first = ArithmeticTask(seed=1).load("test")
    assert first == ArithmeticTask(seed=1).load("test")
    assert [p.question for p in first] != [p.question for p in ArithmeticTask(seed=2).load("test")]


def test_default_test_split_follows_the_default_mixture() -> None:
    cfg = ArithmeticConfig()
    counts = Counter(p.meta["family"] for p in ArithmeticTask(cfg).load("test"))
    total = sum(cfg.families.values())
    for family, weight in cfg.families.items():
        assert abs(counts[family] - cfg.test_size * weight / total) <= 1


def test_get_task_builds_arithmetic_with_overrides() -> None:
    task = get_task("arithmetic", seed=0, test_size=10, families={"add_word": 1.0})
    assert isinstance(task, ArithmeticTask) and task.config.seed == 0
    problems = task.load("test")
    assert len(problems) == 10 and {p.meta["family"] for p in problems} == {"add_word"}
    assert problems[0].id == "arithmetic/test/0"


# --------------------------------------------------------------------------- prompt and reward


def test_prompt_suffixes() -> None:
    task = ArithmeticTask(test_size=1)
    problem = task.load("test")[0]
    assert task.prompt(problem) == [{"role": "user", "content": problem.question + " Answer with just the number."}]
    cot = task.prompt(problem, cot=True)[0]["content"]
    assert cot == problem.question + " Think step by step, then give the final number."


@pytest.mark.parametrize(
    "completion,expected",
    [
        ("12", 12),
        ("12.", 12),
        ("The answer is 12.", 12),
        ("7 + 5 = 12", 12),
        ("12\n\nExplanation: 7+5 is 12", 12),
        ("12\n\nExplanation: to add 7 and", 12),  # cut off by the token limit: the bare first line wins
        ("The sum of 7 and 5 is 12.", 12),
        ("Tom has 3 + 4 = 7 apples now.", 7),
        ("**Answer:** 42", 42),
        ("Maria has 3 books and 4 more.\n\nThe answer is 3 + 4 = 7", 7),
        ("The answer is 12. Because 7 + 5", 12),
        ("The answer is 12.5 apples", None),
        ("Step 1: 3 + 4 = 7\nStep 2: 7 + 5 = 12\nFinal answer: 12", 12),
        ("So the result is \\boxed{12}.", 12),
        # A final sentence cut off by the token limit is not read ...
        ("Lily has 6 + 2 = 8 pencils.\nA friend gave Lily 2 more, so Lily now", 8),
        ("Leo has 3 + 5 = 8 balloons.\nHe has now 3 + 5 = ", 8),
        # ... unless it holds a finished equation (the model may simply have stopped without a period)
        ("Anna has 2 cards and bought 3 more. So, Anna has 2 + 3 = 5 cards", 5),
        ("-3", -3),
        ("71 - 74 = -3", -3),
        ("8-3=5", 5),
        ("1,000", 1000),
        ("12.0", 12),
        ("12.5", None),
        ("twelve", None),
        ("", None),
    ],
)
def test_extract_integer_answer(completion: str, expected: int | None) -> None:
    assert extract_integer_answer(completion) == expected


def test_reward_is_zero_or_one_and_never_raises() -> None:
    assert score_arithmetic("7 + 5 = 12", "12") == 1.0
    assert score_arithmetic("7 + 5 = 13", "12") == 0.0
    assert score_arithmetic("twelve", "12") == 0.0
    assert score_arithmetic(None, "12") == 0.0  # type: ignore[arg-type]
    assert score_arithmetic("12", "not a number") == 0.0
    task = ArithmeticTask(test_size=5)
    for problem in task.load("test"):
        assert task.reward(problem, f"The answer is {problem.answer}.") == 1.0
        assert task.reward(problem, str(int(problem.answer) + 1)) == 0.0


# --------------------------------------------------------------------------- held-out (ood) split

# sha256 of the default train/validation/test problems (id, question, answer, meta), computed
# before the ood split and its families were added: the demo's and the tests' numbers depend on
# these problems, so adding families or splits must leave them byte-identical.
_DEFAULT_DIGESTS = {
    "train": "a83d3e505af6c6ce433d728e39062e59cd556b20899e82fa82f6fbc0904a25b0",
    "validation": "23f8a848b9002bd963a17da49fcb11c72a4eede760da491e9aa1fde70568e7c7",
    "test": "88a05f8805fd5004f39cf653e9a3c7be5ffef82e03a27aa2e838ecca90502625",
}


def _digest(problems) -> str:
    import hashlib

    blob = json.dumps([[p.id, p.question, p.answer, p.meta] for p in problems], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def test_default_splits_are_byte_identical_to_before_the_ood_split() -> None:
    task = ArithmeticTask()
    assert {s: _digest(task.load(s)) for s in SPLITS} == _DEFAULT_DIGESTS
    task.load("ood")
    custom = ArithmeticTask(seed=3, families=["add_1digit", "sub_2digit", "add_chain"], test_size=50,
                            ood_families=["sub_word"])
    # add_1digit's 81 questions cannot serve this config's 217: test takes its 17 first (it used to get
    # 6 of them, repeated), then validation, then train
    assert _digest(custom.load("test")) == "132e7d4671755c0171d537c0422c61b28841bd90ddc610da6832fb84e224bda5"
    assert len({p.question for p in custom.load("test")}) == 50


def test_ood_split_uses_only_held_out_families_and_is_disjoint() -> None:
    task = ArithmeticTask()
    ood = task.load("ood")
    assert len(ood) == 200 and ood[0].id == "arithmetic/ood/0" and {p.meta["split"] for p in ood} == {"ood"}
    assert Counter(p.meta["family"] for p in ood) == {"sub_1digit": 40, "sub_word": 120, "add_chain": 40}
    assert len({p.question for p in ood}) == 200  # no repeats at the default size
    seen = {p.question for s in SPLITS for p in task.load(s)}
    assert not seen & {p.question for p in ood}
    assert not {p.meta["family"] for s in SPLITS for p in task.load(s)} & set(task.config.ood_families)
    assert task.load("ood") == ood and ArithmeticTask(seed=1).load("ood") != ood
    for p in ood:
        if p.meta["family"] != "sub_word":
            assert int(p.answer) == _evaluate(p.question)
    assert ArithmeticTask(ood_families={}).load("ood") == []


def test_ood_families_must_be_held_out_and_known() -> None:
    with pytest.raises(ValueError, match="held out"):
        ArithmeticConfig(families=["add_1digit", "add_chain"], ood_families=["add_chain"])
    # By default the held-out set drops whatever the training mixture uses.
    assert ArithmeticConfig(families=["add_1digit", "add_chain"]).ood_families == {"sub_1digit": 0.2, "sub_word": 0.6}
    with pytest.raises(ValueError, match="unknown arithmetic ood family"):
        ArithmeticConfig(ood_families=["nope"])
    cfg = ArithmeticConfig(ood_families=["sub_2digit"])
    assert ArithmeticConfig(**json.loads(json.dumps(cfg.to_dict()))) == cfg
