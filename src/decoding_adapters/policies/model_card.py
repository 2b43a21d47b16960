"""Model cards: a ``README.md`` beside ``adapter.json`` so that an adapter directory describes itself.

``save_adapter`` calls :func:`write_model_card` after writing the weights, so every adapter directory
has one. The card holds, from ``AdapterConfig`` alone: the base model and its fingerprint, the task,
the kind of adapter and its inputs, the action set (in policy-output order), the training settings,
and copy-paste usage. The evaluation table is added when results are known: passed as
``evaluation=`` (``evaluate``'s ``results.json`` content: ``{method: {metric: {mean, ci_low,
ci_high}}}``), or found as ``results.json`` / ``eval/results.json`` inside the adapter directory;
``policies.add_evaluation(adapter_dir, eval_dir)`` rewrites the card after an ``evaluate`` run,
keeping one table per task and split (``evaluations.json``), each labelled with its size.

The card opens with Hugging Face hub metadata (YAML front matter) so the directory can be uploaded
as it is; ``base_model`` is only stated there when it looks like a hub id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from ..core.files import write_text
from ..core.stats import format_interval
from ..decoding.actions import DecodingAction
from .bounds import ABANDON_JSON, ABANDON_WEIGHTS, check_abandon_fields, parse_json
from .kinds import adapter_kind

__all__ = ["render_model_card", "write_model_card", "read_results", "read_evaluations", "evaluation_label",
           "MODEL_CARD_NAME", "EVALUATIONS_FILE"]

MODEL_CARD_NAME = "README.md"
EVALUATIONS_FILE = "evaluations.json"
"""Beside the card: ``{task/split: {"label", "results"}}``, every evaluation the card shows."""
_EVAL_FILES = ("results.json", "eval/results.json")

RATES = ("pass@", "answer_accuracy")
"""Metrics that are shares of problems (printed in percent): pass@k and the answer's accuracy."""


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return "`" + json.dumps(value) + "`"
    return "—" if value is None else str(value).replace("|", "\\|")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]


def _front_matter(config) -> list[str]:
    lines = ["---", "library_name: decoding-adapters", "tags:", "- decoding-adapter", f"- {config.kind}-level"]
    base = config.base_model
    if base.count("/") == 1 and not base.startswith((".", "/", "~")) and not Path(base).exists():
        lines.insert(1, f"base_model: {base}")
    return lines + ["---", ""]


def _kind_label(config) -> str:
    return adapter_kind(config.kind).label


def _article(word: str) -> str:
    """"An" before a vowel ("An attempt-policy ..."), else "A"."""
    return "An" if word[:1].lower() in tuple("aeiou") else "A"


def _inputs(config) -> str:
    return adapter_kind(config.kind).card_inputs(config)


def _actions_table(config) -> list[str]:
    rows = []
    for i, d in enumerate(config.actions):
        a = DecodingAction.from_dict(d)
        if a.is_greedy:
            rows.append([i, a.name, "greedy", None, None, None])
        else:
            rows.append([i, a.name, a.temperature, a.top_k, a.top_p, a.min_p])
    return _table(["#", "action", "temperature", "top-k", "top-p", "min-p"], rows)


def _evaluation_table(results: Mapping[str, Mapping]) -> list[str]:
    metrics: list[str] = []
    for per_method in results.values():
        if isinstance(per_method, Mapping):
            metrics += [m for m in per_method if m not in metrics and isinstance(per_method[m], Mapping)]
    if not metrics:
        return []
    rows = []
    for method, per_method in results.items():
        if not isinstance(per_method, Mapping):
            continue
        row = [method]
        for m in metrics:
            s = per_method.get(m)
            if not isinstance(s, Mapping) or "mean" not in s:
                row.append(None)
                continue
            scale = 100.0 if m.startswith(RATES) else 1.0  # pass@k and answer accuracy in percent, as reports print
            low, high = s.get("ci_low"), s.get("ci_high")
            # the interval evaluate reported, printed as report.md prints it (never halved after clipping)
            row.append(format_interval(s["mean"] * scale, None if low is None else low * scale,
                                       None if high is None else high * scale))
        rows.append(row)
    header = ["method"] + [f"{m} (%)" if m.startswith(RATES) else m for m in metrics]
    return _table(header, rows)


