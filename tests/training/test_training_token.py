"""Token trainer: a synthetic POMDP (no LLM) where the best action depends on the observation;
loss invariance to micro-batching; masked steps carry no gradient; parameters change."""

from types import SimpleNamespace

import pytest
import torch

from conftest import FakeLM
from decoding_adapters.decoding.actions import ActionSet, DecodingAction
from decoding_adapters.decoding.loop import DecodeResult, StepFeatures
from decoding_adapters.decoding.rollouts import Rollouts
from decoding_adapters.lm.protocols import LanguageModel, VerifiableTask
from decoding_adapters.policies.networks import TokenPolicyChooser, load_adapter
from decoding_adapters.tasks import Problem
from decoding_adapters.training.common import epoch_prompt_batch
from decoding_adapters.training.token import (
    PROBE_ROUND_FACTOR,
    TokenBatch,
    TokenTrainConfig,
    TokenTrainer,
    rollout_batch_from_result,
    token_loss,
)
from helpers import killed_at_step

H, T = 6, 5
ACTIONS = ActionSet([DecodingAction(do_sample=False), DecodingAction(temperature=0.5), DecodingAction(temperature=1.0)])


class FakeTask:
    name = "pomdp"

    def load(self, split):
        return [Problem(id=f"{split}{i}", question=f"q {split} {i}", answer="a") for i in range(32)]

    def prompt(self, problem, cot=False):
        return [{"role": "user", "content": problem.question}]

    def reward(self, problem, completion):
        return float(completion == "1")

    def reward_batch(self, problems, completions):
        return [self.reward(p, c) for p, c in zip(problems, completions)]

    def extract_answer(self, problem, completion):
        return completion.strip()


def test_fakes_follow_the_protocols():
    assert isinstance(FakeLM(H), LanguageModel) and isinstance(FakeTask(), VerifiableTask)


class PomdpRollouts(Rollouts):
    """Each step shows an observation h; action 2 is right when h[0] > h[1], else action 0 (a
    comparison the policy's input LayerNorm preserves); the terminal reward is 1 with probability (fraction of right
    actions)^2. Every third step is near-deterministic (max-prob 0.99) and does not matter."""

    action_set = ACTIONS

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        n = request.num_rows
        gens = [torch.Generator().manual_seed(s % (2**62)) for s in request.row_seeds]
        seeds = torch.tensor(request.row_seeds, dtype=torch.long)
        feats = torch.stack([torch.randn(T, H, generator=g) for g in gens])  # [n, T, H]
        max_prob = torch.tensor([0.5 if t % 3 else 0.99 for t in range(T)]).expand(n, T).clone()
        entropy = torch.ones(n, T)
        actions = torch.zeros(n, T, dtype=torch.long)
        for t in range(T):
            u = torch.stack([torch.rand(1, generator=g)[0] for g in gens])
            f = StepFeatures(
                feats[:, t], entropy[:, t], max_prob[:, t], t, torch.full((n,), T - t), torch.arange(n), u, seeds
            )
            actions[:, t] = chooser(f)
        right = torch.where(feats[..., 0] > feats[..., 1], 2, 0)
        matters = max_prob < 0.95
        frac = ((actions == right) & matters).sum(1).float() / matters.sum(1)
        win = torch.stack([torch.rand(1, generator=g)[0] for g in gens]) < frac ** 2
        return DecodeResult(
            prompt_of_row=torch.tensor(request.prompt_of_row), tokens=torch.zeros(n, T, dtype=torch.long),
            lengths=torch.full((n,), T), actions=actions, entropy=entropy, max_prob=max_prob,
            stopped_at_eos=torch.zeros(n, dtype=torch.bool), texts=["1" if w else "0" for w in win.tolist()],
            token_budgets=torch.full((n,), T), features=feats if record_features else None, prompts=request.prompts,
        )


def make_trainer(tmp_path, **overrides):
    params = dict(token_budget=T, steps=40, prompts_per_step=8, group_size=4, lr=1e-2, lr_decay=1.0, entropy_coef=0.001,
                  filter_samples=0, val_every=1000, val_problems=8, checkpoint_every=1000, policy_width=32, dropout=0.0)
    params.update(overrides)
    return TokenTrainer(TokenTrainConfig(**params), FakeLM(H), FakeTask(), PomdpRollouts(), tmp_path, progress=False)


