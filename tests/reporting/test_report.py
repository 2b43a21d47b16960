"""Report: tables, computed verdicts, figures and the HTML trace from fake but well-formed inputs."""

import json
import math
import random

import pytest

from decoding_adapters.evaluation import EvalConfig
from decoding_adapters.evaluation.aggregate import summarise
from decoding_adapters.reporting import plots
from decoding_adapters.reporting.report import (
    all_methods_table,
    best_line,
    cost_table,
    identical_by_construction,
    load_training_log,
    method_info,
    seed_table,
    selection_section,
    sequence_table,
    token_table,
    verdicts,
    write_report,
)

ACTIONS = ["greedy", "T=0.5", "T=1", "T=1.25"]
METHODS = {
    "Greedy": ("greedy", "greedy", "static", ["greedy"]),
    "Best": ("static", "best", "static", ["T=1"]),
    "Mixed": ("mixed", "mixed", "static", ACTIONS),
    "Seq w/o budget": ("sequence", "w/o budget", "sequence", ACTIONS),
    "Seq w/ budget": ("sequence", "w/ budget", "sequence", ACTIONS),
    "Token w/ budget": ("token", "w/ budget", "token", ACTIONS),
    "Token entropy-only": ("token", "entropy-only", "token", ACTIONS),
}
WEIRD_TOKENS = ["<script>", "a&b", '"q"', "\n", " ", "", " the", " 42", "<|im_end|>"]


def fake_trajectory(rng, kind, pid):
    n = rng.randint(3, 12)
    tokens = [rng.choice(WEIRD_TOKENS + [" x", " y", " 1"]) for _ in range(n)]
    actions = [2] * n if kind == "static" else [rng.randrange(4) for _ in range(n)]
    return {"problem_id": pid, "seed": 0, "sample": 0, "text": "".join(tokens), "token_ids": list(range(n)),
            "tokens": tokens, "actions": actions, "entropy": [round(rng.uniform(0, 3), 3) for _ in range(n)],
            "max_prob": [rng.choice([0.99, 0.5, 0.3]) for _ in range(n)], "correct": float(rng.random() < 0.5),
            "length": n, "stop_reason": "eos"}


def fake_evaluation(gains: dict[str, float] | None = None, problems: int = 20, seeds: int = 3, seed: int = 0):
    """results and details as `evaluate` writes them; ``gains`` shifts a method's success rate."""
    rng = random.Random(seed)
    gains = gains or {}
    cfg = EvalConfig(k_values=(1, 2, 4), seeds=seeds, token_budget=16)
    base = [rng.uniform(0.1, 0.8) for _ in range(problems)]
    results, details = {}, {
        "config": {"k_values": [1, 2, 4], "n": 4, "seeds": seeds, "token_budget": 16, "cot_ratio": 0.0, "seed": 0,
                   "confidence": 0.95, "task": "fake", "model": "none"},
        "problems": [{"id": f"p{i}", "cot": False, "question": f"What is <{i}> & more?"} for i in range(problems)],
        "methods": {}, "summary": {}, "per_problem": {}, "lengths": {}, "action_usage": {}, "sequence_choices": {},
        "trajectories": {},
    }
    for name, (kind, role, level, actions) in METHODS.items():
        details["methods"][name] = {"kind": kind, "role": role, "level": level, "actions": actions}
        per_problem = {m: [] for m in cfg.metrics}
        for p in base:
            q = min(max(p + gains.get(name, 0.0) + rng.gauss(0, 0.02), 0.0), 1.0)
            for k in cfg.k_values:
                value = q if kind == "greedy" else 1 - (1 - q) ** k
                per_problem[f"pass@{k}"].append([value] * seeds)
                per_problem[f"answer_accuracy@{k}"].append([q if kind == "greedy" else min(q + 0.02 * k, 1.0)] * seeds)
            per_problem["mean_length"].append([rng.uniform(4, 16) for _ in range(seeds)])
        results[name], details["summary"][name] = summarise(per_problem, cfg)
        details["per_problem"][name] = per_problem
        details["lengths"][name] = [rng.randint(1, 16) for _ in range(problems * (1 if kind == "greedy" else 12))]
        details["action_usage"][name] = [0.25] * len(actions)
        details["trajectories"][name] = [fake_trajectory(rng, "static" if kind != "token" else "token", f"p{i}")
                                         for i in range(6)]
        if kind == "sequence":
            details["sequence_choices"][name] = {
                "k_values": [1, 2, 4],
                "actions": [[rng.randrange(4) for _ in range(3)] for _ in range(problems)],
            }
    return results, details


