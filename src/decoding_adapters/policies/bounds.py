"""Sane bounds for every number an adapter file holds, checked before anything is built from it.

``adapter.json`` may come from anywhere (a download, a shared folder): a number out of bounds must
be one line naming the field, not a 23 GB allocation, a traceback or an adapter that silently
always picks one action (a NaN prior). :func:`check_adapter_fields` runs on the parsed object
(``AdapterConfig.from_dict``); :func:`parse_json` refuses ``NaN`` / ``Infinity`` and nesting
deeper than any adapter file needs. A leaf module (standard library only).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from .kinds import adapter_kind

__all__ = ["check_adapter_fields", "check_rule_fields", "check_abandon_fields", "parse_json", "MAX_POLICY_PARAMETERS",
           "MAX_JSON_DEPTH"]

MAX_POLICY_PARAMETERS = 200_000_000
"""Most parameters a policy described by an adapter file may have (800 MB in float32; the trained
adapters have well under a million)."""

MAX_JSON_DEPTH = 32
"""Deepest nesting of objects and lists in an adapter file (a real one nests 4 deep)."""

MAX_TOKENS = 1_000_000
"""Largest token budget (and budget scale) accepted."""

MAX_TASK_OPTIONS_CHARS = 100_000
"""Largest ``task_options`` (as JSON) accepted: data paths, fields, a question template and an
instruction fit in far less."""
MAX_OPTION_STRING = 20_000
"""Longest string inside ``task_options`` (a question template or an instruction)."""
MAX_OPTION_ITEMS = 64
"""Most entries of one object or list inside ``task_options``."""

# policy field -> (lowest, highest) for the integers of both policy configs
_POLICY_INTS = {
    "embed_dim": (1, 65_536), "hidden_size": (0, 65_536), "num_actions": (1, 1024), "budget_dim": (1, 4096),
    "hidden": (1, 16_384), "width": (1, 16_384), "layers": (1, 64), "max_budget": (1, MAX_TOKENS),
    "token_budget": (1, MAX_TOKENS),
    # the attempt policy's (kind ``attempt``) and a fixed rule's (kind ``rule``)
    "max_attempts": (1, 256), "hidden_proj": (1, 4096), "first_arm": (0, 1023), "arm": (0, 1023),
}
# policy fields holding a list of such integers
_POLICY_INT_LISTS = {"distinct": (1, 4096)}
# a fixed rule's settings (``policy.settings``): integers and numbers
_RULE_INTS = {"n": (1, 256), "window": (1, 256), "max_draws": (1, 256), "warmup": (1, 256), "redecodes": (1, 255)}
_RULE_FLOATS = {"threshold": (-1e12, 1e12), "single_threshold": (-1e12, 1e12), "eta": (0.0, 100.0),
                "consensus": (0.0, 1.0)}
_CALIBRATION = ("slope", "intercept", "mean", "scale")
# policy field -> (lowest, highest, whether the lowest is allowed)
_POLICY_FLOATS = {"dropout": (0.0, 1.0, True), "temperature": (0.0, 1e6, False), "stop_bias": (-1e3, 1e3, True)}


def parse_json(text: str, what: str = "adapter.json") -> Any:
    """``json.loads`` that refuses ``NaN`` / ``Infinity`` and nesting deeper than
    :data:`MAX_JSON_DEPTH`, with a one-line ``ValueError``."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:  # nesting measured before parsing: a 100,000-deep file never reaches the parser's recursion
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                raise ValueError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels: not an adapter file")
        elif ch in "]}":
            depth -= 1

    def refuse(constant: str):
        raise ValueError(f"{what} holds {constant}, which no adapter field may be")

    return json.loads(text, parse_constant=refuse)


def _int(value, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}"[:300])
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _float(value, name: str, low: float, high: float, low_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}"[:300])
    if not (low <= value if low_ok else low < value) or value > high:
        raise ValueError(f"{name} must be in {'[' if low_ok else '('}{low:g}, {high:g}], got {value!r}")
    return float(value)