def accuracy_on_observations(policy) -> float:
    obs = torch.randn(400, H, generator=torch.Generator().manual_seed(5))
    right = torch.where(obs[:, 0] > obs[:, 1], 2, 0)
    f = StepFeatures(
        obs, torch.ones(400), torch.full((400,), 0.5), 0, torch.full((400,), T), torch.arange(400), torch.rand(400)
    )
    return float((TokenPolicyChooser(policy.eval(), deterministic=True)(f) == right).float().mean())


def test_learns_the_observation_dependent_action(tmp_path):
    trainer = make_trainer(tmp_path)
    before = accuracy_on_observations(trainer.policy)
    trainer.train()
    assert accuracy_on_observations(trainer.policy) >= 0.9 > before
    log = trainer.log.read()
    assert log[-1]["reward"] > log[1]["reward"]
    assert abs(log[-1]["masked_fraction"] - 2 / 5) < 1e-6  # steps 0 and 3 are near-deterministic
    policy, cfg = load_adapter(tmp_path)
    assert cfg.kind == "token" and cfg.token_budget == T


def _batch(trainer, step=0) -> TokenBatch:
    trainer.prepare()
    batch, _, _ = trainer.rollout(step)
    return batch


def _grads(trainer, batch, micro_batches):
    trainer.policy.train()
    trainer.policy.zero_grad()
    normalizer = batch.num_decisions
    for part in batch.row.unique().chunk(micro_batches):
        loss, _ = token_loss(trainer.policy, batch.select_rows(part), normalizer, 0.01)
        loss.backward()
    return [p.grad.clone() for p in trainer.policy.parameters()]


def test_loss_does_not_depend_on_micro_batching(tmp_path):
    trainer = make_trainer(tmp_path)
    batch = _batch(trainer)
    whole, split = _grads(trainer, batch, 1), _grads(trainer, batch, 3)
    for a, b in zip(whole, split):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_masked_steps_contribute_zero_gradient(tmp_path):
    trainer = make_trainer(tmp_path)
    batch = _batch(trainer)
    reference = _grads(trainer, batch, 1)
    noisy = TokenBatch(
        **{
            **batch.__dict__,
            "advantage": torch.where(batch.decision, batch.advantage, torch.full_like(batch.advantage, 1e6)),
        }
    )
    for a, b in zip(reference, _grads(trainer, noisy, 1)):
        torch.testing.assert_close(a, b)


def test_parameters_change_after_one_step(tmp_path):
    trainer = make_trainer(tmp_path)
    batch = _batch(trainer)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    trainer.update(batch)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))


def test_filtering_drops_prompts_that_always_or_never_pass(tmp_path):
    class Half(FakeTask):
        def reward(self, problem, completion):
            return float(problem.id.endswith(("0", "2", "4")))  # constant per prompt

    trainer = TokenTrainer(
        TokenTrainConfig(token_budget=T, filter_samples=2, group_size=2, dropout=0.0),
        FakeLM(H),
        Half(),
        PomdpRollouts(),
        tmp_path,
        progress=False,
    )
    with pytest.raises(ValueError, match="kept no training prompt"):
        trainer.prepare()


def test_batch_flattening_uses_only_valid_steps():
    result = PomdpRollouts().run(
        SimpleNamespace(num_rows=2, row_seeds=[1, 2], prompt_of_row=[0, 0], prompts=[[1]]),
        lambda f: torch.zeros(len(f.rows), dtype=torch.long),
        record_features=True,
    )
    result.lengths = torch.tensor([2, 5])
    batch = rollout_batch_from_result(result, torch.tensor([1.0, -1.0]), 0.95)
    assert len(batch.actions) == 7 and batch.advantage.tolist() == [1.0] * 2 + [-1.0] * 5
    assert batch.remaining.tolist() == [5, 4, 5, 4, 3, 2, 1]