INTERVAL_LEGEND = ("The 95% interval `evaluate` reported (as in its `report.md`): mean ± half-width, or mean "
                   "[low, high] where it was clipped to the possible range.")


def _usage(config, name: str) -> list[str]:
    py = adapter_kind(config.kind).card_usage(config, name)
    return [
        "```python",
        *py,
        "```",
        "",
        "or with this project's own decode loop:",
        "",
        "```bash",
        f'decoding-adapters generate --adapter {name} "What is 2+3?"',
        "```",
    ]


def render_model_card(config, directory: str | Path = "adapter", evaluation: Mapping | None = None,
                      evaluations: Mapping[str, Mapping] | None = None) -> str:
    """The model card text for ``config`` (an ``AdapterConfig``), with ``evaluations`` (one labelled
    table per task and split) or a single ``evaluation`` results mapping if given."""
    name = Path(directory).name or "adapter"
    fp = {k: v for k, v in config.base_fingerprint.items() if k != "name_or_path"}
    lines = _front_matter(config) + [
        f"# Decoding adapter `{name}`",
        "",
        f"{_article(_kind_label(config))} **{_kind_label(config)} decoding adapter** trained with decoding-adapters "
        f"(*Learning Adaptive LLM Decoding*): a small policy that picks how the frozen LM decodes — "
        f"{_inputs(config)}. The LM itself is unchanged.",
        "",
        "## Base model and task",
        "",
        *_table(
            ["", ""],
            [
                ["base model", f"`{config.base_model}`"],
                ["fingerprint", fp],
                ["task", config.task or "—"],
                ["parallel budgets B seen in training", config.parallel_budgets or "—"],
                ["token budget b of training", config.token_budget or "—"],
            ],
        ),
        "",
        "Loading it onto an LM with another hidden size or vocabulary fails with a clear error.",
        "",
        "## Actions",
        "",
        "Policy outputs, in order (processor order: temperature → top-k → top-p → min-p, as HF `generate`).",
        "",
        *_actions_table(config),
        "",
        "## Policy",
        "",
        *_table(["setting", "value"], [[k, v] for k, v in config.policy.items()]),
        "",
    ]
    if config.training:
        lines += [
            "## Training settings",
            "",
            *_table(["setting", "value"], [[k, v] for k, v in config.training.items()]),
            "",
        ]
    lines += _abandon_section(Path(directory))
    if evaluations:
        lines += ["## Evaluation", ""]
        for entry in evaluations.values():
            table = _evaluation_table(entry.get("results") or {})
            if table:
                lines += [f"### {entry.get('label', 'evaluation')}", "", *table, ""]
        lines += [INTERVAL_LEGEND, ""]
    else:
        table = _evaluation_table(evaluation) if evaluation else []
        if table:
            lines += ["## Evaluation", "", *table, "", INTERVAL_LEGEND, ""]
    lines += [
        "## Usage",
        "",
        *_usage(config, _usage_path(directory)),
        "",
        "Files: `adapter.safetensors` (policy weights), `adapter.json` (everything needed to use it again), "
        "this `README.md`.",
        "",
    ]
    return "\n".join(lines)


