"""Sequence-level rollouts through a real vLLM engine (``--backend vllm``): pass rates per action
agree with the hf backend within sampling error, and ``select-actions`` / ``train-sequence`` run end
to end on it at a tiny size."""

from __future__ import annotations

import json
import math

import pytest
import torch

from decoding_adapters.decoding.actions import ActionSet, DecodingAction
from decoding_adapters.decoding.loop import row_seed
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest, encode_problems, score_rows
from decoding_adapters.decoding.vllm_rollouts import VLLMRollouts
from vllm_lane.lane_helpers import report

pytestmark = pytest.mark.vllm

PROBLEMS, SAMPLES, BUDGET = 12, 4, 24
ACTIONS = ActionSet([DecodingAction(do_sample=False), DecodingAction(temperature=0.5, top_k=10),
                     DecodingAction(temperature=1.25, top_p=0.9)])


def test_pass_rates_per_action_agree_with_the_hf_backend(engine, frozen_lm, arithmetic, vllm_spec, vllm_config,
                                                          capsys):
    problems = arithmetic.load("validation")[:PROBLEMS]
    prompts, _ = encode_problems(frozen_lm, arithmetic, problems)
    rows = [(p, a, s) for a in range(len(ACTIONS)) for p in range(PROBLEMS)
            for s in range(1 if ACTIONS.actions[a].is_greedy else SAMPLES)]
    request = RolloutRequest(prompts, [p for p, _, _ in rows], [row_seed(0, p, s) for p, _, s in rows], BUDGET,
                             [a for _, a, _ in rows])
    rewards = {}
    for name, backend in (("hf", HFRollouts(frozen_lm, ACTIONS)),
                          ("vllm", VLLMRollouts(vllm_spec, ACTIONS, frozen_lm.tokenizer, config=vllm_config))):
        rewards[name] = score_rows(arithmetic, problems, backend.run(request))
    actions_of_row = torch.tensor(request.row_actions)
    for a, action in enumerate(ACTIONS.actions):
        hf, vl = rewards["hf"][actions_of_row == a], rewards["vllm"][actions_of_row == a]
        n = len(hf)
        pooled = float(torch.cat([hf, vl]).mean())
        # Two-proportion z on the same problems: the problems' own spread cancels in the difference,
        # so the unpaired standard error is conservative.
        se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * 2 / n)
        z = (float(vl.mean()) - float(hf.mean())) / se
        report(capsys, f"pass rate {action.name}: hf {float(hf.mean()):.3f}, vllm {float(vl.mean()):.3f} "
                       f"({n} rows each, z = {z:+.2f})")
        assert abs(z) < 3.5, (action.name, float(hf.mean()), float(vl.mean()))
        if action.is_greedy:  # greedy rows are token-identical (test_vllm_engine_parity): so are their rewards
            assert abs(float(vl.mean()) - float(hf.mean())) <= 2 / n
    # A test that can fail: the actions themselves differ (greedy beats T = 1.25 on both backends).
    assert rewards["vllm"][actions_of_row == 0].mean() > rewards["vllm"][actions_of_row == 2].mean()


def _cli(*argv: str) -> None:
    from decoding_adapters.cli import main

    assert main(list(argv)) == 0


def test_select_actions_and_train_sequence_run_on_the_vllm_backend(engine, tmp_path, capsys):
    common = ("--backend", "vllm", "--dtype", "float32", "--token-budget", "16", "--task", "arithmetic")
    _cli("select-actions", *common, "--pool", "mix", "--k", "2", "--samples", "2", "--max-problems", "6",
         "--out", str(tmp_path / "actions"))
    chosen = json.loads((tmp_path / "actions" / "actions.json").read_text())
    assert len(chosen["actions"] if isinstance(chosen, dict) else chosen) == 2
    _cli("train-sequence", *common, "--actions", str(tmp_path / "actions" / "actions.json"), "--steps", "2",
         "--prompts-per-step", "4", "--max-train-prompts", "8", "--val-problems", "4", "--out", str(tmp_path / "seq"))
    assert (tmp_path / "seq" / "adapter.json").is_file()
    report(capsys, "select-actions and train-sequence ran end to end on --backend vllm")
