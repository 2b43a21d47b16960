"""Mixed-domain and OOD tables (reporting.domains) on synthetic evaluations with known per-problem values."""

from __future__ import annotations

import json
import statistics

from decoding_adapters.core.stats import mean_ci
from decoding_adapters.evaluation import ood_label
from decoding_adapters.reporting.domains import (
    adapter_rows,
    domains_markdown,
    gain_table,
    load_evaluations,
    mixed_domain_table,
    ood_table,
    pattern_notes,
)

N = 10  # problems per evaluation


def _method(values: list[float]) -> tuple[dict, dict]:
    mean, low, high = mean_ci(values)
    return {"pass@1": {"mean": mean, "ci_low": low, "ci_high": high}}, {"pass@1": [[v] for v in values]}


def evaluation(task: str, split: str, methods: dict[str, tuple[list[float], str | None, str]]):
    """methods: name -> (per-problem pass@1, training task or None for static, level)."""
    results, per_problem, info, labels = {}, {}, {}, {}
    for name, (values, train, level) in methods.items():
        results[name], per_problem[name] = _method(values)
        info[name] = {"level": level, "role": "w/ budget" if train else name.lower(), "kind": level}
        if train is not None:
            labels[name] = ood_label(train, task, split)
    details = {"config": {"confidence": 0.95, "ood": labels}, "methods": info, "per_problem": per_problem}
    return results, details


def shifted(base: float, gain: float) -> list[float]:
    # alternating noise so that paired differences have a spread but a known mean
    return [min(max(base + gain + (0.05 if i % 2 else -0.05), 0.0), 1.0) for i in range(N)]


def study(mix_gain: float, ood_gain: float):
    evals = {}
    for d in ("arithmetic", "pyfunc"):
        evals[f"{d}:test"] = evaluation(d, "test", {
            "Best": (shifted(0.4, 0.0), None, "static"),
            "Mixed": (shifted(0.4, -0.05), None, "static"),
            f"Seq [{d}]": (shifted(0.4, 0.2), d, "sequence"),
            "Seq [mix]": (shifted(0.4, mix_gain), "arithmetic+pyfunc", "sequence"),
        })
        evals[f"{d}:ood"] = evaluation(d, "ood", {
            "Best": (shifted(0.3, 0.0), None, "static"),
            f"Seq [{d}]": (shifted(0.3, ood_gain), d, "sequence"),
        })
    return evals


def test_adapter_rows_know_what_each_adapter_was_trained_on():
    evals = study(0.1, 0.1)
    rows = {r.name: r for r in adapter_rows("arithmetic:test", evals["arithmetic:test"][1])}
    assert rows["Seq [arithmetic]"].trained == "single" and rows["Seq [arithmetic]"].ood is False
    assert rows["Seq [mix]"].trained == "mix" and rows["Seq [mix]"].ood is False
    ood = adapter_rows("arithmetic:ood", evals["arithmetic:ood"][1])
    assert [r.ood for r in ood] == [True] and ood[0].label == "arithmetic -> arithmetic:ood"


def test_mixed_domain_table_puts_domains_side_by_side():
    table = mixed_domain_table(study(0.1, 0.1), ("arithmetic", "pyfunc"))
    header, _, *rows = table.splitlines()
    assert "arithmetic (%)" in header and "pyfunc (%)" in header
    single = next(r for r in rows if "single" in r)
    mix = next(r for r in rows if "mix:" in r)
    assert single.count("+20.0 [") == 2 and "✔" in single  # a gain of 20 points on both domains
    assert mix.count("+10.0 [") == 2 and "arithmetic+pyfunc" in mix


def test_gain_table_pairs_mix_against_single():
    rows = gain_table(study(0.1, 0.1), ("arithmetic", "pyfunc")).splitlines()[2:]
    assert len(rows) == 2  # one adapter variant x two domains x one metric
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3].startswith("+20.0") and cells[4].startswith("+10.0") and cells[5].startswith("-10.0")


def test_ood_table_compares_with_the_in_distribution_gain():
    rows = ood_table(study(0.1, 0.05), ("pass@1",)).splitlines()[2:]
    assert len(rows) == 2
    assert "`arithmetic -> arithmetic:ood`" in rows[0]
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[5].startswith("+5.0") and cells[6].startswith("+20.0")


def test_pattern_notes_follow_the_numbers():
    holds = pattern_notes(study(0.1, 0.1), ("arithmetic", "pyfunc"))
    assert "sequence level** (2 cells" in holds[0] and "smaller in 2/2" in holds[0] and "**holds**" in holds[0]
    assert "stays ≥ 0 in 2" in holds[1] and "**holds**" in holds[1]
    reversed_ = pattern_notes(study(0.3, -0.2), ("arithmetic", "pyfunc"))
    assert "smaller in 0/2" in reversed_[0] and "**does not hold**" in reversed_[0]
    assert "**does not hold**" in reversed_[1]


def test_pattern_notes_say_when_there_is_nothing_to_test():
    evals = study(0.1, 0.1)
    for key in ("arithmetic:test", "pyfunc:test"):  # single-domain adapters no better than Best
        results, details = evals[key]
        name = next(n for n in results if n.startswith("Seq [") and "mix" not in n)
        base = evaluation(key.split(":")[0], "test", {name: (shifted(0.4, 0.0), key.split(":")[0], "sequence")})
        results[name], details["per_problem"][name] = base[0][name], base[1]["per_problem"][name]
    notes = pattern_notes(evals, ("arithmetic", "pyfunc"))
    assert "**cannot be confirmed**" in notes[0]
    assert "**cannot be tested**" in notes[1]


def test_markdown_sections_and_empty_inputs():
    text = domains_markdown(study(0.1, 0.1), ("arithmetic", "pyfunc"))
    for heading in ("## Mixed-domain training", "### Single-domain vs mixed-domain gains",
                    "## Out-of-distribution evaluation", "## Does the paper's pattern hold?"):
        assert heading in text
    only_static = {"arithmetic:test": evaluation("arithmetic", "test", {"Best": ([0.5] * N, None, "static")})}
    assert ood_table(only_static) == "" and gain_table(only_static, ("arithmetic",)) == ""
    assert statistics.fmean(shifted(0.4, 0.0)) == 0.4


def test_load_evaluations_reads_a_study_directory(tmp_path):
    evals = study(0.1, 0.1)
    (tmp_path / "results.json").write_text(json.dumps({k: r for k, (r, _) in evals.items()}))
    (tmp_path / "eval_details.json").write_text(json.dumps({k: d for k, (_, d) in evals.items()}))
    loaded = load_evaluations(tmp_path)
    assert domains_markdown(loaded, ("arithmetic", "pyfunc")) == domains_markdown(evals, ("arithmetic", "pyfunc"))