def _abandon_section(directory: Path) -> list[str]:
    """The card's section on the abandon rule the adapter carries (``abandon.json``; none: no section)."""
    path = directory / ABANDON_JSON
    if not path.is_file():
        return []
    try:
        meta = parse_json(path.read_text(encoding="utf-8"), ABANDON_JSON)
        check_abandon_fields(meta)
        every, thresholds = int(meta["every"]), [float(x) for x in meta["thresholds"]]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):  # a damaged rule is refused where it is loaded
        return []
    lines = ["## Abandon rule", "",
             f"Every attempt is scored at every {every} tokens and cut where the score falls below that "
             f"checkpoint's threshold ({', '.join(f'{x:.3f}' for x in thresholds)}; 0: never cut); the next "
             "attempt then starts. Live decoding (`generate`, `serve`, the Python API) cuts exactly where the "
             "table replay does, and each response lists every attempt's arm, tokens and `cut_at`. Files: "
             f"`{ABANDON_JSON}`, `{ABANDON_WEIGHTS}` (written by `attach-abandon`).", ""]
    training = meta.get("training")  # free-form: a hand-made file may hold anything here
    on_validation = training.get("validation") if isinstance(training, dict) else None
    figures = ("accuracy", "accuracy_without", "tokens", "tokens_without")
    if isinstance(on_validation, dict) and all(isinstance(on_validation.get(k), (int, float)) for k in figures):
        lines += [f"On its validation table: answer accuracy {100 * on_validation['accuracy_without']:.1f}% -> "
                  f"{100 * on_validation['accuracy']:.1f}%, tokens per problem {on_validation['tokens_without']:.1f} "
                  f"-> {on_validation['tokens']:.1f}.", ""]
    return lines


def _usage_path(directory: str | Path) -> str:
    """How the card's usage names the adapter: its absolute path where the folder exists (the snippet
    runs from any folder), else its name."""
    path = Path(directory)
    return str(path.resolve()) if path.is_dir() else (path.name or "adapter")


def read_evaluations(directory: str | Path) -> dict:
    """The evaluations kept beside an adapter's card (``{}`` when none or unreadable)."""
    try:
        data = json.loads((Path(directory) / EVALUATIONS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def evaluation_label(eval_dir_or_results: str | Path | Mapping) -> tuple[str, str]:
    """``(key, label)`` of an evaluation: its task and split, and a heading with its size, read from
    the ``eval_details.json`` beside its results (a bare results mapping: one unnamed evaluation)."""
    details = {}
    if not isinstance(eval_dir_or_results, Mapping):
        path = Path(eval_dir_or_results)
        path = path / "eval_details.json" if path.is_dir() else path.with_name("eval_details.json")
        try:
            details = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            details = {}
    config = details.get("config", {}) if isinstance(details, dict) else {}
    task, split = config.get("task"), config.get("split", "test")
    if task is None:
        return "evaluation", "Evaluation"
    problems = len(details.get("problems") or []) or config.get("num_problems")
    size = ", ".join(part for part in (
        f"{problems} problems" if problems else "", f"{config['seeds']} seeds" if config.get("seeds") else "",
        f"token budget {config['token_budget']}" if config.get("token_budget") else "") if part)
    return f"{task}/{split}", f"Task {task}, split {split}" + (f" ({size})" if size else "")


def _find_evaluation(directory: Path) -> dict | None:
    for rel in _EVAL_FILES:
        path = directory / rel
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(data, dict):
                return data
    return None


def write_model_card(directory: str | Path, config, evaluation: Mapping | None = None,
                     evaluations: Mapping[str, Mapping] | None = None) -> Path:
    """Write ``README.md`` into the adapter ``directory`` (atomically) and return its path.

    ``evaluations`` defaults to the ``evaluations.json`` kept in ``directory``; without one,
    ``evaluation`` defaults to a ``results.json`` (or ``eval/results.json``) found there."""
    directory = Path(directory)
    if evaluations is None:
        evaluations = read_evaluations(directory) or None
    found = evaluation if evaluation is not None else (None if evaluations else _find_evaluation(directory))
    text = render_model_card(config, directory, found, evaluations)
    return write_text(directory / MODEL_CARD_NAME, text)  # atomic: a full disk leaves no temporary file


def read_results(eval_dir_or_results: str | Path | Mapping) -> Mapping:
    """An evaluation's results mapping from an ``evaluate`` output directory, a ``results.json``
    path, or the mapping itself."""
    if isinstance(eval_dir_or_results, Mapping):
        return eval_dir_or_results
    path = Path(eval_dir_or_results)
    path = path / "results.json" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: point at an `evaluate` output directory or its results.json")
    return json.loads(path.read_text())
