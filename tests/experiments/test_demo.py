"""The demo end to end on the tiny model with the tiny size, and its resume."""

import json

import pytest

from decoding_adapters.cli import main
from decoding_adapters.experiments.presets import SIZES

TINY_RUN = ["--size", "tiny", "--token-budget", "4", "--no-progress"]
"""The tiny size with a 4-token budget: on random weights nothing is solved at any budget, and the
stages' mechanics are what these tests check (a short budget keeps them quick on a busy machine)."""


def test_demo_tiny_end_to_end_and_resume(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import transformers

    loads = []
    load = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def counted(cls, *args, **kwargs):
        loads.append(args[0] if args else kwargs)
        return load(cls, *args, **kwargs)

    # the probe, every stage and the evaluation share the one frozen LM: its weights are read once
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(counted))
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *TINY_RUN, "--model", str(tiny_model_dir)]) == 0
    assert len(loads) == 1, loads
    monkeypatch.undo()
    printed = capsys.readouterr().out
    results = json.loads((out / "eval" / "results.json").read_text())
    expected = {"Greedy", "Best", "Mixed", "Seq w/ budget", "Seq w/o budget", "Token w/ budget", "Token w/o budget",
                "Token entropy-only"}
    assert expected <= set(results)
    assert set(results["Greedy"]) >= {"pass@1", "pass@2", "mean_length"}
    assert (out / "report" / "report.md").is_file()
    assert "demo finished" in printed
    # every stage runs, the draft-gated one and the attempt policy too, and a run where nothing is
    # solved (random weights) says so plainly
    assert "draft-gated adapters" in printed and "Draft-gated" in results
    assert "attempt policy" in printed
    assert "Nothing was solved at this size" in printed
    assert "Check the verifier" not in printed
    first = next(line for line in printed.splitlines() if line.startswith("[demo"))
    assert "loading the frozen LM" in first and "left" not in first  # no plan before the probe
    for seed in range(SIZES["tiny"].seeds):
        assert (out / f"tok-budget-s{seed}" / "adapter.json").is_file()
        assert (out / f"seq-nobudget-s{seed}" / "adapter.json").is_file()
    # both adapters start at the best static action chosen on validation (their prior)
    actions = json.loads((out / "actions" / "actions.json").read_text())
    selected = actions["names"]
    for seed in range(SIZES["tiny"].seeds):
        token = json.loads((out / f"tok-budget-s{seed}" / "adapter.json").read_text())
        assert token["training"]["prior_action"] in range(4)  # an index into the math-token set
        sequence = json.loads((out / f"seq-budget-s{seed}" / "adapter.json").read_text())
        best = actions["best_single_name"]
        expected_prior = selected.index(best) if best in selected else None
        assert sequence["training"]["prior_action"] == expected_prior
        # the w/ budget adapter starts at Best at pass@B for each of its budgets B
        assert len(sequence["training"]["budget_prior_actions"]) == len(sequence["training"]["parallel_budgets"])
    # Best is chosen per pass@k among the whole pool plus greedy, and the report shows the selection
    details = json.loads((out / "eval" / "eval_details.json").read_text())
    assert set(details["methods"]["Best"]["k_actions"]) == {"1", "2"}
    assert set(details["methods"]["Best"]["k_actions"].values()) <= set(actions["best_per_k"]["best"].values())
    assert "## Action selection" in (out / "report" / "report.md").read_text()
    assert "## Head-room captured" in (out / "report" / "report.md").read_text()
    # the fixed rules: tables under the run, every rule's points in the evaluation, their section
    assert (out / "rules" / "validation" / "header.json").is_file() and (out / "rules" / "curves.json").is_file()
    assert any(m.get("family") == "fixed rule" and m.get("curve") for m in details["methods"].values())
    assert any(m.get("role") == "attempt policy" for m in details["methods"].values())  # the headline method
    assert "## Fixed rules" in (out / "report" / "report.md").read_text()
    # a second run reuses every finished stage, the evaluation included
    watched = ("tok-budget-s0/adapter.safetensors", "eval/results.json")
    before = [(out / name).stat().st_mtime for name in watched]
    assert main(["demo", "--out", str(out), *TINY_RUN, "--model", str(tiny_model_dir)]) == 0
    assert [(out / name).stat().st_mtime for name in watched] == before
    assert "over 2 runs into" in capsys.readouterr().out  # a resumed run says what the whole run took
    # a retrained adapter makes the stored evaluation stale: it is decoded again
    (out / "tok-budget-s0" / "adapter.safetensors").touch()
    assert main(["demo", "--out", str(out), *TINY_RUN, "--model", str(tiny_model_dir)]) == 0
    assert (out / "eval" / "results.json").stat().st_mtime > before[1]
    # a run with other options into the same folder is refused: its report would mix two runs
    decoded = (out / "eval" / "results.json").stat().st_mtime
    capsys.readouterr()
    assert main(["demo", "--out", str(out), *TINY_RUN, "--model", str(tiny_model_dir),
                 "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert "holds a run started with other options" in err and "study.seeds: 1 -> 2" in err
    assert (out / "eval" / "results.json").stat().st_mtime == decoded


def test_demo_cuts_its_sizes_to_fit_the_minutes_and_keeps_the_probe_for_resumes(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "demo"
    out.mkdir()
    # the probe a first start recorded (absurdly slow), read back instead of measuring again
    (out / "decode_probe.json").write_text(json.dumps({"tokens_per_second": 0.001}))
    argv = ["demo", "--out", str(out), *TINY_RUN, "--model", str(tiny_model_dir),
            "--seeds", "1", "--token.steps", "4", "--minutes", "1"]
    assert main(argv) == 0
    assert "decode probe 0 tok/s" in capsys.readouterr().out
    recorded = json.loads((out / "study_config.json").read_text())
    assert recorded["token"]["steps"] == 2 and "token-training steps 4 -> 2" in recorded["fit"]
    assert recorded["command"].endswith("--minutes 1")
    assert "Sizes cut to fit 1 minutes" in (out / "report" / "report.md").read_text()
    log = [json.loads(line) for line in (out / "tok-budget-s0" / "train_log.jsonl").read_text().splitlines()]
    assert max(record.get("step", 0) for record in log) == 2


def test_demo_refuses_negative_minutes(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "demo"), "--minutes", "-1", "--plan"]) == 2
    assert "--minutes must be >= 0" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()


def test_the_plan_and_the_run_time_the_same_decode_probe(tiny_model_dir, tmp_path, monkeypatch):
    """`demo --plan` and `demo` measure through one call on the study's own task, so on one machine
    they time the same request (prompts, rows, tokens) and read the same figure."""
    import decoding_adapters.cli.study  # noqa: F401  (imported before the patch, as in a long-lived process)
    from decoding_adapters.experiments import probe as probing

    class Probed(Exception):
        pass

    seen = []

    def probe(lm, task):
        seen.append([p.question for p in task.load("validation")[: probing.PROBE_ROWS // 2]])
        raise Probed  # the measurement itself is not under test: stop there

    monkeypatch.setattr(probing, "probe_tokens_per_second", probe)
    common = [*TINY_RUN, "--model", str(tiny_model_dir), "--validation-size", "40"]
    with pytest.raises(Probed):
        main(["demo", "--plan", *common])
    with pytest.raises(Probed):
        main(["demo", "--out", str(tmp_path / "demo"), *common])
    assert len(seen) == 2 and seen[0] == seen[1] and len(seen[0]) == probing.PROBE_ROWS // 2
