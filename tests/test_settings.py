"""Each setting has one home in ``src/``: one definition with one default, which every other place
takes (a reference to it, or no default of its own: ``None`` or a required value from its caller).

The scan reads the source (AST), so it sees every dataclass field, function parameter, module
constant and ``mapping.get(name, default)`` fallback, whether or not the code runs in a test. The
listing (``setting_defaults``) says, per setting, where a default is given and how: ``home`` (the
one definition), ``reference`` (the home's name), ``none`` (no value of its own) or ``literal`` (a
value of its own: a second default, refused unless listed below with the reason).
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "decoding_adapters"


@dataclass(frozen=True)
class Setting:
    names: frozenset[str]
    """Field and parameter names (and ``.get`` keys) that carry this setting."""
    home: tuple[str, str]
    """(module path under src/decoding_adapters, the defining name: a constant or Class.field)."""
    constant_suffixes: tuple[str, ...] = ()
    """Module constants whose name ends so define a value of this setting (``MAX_``/``MIN_`` bounds
    excepted)."""


SETTINGS = {
    "token budget": Setting(frozenset({"token_budget", "token_budgets", "max_new_tokens", "max_tokens"}),
                            ("decoding/actions.py", "DEFAULT_TOKEN_BUDGET"), ("TOKEN_BUDGET", "MAX_NEW_TOKENS")),
    # the sampling settings of an action: DecodingAction's fields, as vLLM keeps them in SamplingParams
    "temperature": Setting(frozenset({"temperature"}), ("decoding/actions.py", "DecodingAction.temperature"),
                           ("TEMPERATURE",)),
    "top_k": Setting(frozenset({"top_k"}), ("decoding/actions.py", "DecodingAction.top_k"), ("TOP_K",)),
    "top_p": Setting(frozenset({"top_p"}), ("decoding/actions.py", "DecodingAction.top_p"), ("TOP_P",)),
    "min_p": Setting(frozenset({"min_p"}), ("decoding/actions.py", "DecodingAction.min_p"), ("MIN_P",)),
    # the policy's own softmax temperature (``temperature`` of a *PolicyConfig), not an action's
    "policy temperature": Setting(frozenset({"policy_temperature"}),
                                  ("policies/networks.py", "DEFAULT_POLICY_TEMPERATURE"), ("POLICY_TEMPERATURE",)),
    "device": Setting(frozenset({"device"}), ("lm/models.py", "DEFAULT_DEVICE"), ("DEVICE",)),
    "dtype": Setting(frozenset({"dtype", "lm_dtype"}), ("lm/models.py", "DEFAULT_DTYPE"), ("DTYPE",)),
    # the protocol's fields (``decoding.protocol.Protocol``): the budget above and the stop at the first answer
    "stop at the first answer": Setting(frozenset({"stop_at_answer"}), ("decoding/protocol.py", "STOP_AT_ANSWER"),
                                        ("STOP_AT_ANSWER",)),
}

COMMAND_VALUES = {
    ("token budget", "cli/common.py", "COMMAND_TOKEN_BUDGET"):
        "the training, evaluation and selection commands' own budget (32), passed explicitly to the "
        "library: a quick run on the 2-core setup, kept as the commands had it",
}
"""Values that are not a component's default but a command's, passed down explicitly."""

STORED_FILE_VALUES = {
    ("stop at the first answer", "decoding/protocol.py", "STOP_OF_UNMARKED_FILES"):
        "what a stored table or adapter.json without the key was decoded with (files from before the stop "
        "decoded to the budget): how an old file is read, not a default for new work",
}
"""Values that say what a stored file without the key means, read by name where such files are loaded."""

NOT_THE_SETTING = {
    ("decoding/actions.py", "ActionSet.__init__", "device"): "where the action table's [K] tensors are built",
    ("decoding/actions.py", "counter_uniform", "dtype"): "the precision of the counter-based draws",
    ("lm/kv_cache.py", "RowKVCache.__init__", "dtype"): "the cache's tensors (the LM passes its own)",
    ("lm/kv_cache.py", "RowKVCache.__init__", "device"): "the cache's tensors (the LM passes its own)",
}
"""Parameters that share a setting's name but are a tensor's placement or precision, not the setting."""


@dataclass(frozen=True)
class Default:
    setting: str
    path: str
    where: str  # Class.field, function(param), CONSTANT or function: .get("name")
    kind: str  # home | reference | none | literal
    value: str

    def __str__(self) -> str:
        return f"{self.setting}: {self.path}: {self.where} = {self.value} ({self.kind})"


def _setting_of_name(name: str, owner: str) -> str | None:
    if name == "temperature" and owner.endswith("PolicyConfig"):
        return "policy temperature"
    for setting, spec in SETTINGS.items():
        if name in spec.names:
            return setting
    return None


def _setting_of_constant(name: str) -> str | None:
    best = None
    for setting, spec in SETTINGS.items():
        for suffix in spec.constant_suffixes:
            prefix = name[: -len(suffix)]
            if name.endswith(suffix) and (prefix == "" or prefix.endswith("_")) and \
                    not prefix.endswith(("MAX_", "MIN_")) and (best is None or len(suffix) > len(best[1])):
                best = (setting, suffix)
    return None if best is None else best[0]


def _field_default(value: ast.expr) -> ast.expr | None:
    """The default of ``field(default=X)``; None for ``field(default_factory=...)`` or no default."""
    if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) == "field":
        for kw in value.keywords:
            if kw.arg == "default":
                return kw.value
        return None
    return value


def _kind(expr: ast.expr, setting: str, named: dict[str, str]) -> str:
    if isinstance(expr, ast.Constant) and expr.value is None:
        return "none"
    last = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None
    if last is not None and named.get(last) == setting:
        return "reference"
    return "literal"


def setting_defaults(root: Path = SRC) -> list[Default]:
    """Every default given to a setting under ``root``, in file order."""
    trees = {p.relative_to(root).as_posix(): ast.parse(p.read_text(), str(p)) for p in sorted(root.rglob("*.py"))}
    # the names a default may reference: the homes' constants and the listed command values
    named = {spec.home[1]: s for s, spec in SETTINGS.items() if "." not in spec.home[1]}
    named.update({name: s for s, _, name in (*COMMAND_VALUES, *STORED_FILE_VALUES)})
    found: list[Default] = []
    for path, tree in trees.items():
        for node in tree.body:  # module constants
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) and node.value is not None else []
            for target in targets:
                if isinstance(target, ast.Name) and (setting := _setting_of_constant(target.id)):
                    home = SETTINGS[setting].home == (path, target.id)
                    kind = "home" if home else _kind(node.value, setting, named)
                    found.append(Default(setting, path, target.id, kind, ast.unparse(node.value)))

        def visit(node: ast.AST, owner: str, path: str = path) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    for stmt in child.body:
                        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                            setting = _setting_of_name(stmt.target.id, child.name)
                            value = _field_default(stmt.value)
                            if setting and value is not None:
                                where = f"{child.name}.{stmt.target.id}"
                                home = SETTINGS[setting].home == (path, where)
                                kind = "home" if home else _kind(value, setting, named)
                                found.append(Default(setting, path, where, kind, ast.unparse(value)))
                    visit(child, child.name)
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{owner}.{child.name}" if owner else child.name
                    a = child.args
                    positional = a.posonlyargs + a.args
                    pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
                    pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
                    for arg, value in pairs:
                        setting = _setting_of_name(arg.arg, "")
                        if setting and (path, name, arg.arg) not in NOT_THE_SETTING:
                            found.append(Default(setting, path, f"{name}({arg.arg})", _kind(value, setting, named),
                                                 ast.unparse(value)))
                    visit(child, name)
                else:
                    if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and \
                            child.func.attr == "get" and len(child.args) == 2 and \
                            isinstance(child.args[0], ast.Constant) and isinstance(child.args[0].value, str):
                        setting = _setting_of_name(child.args[0].value, "")
                        if setting:
                            found.append(Default(setting, path, f"{owner or '<module>'}: .get({child.args[0].value!r})",
                                                 _kind(child.args[1], setting, named), ast.unparse(child.args[1])))
                    visit(child, owner)

        visit(tree, "")
    return found


def second_defaults(root: Path = SRC) -> list[str]:
    """Every literal default that is not its setting's home nor a listed command value, and every home
    that is missing or not unique."""
    defaults = setting_defaults(root)
    problems = [str(d) for d in defaults if d.kind == "literal" and (d.setting, d.path, d.where) not in COMMAND_VALUES]
    for setting, spec in SETTINGS.items():
        homes = [d for d in defaults if d.setting == setting and d.kind == "home"]
        if len(homes) != 1:
            problems.append(f"{setting}: {len(homes)} definitions at its home {spec.home}")
    return problems


def test_each_setting_has_exactly_one_default():
    defaults = setting_defaults()
    listing = "\n".join(str(d) for d in defaults)
    assert second_defaults() == [], f"second defaults (take the home's instead):\n{listing}"
    homes = {d.setting: (d.path, d.where, d.value) for d in defaults if d.kind == "home"}
    assert homes == {
        "token budget": ("decoding/actions.py", "DEFAULT_TOKEN_BUDGET", "128"),
        "temperature": ("decoding/actions.py", "DecodingAction.temperature", "1.0"),
        "top_k": ("decoding/actions.py", "DecodingAction.top_k", "None"),
        "top_p": ("decoding/actions.py", "DecodingAction.top_p", "None"),
        "min_p": ("decoding/actions.py", "DecodingAction.min_p", "None"),
        "policy temperature": ("policies/networks.py", "DEFAULT_POLICY_TEMPERATURE", "1.0"),
        "device": ("lm/models.py", "DEFAULT_DEVICE", "'auto'"),
        "dtype": ("lm/models.py", "DEFAULT_DTYPE", "'auto'"),
        "stop at the first answer": ("decoding/protocol.py", "STOP_AT_ANSWER", "True"),
    }
    # the scan sees the places that take the token budget from its home (it is not vacuous)
    takers = {(d.path, d.where) for d in defaults if d.setting == "token budget" and d.kind == "reference"}
    assert {("decoding/loop.py", "decode(token_budget)"), ("evaluation/methods.py", "EvalConfig.token_budget"),
            ("experiments/study_config.py", "StudyConfig.token_budget"),
            ("policies/networks.py", "TokenPolicyConfig.token_budget")} <= takers
    stops = {(d.path, d.where) for d in defaults if d.setting == "stop at the first answer" and d.kind == "reference"}
    assert {("decoding/protocol.py", "DecodingProtocol.stop_at_answer"),
            ("evaluation/methods.py", "EvalConfig.stop_at_answer"),
            ("experiments/study_config.py", "StudyConfig.stop_at_answer"),
            ("policies/adapter_files.py", "AdapterConfig.stop_at_answer")} <= stops


def test_components_take_the_homes_default():
    from decoding_adapters.decoding.actions import DEFAULT_TOKEN_BUDGET
    from decoding_adapters.evaluation.methods import EvalConfig
    from decoding_adapters.experiments.study_config import StudyConfig
    from decoding_adapters.lm.models import DEFAULT_DEVICE, DEFAULT_DTYPE, ModelSpec
    from decoding_adapters.policies.draft import DraftContextConfig
    from decoding_adapters.policies.networks import TokenPolicyConfig

    study = StudyConfig()
    assert {EvalConfig().token_budget, TokenPolicyConfig(hidden_size=4, num_actions=2).token_budget,
            DraftContextConfig().token_budget, study.token_budget, study.sequence.token_budget,
            study.token.token_budget, study.eval.token_budget} == {DEFAULT_TOKEN_BUDGET}
    assert (ModelSpec().device, ModelSpec().dtype) == (DEFAULT_DEVICE, DEFAULT_DTYPE)


PLANTED = '''
from dataclasses import dataclass, field


@dataclass
class Planted:
    token_budget: int = 256
    top_p: float = field(default=0.9)


def planted(options: dict, device: str = "cuda", *, temperature: float = 0.7):
    return options.get("min_p", 0.05)


PLANTED_MAX_NEW_TOKENS = 64
'''


def test_a_planted_second_default_is_caught(tmp_path):
    root = tmp_path / "decoding_adapters"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__"))
    assert second_defaults(root) == []
    (root / "evaluation" / "planted.py").write_text(PLANTED)
    text = "\n".join(second_defaults(root))
    for planted in ("Planted.token_budget = 256", "Planted.top_p = 0.9", "planted(device) = 'cuda'",
                    "planted(temperature) = 0.7", "planted: .get('min_p') = 0.05", "PLANTED_MAX_NEW_TOKENS = 64"):
        assert f"evaluation/planted.py: {planted} (literal)" in text, text
    # a second home: the same name defined again where the home is
    (root / "evaluation" / "planted.py").unlink()
    actions = root / "decoding" / "actions.py"
    actions.write_text(actions.read_text().replace("DEFAULT_TOKEN_BUDGET = 128", "DEFAULT_TOKEN_BUDGET = 96"))
    assert second_defaults(root) == []  # still one definition: its value is the home's to choose
    actions.write_text(actions.read_text().replace("DEFAULT_TOKEN_BUDGET = 96", "TOKEN_BUDGET = 96"))
    assert any("0 definitions at its home" in p for p in second_defaults(root))


@pytest.mark.parametrize("name, owner, setting", [("temperature", "TokenPolicyConfig", "policy temperature"),
                                                  ("temperature", "DecodingAction", "temperature"),
                                                  ("max_tokens", "", "token budget"), ("lm_dtype", "", "dtype")])
def test_names_map_to_their_setting(name, owner, setting):
    assert _setting_of_name(name, owner) == setting
    assert _setting_of_constant("MAX_TEMPERATURE") is None and _setting_of_constant("VLLM_MIN_TEMPERATURE") is None