def _distribution(value, name: str) -> None:
    if not isinstance(value, (list, tuple)) or not value or len(value) > 1024:
        raise ValueError(f"{name} must be a list of probabilities, got {value!r}"[:300])
    for i, p in enumerate(value):
        _float(p, f"{name}[{i}]", 0.0, 1.0, False)


def check_adapter_fields(data: dict) -> None:
    """Refuse, in one line naming the field, any number of an adapter file's fields that is of
    the wrong type or out of bounds (see the module docstring); the fields' meaning is checked
    later by ``AdapterConfig`` itself. The policy is checked first, then the budgets and what the adapter
    was trained on."""
    kind = data.get("kind")
    if not isinstance(kind, str):
        raise ValueError(f"adapter kind must be a string, got {type(kind).__name__}")
    policy = data.get("policy")
    if isinstance(policy, dict):
        _check_policy(policy, kind)
    _check_budgets(data)
    _check_origin(data)


def _check_policy(policy: dict, kind: str) -> None:
    """``policy``: its numbers, a fixed rule's settings, the priors, and the size it would have."""
    _check_policy_numbers(policy)
    check_rule_fields(policy)
    if policy.get("prior") is not None:
        _distribution(policy["prior"], "policy.prior")
    if policy.get("budget_priors") is not None:
        _budget_priors(policy["budget_priors"])
    parameters = _parameters(policy, adapter_kind(kind).per_token)
    if parameters > MAX_POLICY_PARAMETERS:
        raise ValueError(f"the policy adapter.json describes would have {parameters:,} parameters, over the "
                         f"{MAX_POLICY_PARAMETERS:,} any adapter may have")


def _check_policy_numbers(policy: dict) -> None:
    """The integers, numbers and integer lists of both policy configs (``_POLICY_INTS``, ...)."""
    for name, (low, high) in _POLICY_INTS.items():
        if name in policy:
            _int(policy[name], f"policy.{name}", low, high)
    for name, (low, high, low_ok) in _POLICY_FLOATS.items():
        if name in policy:
            _float(policy[name], f"policy.{name}", low, high, low_ok)
    for name, (low, high) in _POLICY_INT_LISTS.items():
        if name in policy:
            values = policy[name]
            if not isinstance(values, (list, tuple)) or len(values) > 1024:
                raise ValueError(f"policy.{name} must be a list of integers, got {values!r}"[:300])
            for i, v in enumerate(values):
                _int(v, f"policy.{name}[{i}]", low, high)


def _budget_priors(pairs) -> None:
    """``policy.budget_priors``: at most 64 (budget, prior) pairs, each prior a distribution."""
    if not isinstance(pairs, (list, tuple)) or len(pairs) > 64:
        raise ValueError(f"policy.budget_priors must be a list of (budget, prior) pairs, got {pairs!r}"[:300])
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"policy.budget_priors[{i}] must be a (budget, prior) pair, got {pair!r}"[:300])
        _int(pair[0], f"policy.budget_priors[{i}] budget", 1, MAX_TOKENS)
        _distribution(pair[1], f"policy.budget_priors[{i}] prior")


def _check_budgets(data: dict) -> None:
    """The token budget and the parallel budgets seen in training."""
    if data.get("token_budget") is not None:
        _int(data["token_budget"], "token_budget", 1, MAX_TOKENS)
    budgets = data.get("parallel_budgets")
    if isinstance(budgets, list):
        if len(budgets) > 64:
            raise ValueError(f"parallel_budgets lists {len(budgets)} budgets, over 64")
        for i, b in enumerate(budgets):
            _int(b, f"parallel_budgets[{i}]", 1, 4096)


