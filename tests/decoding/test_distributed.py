"""Ray backend: rollouts on 2 actors equal in-process HF rollouts token for token; one DDP training
step on 2 Ray Train workers equals one single-process TokenTrainer step (dropout 0).

One local Ray cluster (2 CPUs, no dashboard) serves the whole module and is shut down at its end.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pytest
import torch

ray = pytest.importorskip("ray", reason="the ray backend needs the [ray] extra")

from decoding_adapters.decoding.actions import PRESETS, ActionSet  # noqa: E402
from decoding_adapters.decoding.loop import row_seed  # noqa: E402
from decoding_adapters.decoding.ray_rollouts import RayRollouts  # noqa: E402
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest  # noqa: E402
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm  # noqa: E402
from decoding_adapters.policies.networks import TokenPolicy, TokenPolicyChooser, TokenPolicyConfig, load_adapter  # noqa: E402
from decoding_adapters.tasks import Problem, Task  # noqa: E402
from decoding_adapters.training.ddp import train_token_ddp  # noqa: E402

# Tolerance of DDP parity: the gradient is all-reduced in another summation order, so parameters
# after one Adam step agree to float32 rounding, not bit for bit.
PARITY_ATOL = 1e-5


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ.setdefault("RAY_worker_niceness", "0")  # as distributed.connect does: workers not niced below other jobs
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tiny_lm):
    d = tmp_path_factory.mktemp("tiny-lm")
    tiny_lm.model.save_pretrained(d)
    tiny_lm.tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def loaded_lm(tiny_dir):
    """The tiny LM as every worker sees it: loaded back from its directory."""
    return load_frozen_lm(ModelSpec(name_or_path=str(tiny_dir), dtype="float32"))


def _request(prompts, rows_per_prompt=3, actions=True) -> RolloutRequest:
    rows = [(p, g) for p in range(len(prompts)) for g in range(rows_per_prompt)]
    return RolloutRequest(
        prompts=prompts,
        prompt_of_row=[p for p, _ in rows],
        row_seeds=[row_seed(3, p, g) for p, g in rows],
        token_budget=[6 + (i % 5) for i in range(len(rows))],
        row_actions=[i % len(PRESETS["mix"]) for i in range(len(rows))] if actions else None,
    )


def test_select_rows_reindexes_prompts(tiny_prompts):
    request = _request(tiny_prompts)
    sub = request.subset([7, 1, 10])
    assert sub.prompts == [tiny_prompts[0], tiny_prompts[2], tiny_prompts[3]]
    assert sub.prompt_of_row == [1, 0, 2]
    assert sub.row_seeds == [request.row_seeds[r] for r in (7, 1, 10)]
    assert sub.token_budget == [request.token_budget[r] for r in (7, 1, 10)]


def test_ray_rollouts_equal_hf_rollouts(ray_cluster, tiny_dir, loaded_lm, tiny_prompts):
    aset = ActionSet(PRESETS["mix"])
    policy = TokenPolicy(
        TokenPolicyConfig(
            hidden_size=loaded_lm.hidden_size, num_actions=len(aset), token_budget=10, width=16, dropout=0.0
        )
    ).eval()
    rollouts = RayRollouts(ModelSpec(name_or_path=str(tiny_dir), dtype="float32"), aset, workers=2, batch_rows=4)
    try:
        assert len(rollouts.worker_info) == 2 and all(w["threads"] == 1 for w in rollouts.worker_info)
        hf = HFRollouts(loaded_lm, aset, batch_rows=64)
        static = _request(tiny_prompts)
        a, b = rollouts.run(static), hf.run(static)
        assert torch.equal(a.tokens, b.tokens) and a.texts == b.texts and torch.equal(a.lengths, b.lengths)
        assert torch.equal(a.stopped_at_eos, b.stopped_at_eos) and torch.equal(a.actions, b.actions)

        chosen = _request(tiny_prompts, actions=False)
        a = rollouts.run(chosen, TokenPolicyChooser(policy), record_features=True)
        b = hf.run(chosen, TokenPolicyChooser(policy), record_features=True)
        assert torch.equal(a.tokens, b.tokens) and a.texts == b.texts and torch.equal(a.actions, b.actions)
        assert len(set(a.actions[a.valid_mask()].tolist())) > 1  # the chooser really chose
        torch.testing.assert_close(a.features, b.features)
    finally:
        rollouts.close()
    assert rollouts.actors == []


# ---- DDP training ------------------------------------------------------------------------------


@dataclass
class DigitTask(Task):
    """Reward 1 when the completion contains a digit (about half of the tiny LM's samples do)."""

    name = "digits"
    size: int = 12

    def load(self, split):
        return [Problem(id=f"{split}/{i}", question=f"Say {i}", answer=str(i)) for i in range(self.size)]

    def prompt(self, problem, cot=False):
        return [{"role": "user", "content": problem.question}]

    def reward(self, problem, completion):
        return float(any(c.isdigit() for c in completion))


def _config():
    from decoding_adapters.training.token import TokenTrainConfig

    return TokenTrainConfig(
        token_budget=8,
        steps=1,
        prompts_per_step=4,
        group_size=3,
        lr=1e-2,
        dropout=0.0,
        policy_width=16,
        filter_samples=2,
        filter_min_pass=-1.0,
        filter_max_pass=2.0,
        max_train_prompts=8,
        val_every=1,
        val_problems=4,
        checkpoint_every=1,
        seed=5,
    )


@pytest.mark.slow
def test_ddp_step_matches_single_process(ray_cluster, tiny_dir, loaded_lm, tmp_path):
    from decoding_adapters.core.files import Checkpoint, JsonlLog
    from decoding_adapters.training.common import seed_everything
    from decoding_adapters.training.token import TokenTrainer

    config = _config()
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    out = train_token_ddp(
        config,
        ModelSpec(name_or_path=str(tiny_dir), dtype="float32"),
        DigitTask(),
        tmp_path / "ddp",
        workers=2,
        batch_rows=8,
        progress=False,
    )

    aset = ActionSet(PRESETS[config.actions])
    ref = TokenTrainer(config, loaded_lm, DigitTask(), HFRollouts(loaded_lm, aset, 8), tmp_path / "ref", progress=False)
    initial = {k: v.clone() for k, v in ref.policy.state_dict().items()}
    ref.prepare()
    seed_everything(config.seed, "dropout", 0)
    batch, rewards, _ = ref.rollout(0)
    assert 0 < float(rewards.mean()) < 1 and batch.advantage.abs().sum() > 0  # a real learning signal
    stats = ref.update(batch)

    policy, adapter = load_adapter(out)
    assert adapter.kind == "token"
    for (name, want), got in zip(ref.policy.state_dict().items(), policy.state_dict().values()):
        torch.testing.assert_close(got, want, atol=PARITY_ATOL, rtol=0, msg=name)
    # Adam's first moment after one step is 0.1 x the clipped gradient: compare gradients too.
    ddp_state = Checkpoint(out).load()["optimizer"]["state"]
    for i, state in ref.optimizer.state_dict()["state"].items():
        torch.testing.assert_close(ddp_state[i]["exp_avg"], state["exp_avg"], atol=1e-6, rtol=1e-4)
    assert any(not torch.equal(initial[k], v) for k, v in policy.state_dict().items())  # it did move
    records = JsonlLog(out / "train_log.jsonl").read()
    assert records[0]["event"] == "filter" and records[0]["kept"] == 8
    assert records[-1]["step"] == 1 and abs(records[-1]["reward"] - float(rewards.mean())) < 1e-6
    # The pre-clip gradient norm is scale-sensitive (Adam's first step is not): it checks the x world scaling.
    assert records[-1]["grad_norm"] == pytest.approx(stats["grad_norm"], rel=1e-4)
    assert records[-1]["policy_entropy"] == pytest.approx(stats["policy_entropy"], rel=1e-4)
    assert "val_reward" in records[-1]