def write_training_log(path):
    rng = random.Random(1)
    lines = [json.dumps({"step": 0, "event": "filter", "kept": 5})]
    for step in range(1, 41):
        probs = [rng.random() for _ in ACTIONS]
        rec = {"step": step, "reward": rng.random(), "entropy": 1.0, "action_probs": [p / sum(probs) for p in probs]}
        if step % 10 == 0:
            rec["val_reward"] = float("nan") if step == 10 else 0.5 + step / 100
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + '\n{"step": 41, "rew')  # a torn last line
    return path


def is_png(path):
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_report_end_to_end(tmp_path):
    results, details = fake_evaluation({"Seq w/ budget": 0.15, "Token w/ budget": -0.3})
    log = write_training_log(tmp_path / "train_log.jsonl")
    out = tmp_path / "report"
    path = write_report(out, results, details, {"token run": log}, ACTIONS)
    assert path == out / "report.md"
    saved = json.loads((out / "results.json").read_text())
    assert set(saved) == set(METHODS)
    for entry in saved.values():
        for value in entry.values():
            assert {"mean", "ci_low", "ci_high"} <= set(value) and value["ci_low"] <= value["mean"] <= value["ci_high"]
    pngs = [
        "pass_at_k.png",
        "training_token_run.png",
        "lengths.png",
        "sequence_choices.png",
        "entropy_token_w_budget.png",
        "wordcloud_token_w_budget.png",
        "entropy_token_entropy_only.png",
    ]
    for name in pngs:
        assert is_png(out / name), name
    html = (out / "action_trace_token_w_budget.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html and "a&amp;b" in html
    text = path.read_text()
    for name in pngs + ["action_trace_token_w_budget.html"]:
        assert f"({name})" in text, name  # every figure is linked from the report
    assert "Δ vs Best" in text and "## Static sampling vs token-level adapter" in text
    # Computed verdicts: the boosted adapter beats Best, the handicapped one does not beat its baseline.
    assert "**Seq w/ budget beats Best**" in text
    assert "**Token w/ budget does not beat" in text


def test_tables_follow_the_paper_layout():
    results, details = fake_evaluation()
    seq = sequence_table(results, details).splitlines()
    assert seq[0].startswith("| Metric | Setting | Best | Mixed | w/o budget")
    assert sum(line.startswith("| Pass@") for line in seq) == 3 and sum("Δ vs " in line for line in seq) == 7
    assert sum(line.startswith("| Answer (B=") for line in seq) == 3  # the answer at B = 1, 2, 4 beside pass@k
    tok = token_table(results, details).splitlines()
    assert "| Greedy | Mixed |" in tok[0] and tok[0].count("| Δ") == 2
    assert "entropy-only" in tok[0]
    assert all_methods_table(results, details).count("\n") == len(METHODS) + 1
    # Without details nothing is guessed from the names (no kind, role or level): no level's table, but every
    # method in the table of all methods.
    info = method_info(results, None)
    assert info["Seq w/o budget"]["kind"] == info["Token entropy-only"]["level"] == info["Best"]["role"] == ""
    assert not sequence_table(results) and not token_table(results)
    assert all_methods_table(results).count("\n") == len(METHODS) + 1


def test_verdicts_are_computed_not_fixed():
    results, details = fake_evaluation({"Seq w/ budget": 0.2, "Seq w/o budget": -0.2})
    lines = verdicts(results, details)
    seq_with = next(v for v in lines if v.startswith("- **Seq w/ budget"))
    seq_without = next(v for v in lines if v.startswith("- **Seq w/o budget"))
    assert "beats Best" in seq_with and "✔" in seq_with
    assert "does not beat Best" in seq_without and "✘" in seq_without
    same, same_details = fake_evaluation({}, seed=3)
    neutral = next(v for v in verdicts(same, same_details) if v.startswith("- **Seq w/o budget"))
    assert "does not beat Best" in neutral


def test_action_trace_escapes_and_colours(tmp_path):
    traj = {
        "tokens": ["<b>", " & ", "x"],
        "actions": [0, 1, 1],
        "entropy": [1.0, 0.1, 2.0],
        "max_prob": [0.4, 0.99, 0.5],
        "correct": 1.0,
        "problem_id": 'p"1',
        "length": 3,
    }
    path = plots.action_trace_html(
        [("Example <1>", traj)], ["greedy", "T=<1>"], tmp_path / "t.html", prompts={'p"1': "2 < 3?"}
    )
    html = path.read_text()
    assert "<b>" not in html and "&lt;b&gt;" in html and "Example &lt;1&gt;" in html and "T=&lt;1&gt;" in html
    assert "2 &lt; 3?" in html
    assert 'class="det"' in html and plots.action_color(0) in html  # deterministic token in black, others coloured
    empty = plots.action_trace_html([], ["greedy"], tmp_path / "e.html")
    assert "No trajectories" in empty.read_text()


def test_figures_handle_empty_and_short_inputs(tmp_path):
    assert is_png(plots.plot_wordclouds([], ACTIONS, tmp_path / "wc.png"))
    only_space = [{"tokens": [" ", "\n"], "actions": [0, 1]}]
    assert is_png(plots.plot_wordclouds(only_space, ["a", "b"], tmp_path / "wc2.png"))
    assert is_png(plots.plot_entropy_modulation([], [], ACTIONS, tmp_path / "ent.png"))
    assert is_png(plots.plot_lengths([("x", {"a": []})], tmp_path / "len.png"))
    assert is_png(plots.plot_training([], ACTIONS, tmp_path / "train.png"))


def test_training_log_reader_skips_other_lines(tmp_path):
    records = load_training_log(write_training_log(tmp_path / "log.jsonl"))
    assert [r["step"] for r in records] == list(range(1, 41))
    assert math.isnan(records[9]["val_reward"])
    with pytest.raises(FileNotFoundError):
        load_training_log(tmp_path / "missing.jsonl")


def test_report_cli(tmp_path, monkeypatch, capsys):
    from decoding_adapters import cli

    monkeypatch.setattr(cli, "COMMANDS", {k: v for k, v in cli.COMMANDS.items() if k in ("evaluate", "report")})
    results, details = fake_evaluation({"Seq w/ budget": 0.2})
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    (eval_dir / "results.json").write_text(json.dumps(results))  # no eval_details.json: tables and pass@k only
    log = write_training_log(tmp_path / "log.jsonl")
    out = tmp_path / "out"
    assert cli.main(["report", "--eval", str(eval_dir), "--train-log", f"seq={log}", "--out", str(out)]) == 0
    assert (out / "report.md").is_file() and is_png(out / "pass_at_k.png") and is_png(out / "training_seq.png")
    assert "beats Best" not in capsys.readouterr().out  # no kinds without eval_details: no adapter verdicts
    (eval_dir / "eval_details.json").write_text(json.dumps(details))
    assert cli.main(["report", "--eval", str(eval_dir), "--train-log", f"seq={log}", "--out", str(out)]) == 0
    assert "beats Best" in capsys.readouterr().out
    assert cli.main(["report", "--eval", str(tmp_path / "nothing"), "--out", str(out)]) == 2


def test_token_verdict_compares_with_best_greedy_per_token_mixed_and_the_best_token_action():
    """A token adapter is compared with Best (the strongest static baseline), Greedy and the per-token
    Mixed (not only the strongest), and the best single token action is printed too."""
    extra = {
        "Mixed (per token)": ("mixed", "mixed", "token", ACTIONS),
        "Best token action (T=0.5)": ("static", "best token action", "token", ["T=0.5"]),
    }
    METHODS.update(extra)
    try:
        results, details = fake_evaluation({"Token w/ budget": 0.1})
    finally:
        for name in extra:
            METHODS.pop(name)
    lines = [v for v in verdicts(results, details) if v.startswith("- **Token w/ budget")]
    assert len(lines) == 4
    assert [line.split(" beats ")[-1].split("**")[0] if " beats " in line else line for line in lines] == [
        "Best", "Greedy", "Mixed (per token)", "Best token action (T=0.5)"
    ]
    head = token_table(results, details).splitlines()[0]
    assert "| Greedy | Mixed (per token)" in head and "Best token action" in head


def test_paper_style_binomial_interval_column(tmp_path):
    """results.json carries the paper's ± (normal-approximation binomial, N the distinct problems:
    a problem scored over three seeds counts once) and the report prints it; ±1.25 at 71.7% with
    ~5,000 outcomes as in the paper."""
    from decoding_adapters.evaluation import binomial_halfwidth
    from decoding_adapters.reporting.report import paper_interval_table

    assert binomial_halfwidth(0.717, 4985) * 100 == pytest.approx(1.25, abs=0.005)
    results, details = fake_evaluation(problems=20, seeds=3)
    entry = results["Greedy"]["pass@1"]
    assert entry["outcomes"] == 20
    assert entry["binomial_halfwidth"] == pytest.approx(1.959964 * math.sqrt(entry["mean"] * (1 - entry["mean"]) / 20))
    assert "binomial_halfwidth" not in results["Greedy"]["mean_length"]
    table = paper_interval_table(results)
    assert f"{entry['mean'] * 100:.2f} ± {entry['binomial_halfwidth'] * 100:.2f}" in table
    report = write_report(tmp_path, results, details).read_text()
    assert "## Paper-style intervals" in report


def test_a_per_sequence_mixture_is_never_labelled_the_per_token_mixed():
    """A level-'token' mixture drawn once per sample (per_token False in eval_details) is labelled
    as the per-sequence mixture, and the per-token Mixed is preferred as the token table's Mixed."""
    extra = {
        "Mixed (token actions)": ("mixed", "mixed", "token", ACTIONS),
        "Mixed (per token)": ("mixed", "mixed", "token", ACTIONS),
    }
    METHODS.update(extra)
    try:
        results, details = fake_evaluation()
    finally:
        for name in extra:
            METHODS.pop(name)
    details["methods"]["Mixed (token actions)"]["per_token"] = False
    details["methods"]["Mixed (per token)"]["per_token"] = True
    head = token_table(results, details).splitlines()[0]
    assert "| Mixed (per token) |" in head and "Mixed (per token) (Mixed (token actions))" not in head
    assert any("than Mixed (per token)" in v or "beat Mixed (per token)" in v for v in verdicts(results, details))
    del results["Mixed (per token)"], details["methods"]["Mixed (per token)"]
    assert "Mixed (per sequence) (Mixed (token actions))" in token_table(results, details).splitlines()[0]


def test_report_rough_edges_one_seed_relative_gains_html_and_identical_rows():
    results, details = fake_evaluation({"Seq w/ budget": 0.0}, seeds=1)
    best_index = ACTIONS.index("T=1")
    for name in ("Seq w/ budget",):  # an argmax sequence adapter that picks Best's action everywhere
        details["sequence_choices"][name]["actions"] = [[best_index] * 3 for _ in details["problems"]]
        details["per_problem"][name] = details["per_problem"]["Best"]
    text = "\n".join(verdicts(results, details))
    assert "**Seq w/ budget is identical to Best by construction**" in text and "`T=1`" in text
    assert "**Seq w/o budget is identical" not in text  # its choices vary: an ordinary verdict
    assert identical_by_construction(details, "Token w/ budget", "Greedy", ["pass@1"]) == []  # own rows
    assert seed_table(results, details) == ""  # one seed: no spread to show
    assert seed_table(*fake_evaluation(seeds=2)) != ""
    tables = sequence_table(results, details) + token_table(results, details)
    assert "<" not in tables and "%)" not in tables  # plain Markdown headers; no relative gains


def test_identical_by_construction_needs_every_seeds_adapter_to_pick_bests_action():
    results, details = fake_evaluation(seeds=3)
    best_index = ACTIONS.index("T=1")
    choices = details["sequence_choices"]["Seq w/ budget"]
    same = [[best_index] * 3 for _ in details["problems"]]
    choices["actions"] = same
    choices.pop("actions_by_seed", None)  # seed 0 alone cannot speak for three seeds
    assert identical_by_construction(details, "Seq w/ budget", "Best", ["pass@1"]) == []
    other = [[best_index] * 3 for _ in details["problems"]]
    other[0] = [(best_index + 1) % len(ACTIONS)] * 3
    choices["actions_by_seed"] = [same, other, same]  # seed 1 differs on one problem
    assert identical_by_construction(details, "Seq w/ budget", "Best", ["pass@1"]) == []
    choices["actions_by_seed"] = [same, same, same]
    assert identical_by_construction(details, "Seq w/ budget", "Best", ["pass@1"]) == ["T=1"]


def test_best_per_k_row_is_named_at_each_k_and_verdicts_say_which_action():
    results, details = fake_evaluation({"Seq w/ budget": 0.1})
    details["methods"]["Best"]["k_actions"] = {"1": "greedy", "2": "T=1", "4": "T=1"}
    line = best_line(results, details)
    assert "Pass@1 `greedy`" in line and "Pass@4 `T=1`" in line
    seq = [v for v in verdicts(results, details) if v.startswith("- **Seq w/ budget")]
    assert len(seq) == 1 and "(vs `greedy`)" in seq[0] and "(vs `T=1`)" in seq[0]
    details["methods"]["Best"].pop("k_actions")
    assert best_line(results, details) == "Best is one static strategy at every k: `T=1`."


def test_cost_table_and_selection_section(tmp_path):
    results, details = fake_evaluation()
    assert cost_table(details) == ""
    details["cost"] = {"methods": {"Greedy": {"rows": 20, "tokens": 200, "seconds_alone": 1.0, "seconds_share": 0.5},
                                   "Best": {"rows": 60, "tokens": 700, "seconds_alone": 3.0, "seconds_share": 2.5}},
                       "decoded_rows": 80, "decoded_tokens": 900, "decode_seconds": 3.0, "wall_seconds": 3.5}
    table = cost_table(details)
    assert "| Greedy | 20 | 200 | 1.0 | 0.5 |" in table and "| **all (decoded once)** | 80 | 900 | 3.0 | 3.0 |" in table
    assert "## Evaluation cost" in (write_report(tmp_path / "r", results, details) and
                                    (tmp_path / "r" / "report.md").read_text())
    assert selection_section(tmp_path / "none.json", tmp_path) == ""
    actions = tmp_path / "actions" / "actions.json"
    actions.parent.mkdir()
    actions.write_text(json.dumps({
        "names": ["T=1", "greedy"], "pool": 4, "pool_coverage": 0.8, "saturation": 3,
        "coverage_curve": {"names": ["T=1", "greedy", "T=0.5", "T=1.25"], "coverage": [0.5, 0.7, 0.8, 0.8]},
        "selection_data": {"problems": 64, "split": "validation", "samples": 4},
        "best_per_k": {"k_values": [1, 8], "best": {"1": "greedy", "8": "T=1"},
                       "scores": {"T=1": [0.4, 0.9], "greedy": [0.5, 0.5]}, "extrapolated": [8]},
    }))
    text = selection_section(actions, tmp_path / "report")
    assert "| coverage F | 0.500 | 0.700 | 0.800 | 0.800 |" in text
    assert "reaches it at K = 3: from K = 4 on no candidate adds coverage" in text
    assert "| pass@8 (extrapolated) | `T=1` | 90.0 | 50.0 |" in text and "| pass@1 | `greedy` | 50.0 | 50.0 |" in text


def test_verdicts_say_on_how_many_seeds_the_direction_holds_and_judge_the_draft_gate():
    names = ["Greedy to the budget", "Greedy", "Best", "Draft-gated", "Random gate (30%)"]
    # [problem][seed]: the draft gate is ahead of Greedy (stopped) on seeds 0 and 2, behind on 1
    base = {"Greedy to the budget": (0.3,) * 3, "Greedy": (0.5,) * 3, "Best": (0.4,) * 3,
            "Draft-gated": (0.7, 0.45, 0.6), "Random gate (30%)": (0.4,) * 3}
    per_problem = {n: {"pass@1": [[base[n][s] + (0.1 if i % 2 else -0.1) for s in range(3)] for i in range(30)]}
                   for n in names}
    results = {n: {"pass@1": {"mean": sum(base[n]) / 3, "ci_low": 0.0, "ci_high": 1.0}} for n in names}
    methods = {"Greedy to the budget": {"kind": "greedy", "role": "greedy to the budget"},
               "Greedy": {"kind": "greedy", "role": "greedy"}, "Best": {"kind": "static", "role": "best"},
               "Draft-gated": {"kind": "draft", "role": "draft-gated"},
               "Random gate (30%)": {"kind": "draft", "role": "random gate", "family": "fixed rule"}}
    lines = verdicts(results, {"per_problem": per_problem, "methods": methods})
    draft = [v for v in lines if v.startswith("- **Draft-gated")]
    # the strongest static method on the split (Greedy, what keeping every draft scores), then the fixed
    # rules; a fixed rule gets no verdict of its own
    assert [v.split("**")[1].split(" ")[-1] for v in draft] == ["Greedy", "Best", "(30%)"]
    assert "beats Greedy" in draft[0]
    # with the t-interval over the three seeds: mean 8.33, sd 12.58, t_2 = 4.3027 -> half-width 31.26
    assert "per seed +20.0 / -5.0 / +10.0 (over seeds +8.3 [-22.9, +39.6]): holds on 2 of 3 seeds" in draft[0]
    assert "holds on every seed (3 of 3)" in draft[1]
    assert not any(v.startswith("- **Random gate") for v in lines)