def _check_origin(data: dict) -> None:
    """What the adapter was trained on and with: the base LM's sizes, the task and its options, and
    the draft's token budget."""
    fingerprint = data.get("base_fingerprint")
    if isinstance(fingerprint, dict):
        for name in ("hidden_size", "vocab_size"):
            if name in fingerprint:
                _int(fingerprint[name], f"base_fingerprint.{name}", 0, 10_000_000)  # a stand-in LM may say 0
    task = data.get("task", "")
    if not isinstance(task, str) or len(task) > 200:
        raise ValueError(f"task must be a task name of at most 200 characters, got {task!r}"[:300])
    if data.get("task_options") is not None:
        _task_options(data["task_options"])
    draft = data.get("draft")
    if isinstance(draft, dict) and "token_budget" in draft:
        _int(draft["token_budget"], "draft.token_budget", 1, MAX_TOKENS)


def check_rule_fields(policy: dict, name: Callable[[str], str] = "policy.{}".format) -> None:
    """A fixed rule's ``settings`` (its knobs) and ``calibration`` (four finite numbers, a positive
    scale), each refused in one line naming the field as ``name`` gives it (``make-rule``: its option)."""
    settings = policy.get("settings")
    if settings is not None:
        if not isinstance(settings, dict) or len(settings) > 16:
            raise ValueError(f"{name('settings')} must be an object of a rule's settings, got {settings!r}"[:300])
        for key, value in settings.items():
            if key in _RULE_INTS:
                _int(value, name(f"settings.{key}"), *_RULE_INTS[key])
            elif key in _RULE_FLOATS:
                _float(value, name(f"settings.{key}"), *_RULE_FLOATS[key], True)
            elif not isinstance(value, (str, bool)) or (isinstance(value, str) and len(value) > 200):
                raise ValueError(f"{name(f'settings.{key}')} must be a rule setting, got {value!r}"[:300])
    calibration = policy.get("calibration")
    if calibration is not None:
        if not isinstance(calibration, dict) or set(calibration) != set(_CALIBRATION):
            raise ValueError(f"{name('calibration')} must hold {list(_CALIBRATION)}, got {calibration!r}"[:300])
        for key in _CALIBRATION:  # the scale divides the confidence: 0 would make every reading NaN
            _float(calibration[key], name(f"calibration.{key}"), 0.0 if key == "scale" else -1e12, 1e12,
                   key != "scale")


def _task_options(options) -> None:
    """``task_options``: an object of at most :data:`MAX_OPTION_ITEMS` named options whose values are
    JSON scalars, strings of at most :data:`MAX_OPTION_STRING` characters, or small objects / lists
    of them, :data:`MAX_TASK_OPTIONS_CHARS` characters in all."""
    if not isinstance(options, dict):
        raise ValueError(f"task_options must be an object of get_task options, got {type(options).__name__}")
    if len(json.dumps(options)) > MAX_TASK_OPTIONS_CHARS:
        raise ValueError(f"task_options is over {MAX_TASK_OPTIONS_CHARS:,} characters: not a task record")

    def check(value, name: str) -> None:
        if value is None or isinstance(value, bool):
            return
        if isinstance(value, (int, float)):
            _float(value, name, -1e12, 1e12, True)
        elif isinstance(value, str):
            if len(value) > MAX_OPTION_STRING:
                raise ValueError(f"{name} is {len(value):,} characters, over {MAX_OPTION_STRING:,}")
        elif isinstance(value, (list, dict)):
            if len(value) > MAX_OPTION_ITEMS:
                raise ValueError(f"{name} has {len(value)} entries, over {MAX_OPTION_ITEMS}")
            for key, item in (value.items() if isinstance(value, dict) else enumerate(value)):
                if isinstance(key, str) and len(key) > 200:
                    raise ValueError(f"{name} has a key of {len(key)} characters, over 200")
                check(item, f"{name}.{key}" if isinstance(key, str) else f"{name}[{key}]")
        else:
            raise ValueError(f"{name} must be JSON data, got {type(value).__name__}")

    check(options, "task_options")


