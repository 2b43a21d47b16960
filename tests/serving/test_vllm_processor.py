"""The entropy-only adapter as a vLLM logits processor: its decision checked on CPU against our own
chooser (no engine), the processor's slot bookkeeping with stand-ins for vLLM's request state and
batch context, and (marked gpu) the real engine."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet, DecodingAction, transform_logits
from decoding_adapters.decoding.loop import StepFeatures, base_entropy
from decoding_adapters.policies.networks import (
    AdapterConfig,
    TokenPolicy,
    TokenPolicyChooser,
    TokenPolicyConfig,
    save_adapter,
)
from decoding_adapters.serving.integrations.rows import ActionTable
from decoding_adapters.serving.integrations.vllm_processor import (
    EXTRA_ARGS_KEY,
    EntropyAdapterLogitsProcessor,
    entropy_adapter_step,
)

ACTIONS = list(PRESETS["math-token"]) + [DecodingAction(temperature=0.8, top_k=3, top_p=0.9, min_p=0.05)]
VOCAB = 40


def _policy(seed=0, use_budget=True, features="entropy") -> TokenPolicy:
    torch.manual_seed(seed)
    policy = TokenPolicy(
        TokenPolicyConfig(
            hidden_size=16,
            num_actions=len(ACTIONS),
            features=features,
            use_budget=use_budget,
            token_budget=32,
            width=16,
            dropout=0.0,
        )
    )
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(4)  # sharper preferences: the argmax moves with the entropy and the budget
    return policy.eval()


def _logits(rows=64, seed=1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scale = torch.linspace(0.1, 6.0, rows).unsqueeze(-1)  # from flat to peaked: a wide range of entropies
    return torch.randn(rows, VOCAB, generator=g) * scale


@pytest.mark.parametrize("use_budget", [True, False])
def test_decision_matches_our_chooser_and_transforms(use_budget):
    policy, logits = _policy(use_budget=use_budget), _logits()
    remaining = torch.randint(1, 33, (logits.shape[0],), generator=torch.Generator().manual_seed(2))
    uniform = torch.rand(logits.shape[0], generator=torch.Generator().manual_seed(3))
    entropy, max_prob = base_entropy(logits)
    features = StepFeatures(
        torch.zeros(logits.shape[0], 16), entropy, max_prob, 0, remaining, torch.arange(logits.shape[0]), uniform
    )
    table = ActionTable(ACTIONS, "cpu")
    for deterministic, u in ((True, None), (False, uniform)):
        out, action = entropy_adapter_step(logits, policy, table, remaining, u)
        assert torch.equal(action, TokenPolicyChooser(policy, deterministic=deterministic)(features))
        assert len(set(action.tolist())) > 1  # a test that can fail: several actions taken
        params = ActionSet(ACTIONS).params(action)
        ours = transform_logits(logits, params)
        sampled_rows = ~params.greedy
        assert torch.allclose(out[sampled_rows].softmax(-1), ours[sampled_rows].softmax(-1), atol=1e-6)
        greedy_rows = params.greedy
        assert torch.equal(out[greedy_rows].argmax(-1), logits[greedy_rows].argmax(-1))
        assert bool(torch.isinf(out[greedy_rows]).sum(-1).eq(VOCAB - 1).all())  # one-hot
    # NaN uniforms keep the argmax for those rows
    mixed = uniform.clone()
    mixed[::2] = float("nan")
    _, action = entropy_adapter_step(logits, policy, table, remaining, mixed)
    argmax = entropy_adapter_step(logits, policy, table, remaining)[1]
    assert torch.equal(action[::2], argmax[::2])


def test_hidden_state_adapters_are_refused():
    with pytest.raises(ValueError, match="entropy-only"):
        entropy_adapter_step(
            _logits(4), _policy(features="hidden"), ActionTable(ACTIONS, "cpu"), torch.ones(4, dtype=torch.long)
        )


def _save(directory, features="entropy") -> str:
    policy = _policy(features=features)
    config = AdapterConfig(
        kind="token",
        policy=dataclasses.asdict(policy.config),
        actions=[a.to_dict() for a in ACTIONS],
        base_model="tiny",
        base_fingerprint={"hidden_size": 16, "vocab_size": VOCAB},
        token_budget=32,
    )
    save_adapter(directory, policy, config)
    return str(directory)


def _params(path=None, max_tokens=20, **sampling):
    """A stand-in for vllm.SamplingParams with the fields the processor reads (neutral sampling by default)."""
    fields = {"temperature": 1.0, "top_k": -1, "top_p": 1.0, "min_p": 0.0, **sampling}
    return SimpleNamespace(extra_args={} if path is None else {EXTRA_ARGS_KEY: path}, max_tokens=max_tokens, **fields)


def test_processor_transforms_only_adapter_rows_with_the_right_budget(tmp_path):
    path = _save(tmp_path / "ent")
    prompt_len = np.array([5, 7, 3, 9])
    req_states = SimpleNamespace(
        device=torch.device("cpu"), max_num_reqs=4, vocab_size=VOCAB, prompt_len=SimpleNamespace(np=prompt_len)
    )
    proc = EntropyAdapterLogitsProcessor(None, req_states)
    assert proc.add_request(2, _params(path, max_tokens=20)) is True
    assert proc.add_request(0, _params(None)) is False  # plain request: declined, untouched
    assert proc.add_request(3, _params({"path": path, "deterministic": False, "seed": 5}, max_tokens=10)) is True

    logits = _logits(3, seed=7)
    slots = np.array([3, 0, 2])  # batch rows -> slots
    pos = torch.tensor([9 + 4 - 1, 6, 3 + 2 - 1])  # slot 3 generated 4 tokens, slot 2 generated 2
    ctx = SimpleNamespace(
        idx_mapping_np=slots, idx_mapping=torch.from_numpy(slots), expanded_idx_mapping=torch.from_numpy(slots), pos=pos
    )
    out = proc.apply(logits.clone(), ctx)

    assert torch.equal(out[1], logits[1])
    policy, table = proc.adapters[path].policy, proc.adapters[path].table
    expected_det, _ = entropy_adapter_step(logits[2:3], policy, table, torch.tensor([20 - 2]))
    assert torch.equal(out[2], expected_det[0])
    u = torch.rand((), generator=torch.Generator().manual_seed(5)).reshape(1)
    expected_sampled, _ = entropy_adapter_step(logits[0:1], policy, table, torch.tensor([10 - 4]), u)
    assert torch.equal(out[0], expected_sampled[0])
    # Built for model runner V2, the V1 calls (apply without a context) change nothing
    proc.update_state(None)
    assert torch.equal(proc.apply(logits.clone()), logits)
    # a recycled slot forgets its previous occupant
    assert proc.add_request(2, _params(None)) is False and proc.slot_adapter[2] is None


def test_v1_runner_bookkeeping_follows_added_removed_and_moved_rows(tmp_path):
    """The V1 runner's interface: rows by batch index, t = the length of the live output list."""
    path = _save(tmp_path / "ent")
    proc = EntropyAdapterLogitsProcessor(None, torch.device("cpu"), False)
    assert proc.v1
    outputs = {"det": [11, 12], "plain": [3], "sampled": [4, 5, 6, 7]}
    update = SimpleNamespace(removed=[], moved=[], added=[
        (0, _params(path, max_tokens=20), [1, 2], outputs["det"]),
        (1, _params(None), [1], outputs["plain"]),
        (2, _params({"path": path, "deterministic": False, "seed": 5}, max_tokens=10), [1, 2, 3], outputs["sampled"]),
    ])
    proc.update_state(update)
    proc.trace = []
    logits = _logits(3, seed=7)
    out = proc.apply(logits.clone())
    policy, table = proc.adapters[path].policy, proc.adapters[path].table
    assert torch.equal(out[1], logits[1])  # a plain request is left alone
    assert torch.equal(out[0], entropy_adapter_step(logits[0:1], policy, table, torch.tensor([20 - 2]))[0][0])
    u = torch.rand((), generator=torch.Generator().manual_seed(5)).reshape(1)
    assert torch.equal(out[2], entropy_adapter_step(logits[2:3], policy, table, torch.tensor([10 - 4]), u)[0][0])
    assert proc.trace[0]["generated"] == [2, 4] and proc.trace[0]["remaining"].tolist() == [18, 6]
    # The live lists grow; rows are swapped, removed and moved as vLLM reports them.
    outputs["det"].append(13)
    swap = SimpleNamespace(name="SWAP")
    proc.update_state(SimpleNamespace(removed=[1], added=[], moved=[(0, 2, swap)]))
    assert proc.v1_rows[0].budget == 10 and proc.v1_rows[2].budget == 20 and 1 not in proc.v1_rows
    proc.update_state(SimpleNamespace(removed=[], added=[], moved=[(2, 1, SimpleNamespace(name="UNIDIRECTIONAL"))]))
    assert sorted(proc.v1_rows) == [0, 1] and proc.v1_rows[1].budget == 20
    proc.trace = []
    logits = _logits(2, seed=8)
    out = proc.apply(logits.clone())
    assert torch.equal(out[1], entropy_adapter_step(logits[1:2], policy, table, torch.tensor([20 - 3]))[0][0])
    assert proc.trace[0]["generated"] == [4, 3]
    # A plain request added at an adapter row's index replaces it.
    proc.update_state(SimpleNamespace(removed=[], added=[(0, _params(None), [1], [])], moved=[]))
    assert sorted(proc.v1_rows) == [1]