def test_resume_after_a_kill_loses_at_most_one_checkpoint_interval(tmp_path):
    reference = make_trainer(tmp_path / "ref", steps=6, checkpoint_every=2)
    reference.train()
    killed = make_trainer(tmp_path / "run", steps=6, checkpoint_every=2)
    with killed_at_step(TokenTrainer, 4):  # killed during step 4: steps 1-2 are checkpointed, step 3 is lost
        killed.train()
    resumed = make_trainer(tmp_path / "run", steps=6, checkpoint_every=2)
    resumed.train(resume=True)
    for k, v in reference.policy.state_dict().items():
        torch.testing.assert_close(v, resumed.policy.state_dict()[k])
    assert [r["step"] for r in resumed.log.read()] == [0, 1, 2, 3, 4, 5, 6]


def test_rollout_and_loss_see_the_same_dropped_out_policy(tiny_lm, tiny_prompts):
    """With dropout 0.1 the rollout's chooser and the loss's recomputation use identical masks, so
    the log-prob of each chosen action recomputed by the loss (train mode, with gradients) equals the
    one it was drawn from."""
    from decoding_adapters.decoding.actions import PRESETS
    from decoding_adapters.decoding.loop import decode
    from decoding_adapters.policies.networks import TokenPolicy, TokenPolicyConfig

    torch.manual_seed(0)
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=tiny_lm.hidden_size, num_actions=4, token_budget=6, dropout=0.1))
    seen = {}  # (row seed, step) -> log-prob of the chosen action at rollout time

    class Recording(TokenPolicyChooser):
        def __call__(self, f):
            action = super().__call__(f)
            obs = self.policy.observation(f.hidden.cpu(), f.entropy.cpu(), f.remaining_budget.cpu())
            seeds = f.seeds.cpu()
            with torch.no_grad():
                logp = self.policy.log_probs(obs, dropout_key=(seeds, torch.full_like(seeds, f.step)))
            for seed, lp in zip(seeds.tolist(), logp.gather(1, action.cpu()[:, None])[:, 0].tolist()):
                seen[(seed, f.step)] = lp
            return action

    row_seeds = [11, 12, 13, 14]
    policy.eval()
    result = decode(tiny_lm, tiny_prompts, ActionSet(PRESETS["math-token"]), prompt_of_row=[0, 0, 1, 1],
                    chooser=Recording(policy, training_dropout=True), token_budget=6, row_seeds=row_seeds,
                    record_features=True)
    batch = rollout_batch_from_result(result, torch.ones(4), 1.0, row_seeds)
    policy.train()
    obs = policy.observation(batch.hidden, batch.entropy, batch.remaining)
    recomputed = policy.log_probs(obs, dropout_key=batch.dropout_key(torch.ones_like(batch.decision), "cpu"))
    recomputed = recomputed.gather(1, batch.actions[:, None])[:, 0]
    rollout = torch.tensor([seen[(s, t)] for s, t in zip(batch.seed.tolist(), batch.step.tolist())])
    torch.testing.assert_close(recomputed.detach(), rollout, atol=1e-5, rtol=0)
    assert recomputed.requires_grad
    # the masks matter: without them (eval mode) the log-probs differ, and the token_loss uses them
    policy.eval()
    plain = policy.log_probs(obs).gather(1, batch.actions[:, None])[:, 0]
    assert not torch.allclose(plain.detach(), rollout, atol=1e-4)
    loss_keyed, _ = token_loss(policy, batch, len(batch.actions), 0.0)
    expected = -(recomputed * batch.advantage).sum() / len(batch.actions)
    torch.testing.assert_close(loss_keyed.detach(), expected.detach(), atol=1e-5, rtol=1e-5)


class SplitTask(FakeTask):
    """FakeTask with named splits whose questions are distinct per split (or shared, to overlap)."""

    splits = ("train", "validation", "test")

    def __init__(self, overlap: bool = False):
        self.overlap = overlap

    def check_split(self, split):
        assert split in self.splits

    def split_sources(self):
        return {}

    def load(self, split):
        tag = "train" if self.overlap and split == "test" else split
        return [Problem(id=f"{split}{i}", question=f"{tag} question {i}", answer="a") for i in range(16)]


