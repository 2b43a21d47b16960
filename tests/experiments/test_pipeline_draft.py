"""The pipeline's draft-gated stage on the tiny model: tables built once beside the run, the
adapter trained from the study's sequence settings, a finished run skipped."""

from dataclasses import replace

from decoding_adapters.experiments.pipeline import train_draft
from decoding_adapters.experiments.study_config import StudyConfig
from decoding_adapters.policies.networks import load_adapter
from decoding_adapters.tasks import get_task


def test_train_draft_stage(tmp_path, tiny_lm):
    base = StudyConfig(token_budget=4, seeds=1)
    cfg = replace(base, sequence=replace(base.sequence, steps=2, prompts_per_step=2, val_every=2, val_problems=3,
                                         max_train_prompts=4, parallel_budgets=(1, 2)))
    out = tmp_path / "draft-s0"
    train_draft(tiny_lm, get_task("arithmetic"), cfg, "math-token", out, 0, table_samples=1)
    _, config = load_adapter(out)
    assert config.kind == "draft" and config.training["prior_action"] == 0 and config.parallel_budgets == [1, 2]
    assert (tmp_path / "draft-table-train.jsonl").is_file() and (tmp_path / "draft-table-validation.jsonl").is_file()
    stamp = (out / "adapter.safetensors").stat().st_mtime_ns
    train_draft(tiny_lm, get_task("arithmetic"), cfg, "math-token", out, 0, table_samples=1)
    assert (out / "adapter.safetensors").stat().st_mtime_ns == stamp  # finished: skipped