def _parameters(policy: dict, per_token: bool) -> int:
    """About how many parameters the head of ``policy`` has (its widest layers), from fields
    already checked to be integers in bounds (defaults where absent); ``per_token``: the kind's
    policy reads the LM's hidden state at every token (``AdapterKind.per_token``)."""
    if "arms" in policy:  # only the attempt policy (kind ``attempt``) lists arms
        return _attempt_parameters(policy)
    layers = policy.get("layers", 3 if per_token else 2)
    if per_token:
        width, inputs = policy.get("width", 256), policy.get("hidden_size", 1) + 2
    else:
        width = policy.get("hidden", 256)
        inputs = policy.get("embed_dim", 1) + policy.get("budget_dim", 32)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (layers, width, inputs)):
        return 0
    return inputs * width + max(layers - 1, 0) * width * width + width * policy.get("num_actions", 1)


def _attempt_parameters(policy: dict) -> int:
    """At least as many parameters as the attempt policy of ``policy`` has
    (``policies.attempt.AttemptPolicy``): the hidden projection (``hidden_size`` x ``hidden_proj``),
    the stop network (state -> ``width`` -> ``width`` -> stop and one per arm) and the weight network
    (attempt -> ``width`` -> 1), with every feature set counted (defaults where absent)."""
    def size(name: str) -> int:
        value = policy.get(name)
        return len(value) if isinstance(value, (list, tuple)) else 0

    arms, columns = size("arms"), size("confidence_names")
    hidden, proj, width = (policy.get(name, default) for name, default in
                           (("hidden_size", 0), ("hidden_proj", 8), ("width", 64)))
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (hidden, proj, width)):
        return 0
    attempt = 2 + arms + columns + proj  # has an answer, the arm, confidence columns, length, projection
    state = 3 * attempt + 2 + arms + 6  # mean, latest and first attempt; attempts made and left; draws; agreement
    stop_net = state * width + width * width + width * (1 + arms) + 2 * width + 1 + arms
    return max(1, hidden) * proj + stop_net + attempt * width + 2 * width + 2  # and the vote sharpness


_VERIFIER_INTS = {"hidden_size": (0, 65_536), "hidden_proj": (1, 4096), "width": (1, 16_384),
                  "token_budget": (1, MAX_TOKENS)}
"""The verifier shape's integers in an ``abandon.json`` (``policies.verifier.VerifierConfig``)."""


ABANDON_JSON, ABANDON_WEIGHTS = "abandon.json", "abandon.safetensors"
"""An abandon rule's two files in an adapter directory (``policies.abandon``; the model card names them)."""


def check_abandon_fields(data) -> None:
    """An ``abandon.json``'s numbers (``policies.abandon``): ``every``, the thresholds (each in
    [0, 1]), the verifier's shape and the confidence column names, each refused in one line naming
    the field; how they fit together is checked where the rule is built."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object of abandon rule fields, got {type(data).__name__}")
    _int(data.get("every"), "every", 1, MAX_TOKENS)
    thresholds = data.get("thresholds")
    if not isinstance(thresholds, list) or len(thresholds) > 4096:
        raise ValueError(f"thresholds must be a list of at most 4096 numbers, got {thresholds!r}"[:300])
    for i, t in enumerate(thresholds):
        _float(t, f"thresholds[{i}]", 0.0, 1.0, True)
    verifier = data.get("verifier")
    if not isinstance(verifier, dict):
        raise ValueError(f"verifier must be an object of the prefix verifier's settings, got {verifier!r}"[:300])
    for name, (low, high) in _VERIFIER_INTS.items():
        if name in verifier:
            _int(verifier[name], f"verifier.{name}", low, high)
    for field in ("confidence_names", "verifier.confidence_names", "verifier.features"):
        holder = verifier if field.startswith("verifier.") else data
        names = holder.get(field.split(".")[-1])
        if not isinstance(names, list) or len(names) > 64 or not all(isinstance(n, str) and len(n) <= 64
                                                                     for n in names):
            raise ValueError(f"{field} must be a list of at most 64 names, got {names!r}"[:300])
