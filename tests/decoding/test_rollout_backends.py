"""The vllm backend's wiring: --gpu-memory-utilization reaches VLLMConfig, and every
action set is checked against vLLM's limits before any engine starts (make_rollouts, evaluate)."""

import argparse

import pytest

from decoding_adapters.cli.common import add_rollout_arguments, build_rollouts
from decoding_adapters.decoding import backends as rollout_backends
from decoding_adapters.decoding.actions import ActionSet, DecodingAction
from decoding_adapters.policies.networks import AdapterConfig, SequencePolicy, SequencePolicyConfig, save_adapter

HOT = DecodingAction(temperature=3.0)  # vLLM >= 0.33 rejects T > 2


class Recorder:
    """Stands in for VLLMRollouts: records what it was built with and starts nothing."""

    built: list = []

    def __init__(self, spec, action_set, tokenizer=None, *, config=None, **kwargs):
        Recorder.built.append((spec, action_set, config))


@pytest.fixture(autouse=True)
def fake_engine(monkeypatch):
    Recorder.built = []
    monkeypatch.setattr(rollout_backends, "VLLMRollouts", Recorder)


def test_gpu_memory_utilization_reaches_the_vllm_config():
    p = argparse.ArgumentParser()
    add_rollout_arguments(p)
    args = p.parse_args(["--backend", "vllm", "--gpu-memory-utilization", "0.3"])
    assert args.gpu_memory_utilization == 0.3
    lm = argparse.Namespace(spec="spec", tokenizer=None)
    build_rollouts(args, lm, ActionSet([DecodingAction(temperature=0.7)]))
    assert Recorder.built[0][2].gpu_memory_utilization == 0.3
    # the default is VLLMConfig's (room for the HF copy of the LM), not vLLM's 0.92
    build_rollouts(p.parse_args(["--backend", "vllm"]), lm, ActionSet([DecodingAction(temperature=0.7)]))
    assert Recorder.built[1][2].gpu_memory_utilization == 0.5
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        build_rollouts(p.parse_args(["--backend", "vllm", "--gpu-memory-utilization", "1.5"]), lm,
                       ActionSet([DecodingAction(temperature=0.7)]))


def test_make_rollouts_refuses_a_vllm_action_set_before_building_anything():
    with pytest.raises(ValueError, match="cannot run this action set"):
        rollout_backends.make_rollouts("vllm", argparse.Namespace(spec="s", tokenizer=None), ActionSet([HOT]))
    assert Recorder.built == []
    rollout_backends.check_backend_actions("hf", [[HOT]])  # the hf backend runs any action


def test_evaluate_checks_every_action_set_before_an_engine_starts(tmp_path, tiny_lm, tiny_model_dir, monkeypatch):
    """An adapter whose actions vLLM refuses fails `evaluate --backend vllm` before Best is chosen
    (which would start an engine) and before anything is decoded."""
    from decoding_adapters import cli
    from decoding_adapters.cli import evaluate as evaluate_cli

    actions = [a.to_dict() for a in (DecodingAction(temperature=0.7), HOT)]
    seq = SequencePolicy(SequencePolicyConfig(embed_dim=tiny_lm.hidden_size, num_actions=2))
    save_adapter(tmp_path / "seq", seq, AdapterConfig("sequence", seq.config.__dict__, actions, "tiny",
                                                       tiny_lm.fingerprint()))
    monkeypatch.setattr(evaluate_cli, "select_best_action", lambda *a, **k: pytest.fail("an engine would start"))
    monkeypatch.setattr(cli, "COMMANDS", {k: v for k, v in cli.COMMANDS.items() if k == "evaluate"})
    code = cli.main(["evaluate", "--model", str(tiny_model_dir), "--task", "arithmetic", "--max-problems", "1",
                     "--adapter", str(tmp_path / "seq"), "--backend", "vllm", "--no-progress",
                     "--out", str(tmp_path / "eval")])
    assert code != 0 and Recorder.built == [] and not (tmp_path / "eval" / "results.json").exists()
