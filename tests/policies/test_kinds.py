"""Adapter kinds are objects: the registry finds each by name, and no module outside the kind
modules compares an adapter or method kind with a string."""

import ast
from pathlib import Path

import pytest

from decoding_adapters.evaluation.methods import method_kind
from decoding_adapters.policies.kinds import AdapterKind, adapter_kind, kind_names

SRC = Path(__file__).resolve().parents[2] / "src" / "decoding_adapters"
KIND_NAMES = {"sequence", "token", "draft", "attempt", "rule", "greedy", "static", "mixed", "custom"}
REGISTRY_MODULES = {"kinds.py", "kind_sequence.py", "kind_token.py", "kind_draft.py", "kind_attempt.py", "kind_rule.py"}


def test_registry_lists_the_kinds_in_order():
    assert kind_names() == ("sequence", "token", "draft", "attempt", "rule")
    for name in kind_names():
        kind = adapter_kind(name)
        assert isinstance(kind, AdapterKind) and kind.name == name
        assert kind.level in ("sequence", "token") and kind.default_policy_mode in ("sample", "argmax")
    with pytest.raises(ValueError, match="adapter kind must be one of"):
        adapter_kind("nonsense")


def test_method_kinds_wrap_adapter_kinds():
    assert method_kind("draft").adapter is adapter_kind("draft")
    assert method_kind("greedy").static and method_kind("greedy").greedy and method_kind("greedy").adapter is None
    with pytest.raises(ValueError, match="unknown method kind"):
        method_kind("nonsense")


def _kind_string_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing a kind with a kind name (``==``, ``!=``, ``in (...)``): the kind read as a name
    or attribute ending in ``kind`` (``m.kind``), an item (``info["kind"]``) or a ``.get("kind")``; the
    names written out, or a module-level tuple of them (``STATIC = ("greedy", "static")``)."""
    def is_kind(node) -> bool:
        if isinstance(node, ast.Subscript):
            key = node.slice
            return isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.endswith("kind")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            first = node.args[0] if node.args else None
            return isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.endswith("kind")
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        return name.endswith("kind")

    def literal(node) -> set:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        return set()

    constants = {}  # module-level NAME = ("greedy", ...)
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            constants[node.targets[0].id] = literal(node.value)

    def names(node) -> set:
        if isinstance(node, ast.Name):
            return constants.get(node.id, set())
        return literal(node)

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_kind(s) for s in sides) and any(names(s) & KIND_NAMES for s in sides):
                out.append(node.lineno)
    return out


def test_no_kind_compared_with_a_string_outside_the_registry():
    found = {}
    for path in SRC.rglob("*.py"):
        if path.parent.name == "policies" and path.name in REGISTRY_MODULES:
            continue
        lines = _kind_string_comparisons(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[str(path.relative_to(SRC))] = lines
    assert not found, f"ask the kind object (policies.kinds / evaluation.methods.method_kind) instead: {found}"


def test_the_scan_can_fail():
    assert _kind_string_comparisons(ast.parse('if config.kind == "draft":\n    pass\n')) == [1]
    assert _kind_string_comparisons(ast.parse('x = m.kind in ("sequence", "token")\n')) == [1]
    # the forms the report once used: an item, a .get, a module-level tuple of names
    assert _kind_string_comparisons(ast.parse('x = info[n]["kind"] in ("sequence", "token")\n')) == [1]
    assert _kind_string_comparisons(ast.parse('x = method.get("kind") == "sequence"\n')) == [1]
    assert _kind_string_comparisons(ast.parse('STATIC = ("greedy", "static")\nx = i["kind"] in STATIC\n')) == [2]
    assert _kind_string_comparisons(ast.parse('x = i["role"] == "greedy"\n')) == []