def test_trainer_start_checks_disjoint_splits_and_the_adapter_records_its_problems(tmp_path):
    """A trainer refuses to start on overlapping splits, and the saved adapter records
    (count, digest, content hashes) of what it was trained on."""
    from decoding_adapters.tasks import problems_record

    bad = TokenTrainer(TokenTrainConfig(token_budget=T, steps=0, filter_samples=0, val_problems=4),
                       FakeLM(H), SplitTask(overlap=True), PomdpRollouts(), tmp_path / "bad", progress=False)
    with pytest.raises(ValueError, match="overlap"):
        bad.prepare()
    cfg = TokenTrainConfig(token_budget=T, steps=0, filter_samples=0, val_problems=4, max_train_prompts=8)
    good = TokenTrainer(cfg, FakeLM(H), SplitTask(), PomdpRollouts(), tmp_path / "good", progress=False)
    good.prepare()
    good.save()
    _, config = load_adapter(tmp_path / "good")
    assert config.trained_on == problems_record(SplitTask().load("train")[:8])
    assert config.trained_on["count"] == 8 and config.selected_on is None
    assert config.seen_hashes == set(config.trained_on["content_hashes"])


def test_prompt_filtering_probes_only_as_many_prompts_as_the_run_can_use(tmp_path):
    probed = []

    class Counting(PomdpRollouts):
        def run(self, request, chooser=None, **kwargs):
            probed.append(len(request.prompts))
            return super().run(request, chooser, **kwargs)

    # 32 training problems on offer: a 1-step run of 2 prompts wants 2, and probes 3 per wanted prompt
    config = TokenTrainConfig(token_budget=T, steps=1, prompts_per_step=2, filter_samples=4, dropout=0.0)
    trainer = TokenTrainer(config, FakeLM(H), FakeTask(), Counting(), tmp_path, progress=False)
    summary = trainer.prepare()
    assert probed[0] == 2 * PROBE_ROUND_FACTOR and summary["wanted"] == 2
    assert summary["train_prompts"] == sum(probed) and summary["distinct_prompts_per_run"] == min(summary["kept"], 2)


def test_prompt_filter_judges_with_the_starting_policy_and_probes_until_enough_survive(tmp_path):
    choosers = []

    class EveryFourth(FakeTask):  # three prompts in four always pass: a round of 12 keeps at most 3
        def reward(self, problem, completion):
            return 1.0 if int(problem.id[len("train"):]) % 4 != 1 else float(completion == "1")

    class Recording(PomdpRollouts):
        def run(self, request, chooser=None, **kwargs):
            choosers.append(chooser)
            return super().run(request, chooser, **kwargs)

    config = TokenTrainConfig(token_budget=T, steps=3, prompts_per_step=2, filter_samples=8, min_train_prompts=6,
                              dropout=0.0, prior_action=0)
    trainer = TokenTrainer(config, FakeLM(H), EveryFourth(), Recording(), tmp_path, progress=False)
    summary = trainer.prepare()
    assert all(isinstance(c, TokenPolicyChooser) and c.policy is trainer.policy and not c.deterministic
               for c in choosers)  # the prior the trainer starts from, sampled as its first rollouts are
    assert len(choosers) >= 2 and summary["kept"] >= 6  # rounds until 6 survive
    assert summary["dropped_all_pass"] >= 3 * summary["train_prompts"] // 4
    assert summary["distinct_prompts_per_run"] == 6


def test_epoch_batches_see_every_kept_prompt():
    seen = [epoch_prompt_batch(300, 8, seed=3, step=s) for s in range(48)]
    assert all(len(set(b)) == 8 for b in seen)
    assert len({i for b in seen for i in b}) == 300  # 384 independent draws would see about 220
    assert seen[5] == epoch_prompt_batch(300, 8, seed=3, step=5) and seen != [epoch_prompt_batch(300, 8, 4, s)
                                                                              for s in range(48)]
    assert sorted(epoch_prompt_batch(5, 8, seed=0, step=2)) == list(range(5))
