"""The arithmetic task's sealed split: the published evidence run's test split. At least 1,000
distinct problems, disjoint by content from train, validation, test and ood at the default sizes
and at the published run's, from a seed stream of its own; the old splits stay byte-identical; and
nothing but the task names it, so no default command reads it."""

from collections import Counter
from pathlib import Path

from test_arithmetic import _DEFAULT_DIGESTS, _digest

from decoding_adapters.experiments.presets import REPRODUCE_SIZES, SIZES
from decoding_adapters.experiments.study_config import study_task_options
from decoding_adapters.tasks import SPLITS, check_disjoint, content_hashes, get_task
from decoding_adapters.tasks.arithmetic import ArithmeticTask, content_key, sealed_weights

PUBLISHED_SIZES = study_task_options(REPRODUCE_SIZES["full"])
"""The split sizes of the published ``reproduce`` run (train 1,500, validation 400)."""


def test_sealed_split_has_1000_distinct_problems_disjoint_from_every_other_split():
    for options in ({}, PUBLISHED_SIZES):
        task = get_task("arithmetic", **options)
        sealed = task.load("sealed")
        assert len(sealed) >= 1000 and len({p.question for p in sealed}) == len(sealed)
        assert sealed[0].id == "arithmetic/sealed/0" and {p.meta["split"] for p in sealed} == {"sealed"}
        hashes = check_disjoint(task)  # every split the task offers, sealed included, by content hash
        assert set(hashes) == {"train", "validation", "test", "ood", "sealed", "sealed2"}
        others = set().union(*(content_hashes(task.load(s)) for s in ("train", "validation", "test", "ood")))
        assert not others & set(hashes["sealed"])


def test_the_old_splits_are_unchanged_and_the_sealed_split_is_stable():
    task = ArithmeticTask()
    sealed = task.load("sealed")
    assert {s: _digest(task.load(s)) for s in SPLITS} == _DEFAULT_DIGESTS  # the published runs' test split
    # growing train and validation (as the published run does) leaves it as it is
    assert get_task("arithmetic", **PUBLISHED_SIZES).load("sealed") == sealed
    assert ArithmeticTask(sealed_seed=1).load("sealed") != sealed  # its own seed decides it
    assert ArithmeticTask(sealed_size=1200).load("sealed")[:1000] == sealed  # a prefix keeps its problems


def test_sealed_mixture_leaves_out_families_whose_questions_are_used_up():
    task = ArithmeticTask()
    # the single-digit families hold 81 questions each, used by train, validation and test
    assert sealed_weights(task.config) == {"add_word": 0.6, "add_2digit": 0.2}
    assert Counter(p.meta["family"] for p in task.load("sealed")) == {"add_word": 750, "add_2digit": 250}
    assert ArithmeticTask(families=["add_1digit", "mul_1digit"]).load("sealed") == []


def test_only_the_task_and_the_published_evidence_run_name_the_sealed_splits():
    package = Path(__import__("decoding_adapters").__file__).parent

    def naming(split):
        return sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                      if f'"{split}"' in path.read_text(encoding="utf-8"))

    assert naming("sealed") == ["tasks/arithmetic.py"]  # its published run is done: nothing reads it by default
    assert naming("sealed2") == ["experiments/presets.py", "tasks/arithmetic.py"]
    # the evidence run is reproduce's full study (and its uncut version); no demo size, no other command
    assert {name for name, cfg in {**SIZES, **REPRODUCE_SIZES}.items() if cfg.eval_split in ("sealed", "sealed2")} == {
        "full", "complete"}


# ---- sealed2: disjoint by content -----------------------------------------------------------------

SEALED2_DIGEST = "d05205e284bc11a2809bed79ee27063e89922a1f28fcd2d38f14401a2dfe2f0f"
"""The default ``sealed2`` split (ids, questions, answers, meta): it must never change."""


def test_sealed2_shares_no_family_and_operands_with_any_other_split():
    """At the default sizes and the published run's: no problem of sealed2 asks a sum (family and
    operands) that train, validation, test, ood or the old sealed split asks, in any wording."""
    for options in ({}, PUBLISHED_SIZES):
        task = get_task("arithmetic", **options)
        sealed2 = task.load("sealed2")
        assert len(sealed2) >= 1000 and len({p.question for p in sealed2}) == len(sealed2)
        assert sealed2[0].id == "arithmetic/sealed2/0" and {p.meta["split"] for p in sealed2} == {"sealed2"}
        others = {content_key(p) for s in ("train", "validation", "test", "ood", "sealed") for p in task.load(s)}
        assert not {content_key(p) for p in sealed2} & others


def test_sealed2_is_its_own_and_leaves_every_other_split_as_it_was():
    task = ArithmeticTask()
    sealed, sealed2 = task.load("sealed"), task.load("sealed2")
    assert {s: _digest(task.load(s)) for s in SPLITS} == _DEFAULT_DIGESTS
    assert ArithmeticTask().load("sealed") == sealed  # building sealed2 first changes nothing
    assert get_task("arithmetic", **PUBLISHED_SIZES).load("sealed2") == sealed2  # stable as train grows
    assert ArithmeticTask(sealed2_seed=1).load("sealed2") != sealed2
    assert _digest(sealed2) == SEALED2_DIGEST  # the next evidence run re-derives from exactly these
    assert ArithmeticTask().config.sealed2_seed not in (ArithmeticTask().config.sealed_seed, 0)


def test_sealed2_mixture_keeps_the_families_that_have_unused_operands():
    """The single-digit families' operand pairs are all used by the other splits; word problems'
    come from the wider range (one operand from 10), so word : two-digit stays 3 : 1."""
    sealed2 = ArithmeticTask().load("sealed2")
    assert Counter(p.meta["family"] for p in sealed2) == {"add_word": 750, "add_2digit": 250}
    words = [content_key(p)[1] for p in sealed2 if p.meta["family"] == "add_word"]
    assert all(max(ops) >= 10 and max(ops) <= 19 and min(ops) >= 2 for ops in words)
