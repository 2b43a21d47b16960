"""Each adapter kind decodes through one object: its ``Decoding``, which the evaluation's plans and the
serving decoders each map to a handler once. Callers do not branch on kind flags."""

import ast
from pathlib import Path

import pytest

from decoding_adapters.evaluation import plans
from decoding_adapters.evaluation.methods import Method, greedy_method, method_kind, token_mixed_method
from decoding_adapters.policies.kinds import (
    DECODINGS,
    DRAFT_THEN_REDECODE,
    ONE_PER_PROMPT,
    PER_TOKEN,
    SEQUENTIAL_ATTEMPTS,
    adapter_kind,
    kind_names,
)
from decoding_adapters.serving import decoders

SRC = Path(__file__).resolve().parents[1] / "src" / "decoding_adapters"
FLAGS = {"per_token", "keeps_draft", "attempts", "chooses_per_prompt", "decodes_per_token", "decodes_own_rows"}
"""What callers once branched on: a kind's flags and the method properties derived from them."""
MOST_FLAG_CONDITIONALS = 3
"""Conditionals on those flags allowed outside ``policies/`` (capability checks of one caller each)."""


def test_every_kind_decodes_one_known_way_and_every_way_has_a_plan_and_a_decoder():
    ways = {name: adapter_kind(name).decoding for name in kind_names()}
    assert ways == {"sequence": ONE_PER_PROMPT, "token": PER_TOKEN, "draft": DRAFT_THEN_REDECODE,
                    "attempt": SEQUENTIAL_ATTEMPTS, "rule": SEQUENTIAL_ATTEMPTS}
    for way in DECODINGS:
        assert isinstance(decoders._DECODERS[way], decoders.Decoder)
    # the pass@k runner scores every way but sequential attempts, which Method refuses
    assert set(DECODINGS) - set(plans._PLANS) == {SEQUENTIAL_ATTEMPTS}
    for name in kind_names():
        assert method_kind(name).decoding is adapter_kind(name).decoding
        assert decoders.decoder_for(adapter_kind(name)) is decoders._DECODERS[adapter_kind(name).decoding]


def test_a_method_finds_its_plan_by_how_it_decodes():
    assert isinstance(plans.plan_for(greedy_method()), plans.FixedPlan)
    assert isinstance(plans.plan_for(token_mixed_method([*greedy_method().actions])), plans.UniformChooserPlan)
    with pytest.raises(ValueError, match="decodes sequential attempts"):
        Method("A", "attempt", greedy_method().actions, policy=object())


def test_the_kinds_flags_follow_their_decoding():
    for name in kind_names():
        kind = adapter_kind(name)
        assert kind.per_token == (kind.decoding is PER_TOKEN)
        assert kind.keeps_draft == (kind.decoding is DRAFT_THEN_REDECODE)
        assert kind.attempts == (kind.decoding is SEQUENTIAL_ATTEMPTS)
        assert kind.outputs(3) == len(kind.output_names(["a", "b", "c"]))
    assert adapter_kind("draft").report_group == "draft" and adapter_kind("token").report_group == "token"


def _flag_conditionals(tree: ast.AST) -> list[int]:
    """Lines of conditionals (``if``, ``while``, a ternary, a comprehension's ``if``, an ``assert``)
    that read a kind flag of another object (``kind.per_token``, ``m.keeps_draft``; an object's own
    options, ``self.per_token``, are not a kind's)."""
    def reads_flag(node) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr in FLAGS
                   and not (isinstance(n.value, ast.Name) and n.value.id == "self") for n in ast.walk(node))

    tests = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests += node.ifs
    return sorted({t.lineno for t in tests if reads_flag(t)})


def test_few_conditionals_on_kind_flags_outside_the_policies():
    found = {}
    for path in SRC.rglob("*.py"):
        if path.parent.name != "policies":
            lines = _flag_conditionals(ast.parse(path.read_text(encoding="utf-8")))
            if lines:
                found[str(path.relative_to(SRC))] = lines
    assert sum(map(len, found.values())) <= MOST_FLAG_CONDITIONALS, f"call the kind's plan or decoder instead: {found}"


def test_the_flag_scan_can_fail():
    assert _flag_conditionals(ast.parse("if kind.keeps_draft:\n    pass\n")) == [1]
    assert _flag_conditionals(ast.parse("x = [m for m in ms if m.decodes_per_token]\n")) == [1]
    assert _flag_conditionals(ast.parse("x = a if g.adapter_kind.attempts else b\n")) == [1]
    assert _flag_conditionals(ast.parse("if self.per_token:\n    pass\n")) == []