def test_validate_params_at_admission(tmp_path):
    good = _save(tmp_path / "ent")
    EntropyAdapterLogitsProcessor.validate_params(_params(good))
    EntropyAdapterLogitsProcessor.validate_params(_params(None))  # not ours: nothing to check
    with pytest.raises(ValueError, match="entropy-only"):
        EntropyAdapterLogitsProcessor.validate_params(_params(_save(tmp_path / "hid", features="hidden")))
    with pytest.raises(ValueError, match="temperature=1.0"):
        EntropyAdapterLogitsProcessor.validate_params(_params(good, temperature=0.7))
    with pytest.raises(ValueError, match="no adapter.json"):
        EntropyAdapterLogitsProcessor.validate_params(_params(str(tmp_path / "missing")))
    with pytest.raises(ValueError, match="unknown keys"):
        EntropyAdapterLogitsProcessor.validate_params(_params({"path": good, "temp": 1}))


def test_entry_point_is_declared_and_resolves():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    target = pyproject["project"]["entry-points"]["vllm.logits_processors"]["decoding_adapter_entropy"]
    module, _, name = target.partition(":")
    assert getattr(__import__(module, fromlist=[name]), name) is EntropyAdapterLogitsProcessor


@pytest.mark.gpu
def test_vllm_engine_runs_the_entropy_adapter_forced_greedy(tmp_path, tiny_model_dir):
    """Real engine: an entropy adapter forced to greedy reproduces vLLM's own greedy tokens."""
    vllm = pytest.importorskip("vllm")
    from decoding_adapters.serving.integrations.vllm_processor import vllm_processor_available

    if not vllm_processor_available() or not torch.cuda.is_available():
        pytest.skip("needs CUDA and vLLM with the model runner V2 logits-processor interface")
    policy = _policy()
    with torch.no_grad():
        last = policy.mlp[-1]
        last.weight.zero_()
        last.bias.fill_(-20.0)
        last.bias[0] = 20.0  # action 0 = greedy
    config = AdapterConfig(
        kind="token",
        policy=dataclasses.asdict(policy.config),
        actions=[a.to_dict() for a in ACTIONS],
        base_model=str(tiny_model_dir),
        base_fingerprint={},
        token_budget=32,
    )
    save_adapter(tmp_path / "greedy", policy, config)
    llm = vllm.LLM(
        model=str(tiny_model_dir),
        logits_processors=[EntropyAdapterLogitsProcessor],
        gpu_memory_utilization=0.3,
        enforce_eager=True,
    )
    prompts = [{"prompt_token_ids": [2, 10 + i, 20 + i, 30]} for i in range(4)]
    ref = llm.generate(prompts, vllm.SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    out = llm.generate(
        prompts,
        vllm.SamplingParams(
            max_tokens=8, ignore_eos=True, seed=0, extra_args={EXTRA_ARGS_KEY: str(tmp_path / "greedy")}
        ),
    )
    assert [o.outputs[0].token_ids for o in out] == [o.outputs[0].token_ids for o in ref]
