"""The model card written beside adapter.json."""

from __future__ import annotations

import dataclasses
import json

from decoding_adapters.decoding.actions import PRESETS
from decoding_adapters.policies.model_card import render_model_card
from decoding_adapters.policies.networks import (
    AdapterConfig,
    TokenPolicy,
    TokenPolicyConfig,
    add_evaluation,
    load_adapter,
    save_adapter,
)

RESULTS = {
    "Greedy": {
        "pass@1": {"mean": 0.125, "ci_low": 0.05, "ci_high": 0.2},
        "mean_length": {"mean": 14.5, "ci_low": 14.0, "ci_high": 15.0},
    },
    "Token w/ budget": {"pass@1": {"mean": 0.25, "ci_low": 0.125, "ci_high": 0.375}},
}


def _saved(tmp_path, training=None):
    actions = PRESETS["math-token"]
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=8, num_actions=len(actions), token_budget=32, width=8))
    config = AdapterConfig(
        kind="token",
        policy=dataclasses.asdict(policy.config),
        actions=[a.to_dict() for a in actions],
        base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        base_fingerprint={"hidden_size": 8, "vocab_size": 99},
        token_budget=32,
        task="gsm8k",
        training=training or {"steps": 40, "lr": 0.001, "seed": 3},
    )
    return save_adapter(tmp_path / "tok-gsm8k", policy, config), config


def test_save_adapter_writes_a_model_card_and_the_adapter_still_loads(tmp_path):
    directory, config = _saved(tmp_path)
    card = (directory / "README.md").read_text()
    assert card.startswith("---\n") and "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card
    assert "# Decoding adapter `tok-gsm8k`" in card and "token-level decoding adapter" in card
    assert "| task | gsm8k |" in card and "remaining token budget b_t (b = 32)" in card
    for a in PRESETS["math-token"]:
        assert f"| {a.name} |" in card
    assert "| steps | 40 |" in card and "| lr | 0.001 |" in card
    assert "## Evaluation" not in card  # no results yet
    assert "adapter.logits_processor(model, tokenizer=tok" in card
    assert "from_pretrained(adapter.base_model_path)" in card
    load_adapter(directory)  # the card does not disturb loading
    assert sorted(p.name for p in directory.iterdir()) == ["README.md", "adapter.json", "adapter.safetensors"]


def test_evaluation_table_from_results(tmp_path):
    directory, config = _saved(tmp_path)
    add_evaluation(directory, RESULTS)
    card = (directory / "README.md").read_text()
    assert "## Evaluation" in card and "| method | pass@1 (%) | mean_length |" in card
    assert "| Greedy | 12.50 ± 7.50 | 14.50 ± 0.50 |" in card
    assert "| Token w/ budget | 25.00 ± 12.50 | — |" in card
    # results.json found in the adapter directory is picked up by a plain save too
    (directory / "results.json").write_text(json.dumps(RESULTS))
    policy, config = load_adapter(directory)
    save_adapter(directory, policy, config)
    assert "| Greedy | 12.50 ± 7.50 |" in (directory / "README.md").read_text()


def test_local_base_model_is_not_claimed_as_a_hub_id(tmp_path):
    _, config = _saved(tmp_path)
    card = render_model_card(dataclasses.replace(config, base_model="smollm2", kind="token"), "x")
    assert "base_model:" not in card and "`smollm2`" in card


def _code_blocks(markdown: str, language: str) -> list[str]:
    import re

    return re.findall(rf"^```{language}\n(.*?)^```", markdown, flags=re.S | re.M)


def test_the_cards_python_usage_runs_as_written(tmp_path, tiny_lm, monkeypatch):
    from adapter_helpers import make_adapter, save_tiny_base

    base = save_tiny_base(tiny_lm, tmp_path / "base")
    for kind in ("token", "sequence"):
        directory = make_adapter(tmp_path / f"tiny-{kind}", tiny_lm, kind, base_model=str(base))
        blocks = _code_blocks((directory / "README.md").read_text(), "python")
        assert len(blocks) == 1 and 'from_pretrained("<' not in blocks[0]
        if kind == "sequence":  # generation_config runs; sampling_params needs vLLM: its line is left out
            blocks = ["\n".join(line for line in blocks[0].splitlines() if "sampling_params" not in line)]
        monkeypatch.chdir(tmp_path)  # the card names the adapter by its directory, relative to its parent
        scope: dict = {}
        exec(compile(blocks[0], str(directory / "README.md"), "exec"), scope)
        if kind == "token":
            assert scope["adapter"].base_model_path == str(base) and scope["out"].shape[0] == 1
        else:
            assert len(scope["configs"]) == 1


def test_the_card_shows_the_interval_the_report_shows(tmp_path):
    from decoding_adapters.core.stats import format_interval
    from decoding_adapters.reporting.report import all_methods_table

    clipped = {"Greedy": {"pass@1": {"mean": 0.125, "ci_low": 0.0, "ci_high": 0.4206}}}  # clipped at 0
    directory, _ = _saved(tmp_path)
    (directory / "results.json").write_text(json.dumps(clipped))
    card = add_evaluation(directory, directory / "results.json").read_text()
    shown = format_interval(12.5, 0.0, 42.06)
    assert shown == "12.50 [0.00, 42.06]"
    assert f"| Greedy | {shown} |" in card and shown in all_methods_table(clipped) and "±" not in shown


def _eval_dir(root, task, split, problems, results):
    root.mkdir(parents=True)
    (root / "results.json").write_text(json.dumps(results))
    details = {"config": {"task": task, "split": split, "seeds": 2, "token_budget": 32},
               "problems": [f"p{i}" for i in range(problems)]}
    (root / "eval_details.json").write_text(json.dumps(details))
    return root


def test_evaluations_are_kept_per_task_and_split_each_labelled_with_its_size(tmp_path):
    directory, _ = _saved(tmp_path)
    arithmetic = _eval_dir(tmp_path / "eval", "arithmetic", "test", 200, RESULTS)
    ood = _eval_dir(tmp_path / "eval-ood", "pyfunc", "ood", 2, {"Greedy": {"pass@1": {"mean": 0.5}}})
    add_evaluation(directory, arithmetic)
    card = add_evaluation(directory, ood).read_text()
    assert "### Task arithmetic, split test (200 problems, 2 seeds, token budget 32)" in card
    assert "### Task pyfunc, split ood (2 problems, 2 seeds, token budget 32)" in card
    assert "| Greedy | 12.50 ± 7.50 | 14.50 ± 0.50 |" in card and "| Greedy | 50.00 |" in card
    # the same task and split again replaces its own table only
    again = _eval_dir(tmp_path / "eval2", "arithmetic", "test", 100, {"Greedy": {"pass@1": {"mean": 0.25}}})
    card = add_evaluation(directory, again).read_text()
    assert "(100 problems" in card and "(200 problems" not in card and "split ood" in card


def test_the_cards_usage_names_the_adapter_by_its_full_path(tmp_path):
    directory, _ = _saved(tmp_path)
    card = (directory / "README.md").read_text()
    assert f'Adapter.from_pretrained("{directory.resolve()}")' in card
