"""vLLM backend: the action -> SamplingParams mapping and result assembly run anywhere (no vLLM
needed: a stand-in engine); the real-engine tests need vLLM and a CUDA GPU (``pytest -m gpu``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import decoding_adapters.decoding.vllm_rollouts as vllm_backend
from decoding_adapters.decoding.actions import (
    PRESETS,
    ActionSet,
    DecodingAction,
    apply_min_p,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    candidate_pool,
)
from decoding_adapters.decoding.loop import row_seed
from decoding_adapters.decoding.rollouts import RolloutRequest
from decoding_adapters.decoding.vllm_rollouts import (
    CHOOSER_ERROR,
    CPU_KV_CACHE_BYTES,
    VLLMConfig,
    VLLMRollouts,
    _default_dtype,
    check_vllm_actions,
    order_sensitive,
    release_engines,
    sampling_params_dict,
    vllm_action_problems,
)
from decoding_adapters.lm.models import ModelSpec

EOS = 1


def test_greedy_maps_to_temperature_zero():
    d = sampling_params_dict(DecodingAction(do_sample=False), 16, seed=3)
    assert d == {"temperature": 0.0, "top_k": -1, "top_p": 1.0, "min_p": 0.0, "max_tokens": 16, "seed": 3, "n": 1}
    assert sampling_params_dict(DecodingAction(temperature=0.0), 4)["temperature"] == 0.0


def test_truncations_map_and_off_values():
    d = sampling_params_dict(DecodingAction(temperature=1.25, top_k=50, top_p=0.9, min_p=0.1), 32, seed=7, n=4)
    assert d == {"temperature": 1.25, "top_k": 50, "top_p": 0.9, "min_p": 0.1, "max_tokens": 32, "seed": 7, "n": 4}
    off = sampling_params_dict(DecodingAction(temperature=0.5), 8)
    assert (off["top_k"], off["top_p"], off["min_p"], off["seed"]) == (-1, 1.0, 0.0, None)
    with pytest.raises(ValueError):
        sampling_params_dict(DecodingAction(), 0)


class FakeLLM:
    """Stand-in for ``vllm.LLM``: row i of a call generates ``[10 + i] * k`` (k from its params),
    stopping at EOS (left out of token_ids, as a check that it is appended) when max_tokens > 3."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, sampling_params, use_tqdm=False):
        self.calls.append((prompts, sampling_params))
        out = []
        for i, p in enumerate(sampling_params):
            stops = p["max_tokens"] > 3
            ids = [10 + i] * (2 if stops else p["max_tokens"])
            completion = SimpleNamespace(token_ids=tuple(ids), text="x" * len(ids),
                                         finish_reason="stop" if stops else "length", stop_reason=None)
            out.append(SimpleNamespace(outputs=[completion]))
        return out


def _rollouts(llm):
    tok = SimpleNamespace(eos_token_id=EOS)
    return VLLMRollouts(ModelSpec(name_or_path="fake"), ActionSet(PRESETS["mix"]), tok, llm=llm,
                        sampling_params_cls=dict)


def test_run_builds_one_request_per_row_and_a_decode_result():
    llm = FakeLLM()
    request = RolloutRequest([[5, 6], [7]], [0, 1, 1], [11, 12, 13], [8, 3, 5], [0, 5, 2])
    result = _rollouts(llm).run(request)
    prompts, params = llm.calls[0]
    assert [p["prompt_token_ids"] for p in prompts] == [[5, 6], [7], [7]]
    assert [p["seed"] for p in params] == [11, 12, 13] and [p["max_tokens"] for p in params] == [8, 3, 5]
    assert params[1]["temperature"] == 0.0 and all(p["stop_token_ids"] == [EOS] for p in params)  # action 5 is greedy
    assert result.tokens.shape == (3, 8)
    assert result.tokens[0, :3].tolist() == [10, 10, EOS] and result.lengths.tolist() == [3, 3, 3]
    assert result.stopped_at_eos.tolist() == [True, False, True]
    assert result.actions[2, :3].tolist() == [2, 2, 2] and result.actions[2, 3] == -1
    assert float(result.entropy.abs().sum()) == 0.0 and result.features is None
    assert result.token_budgets.tolist() == [8, 3, 5] and result.prompt_of_row.tolist() == [0, 1, 1]


def test_chooser_and_features_are_refused_clearly():
    rollouts = _rollouts(FakeLLM())
    request = RolloutRequest([[5]], [0], [1], 4, [0])
    with pytest.raises(ValueError, match="hidden state"):
        rollouts.run(request, chooser=lambda f: torch.zeros(1, dtype=torch.long))
    with pytest.raises(ValueError, match="hidden state"):
        rollouts.run(RolloutRequest([[5]], [0], [1], 4, None))
    with pytest.raises(ValueError, match="record_features"):
        rollouts.run(request, record_features=True)
    assert "logits" in CHOOSER_ERROR


# ---- the backend's limits, checked before any engine starts ------------------------------------

EVERY_ACTION = [a for preset in PRESETS.values() for a in preset] + candidate_pool()


def test_every_preset_and_pool_action_is_within_vllm_limits():
    check_vllm_actions(EVERY_ACTION)
    assert vllm_action_problems(ActionSet(PRESETS["mix"])) == []


def test_actions_vllm_would_refuse_or_alter_are_all_named():
    too_hot, too_cold = DecodingAction(temperature=2.5), DecodingAction(temperature=0.005)
    with pytest.raises(ValueError, match=r"action 1 \(T=2\.5\): vLLM rejects temperature > 2") as err:
        check_vllm_actions([DecodingAction(temperature=2.0), too_hot, too_cold])
    assert "action 2 (T=0.005)" in str(err.value) and "raises temperature 0.005 to 0.01" in str(err.value)
    greedy = DecodingAction(do_sample=False)
    check_vllm_actions([greedy], n=1)
    with pytest.raises(ValueError, match="greedy requests with n = 1 only"):
        check_vllm_actions([greedy], n=4)
    with pytest.raises(ValueError, match="n = 1 only"):
        sampling_params_dict(greedy, 8, n=2)
    with pytest.raises(ValueError, match="rejects temperature"):
        sampling_params_dict(too_hot, 8)


def test_a_refused_action_set_fails_before_any_engine_starts(monkeypatch):
    def no_engine(*args, **kwargs):
        raise AssertionError("an engine was started")

    monkeypatch.setattr(vllm_backend, "shared_engine", no_engine)
    monkeypatch.setattr(vllm_backend, "_import_vllm", no_engine)
    with pytest.raises(ValueError, match="rejects temperature"):
        VLLMRollouts(ModelSpec(name_or_path="fake"), ActionSet([DecodingAction(temperature=3.0)]))


def test_vllm_config_validates_and_builds_engine_arguments():
    kwargs = VLLMConfig().engine_kwargs(ModelSpec(), on_gpu=True)
    assert kwargs == {"gpu_memory_utilization": 0.5, "dtype": "bfloat16", "enable_prefix_caching": True,
                      "enforce_eager": False}
    # The CPU build: an explicit KV cache (else it reserves a share of the machine's memory), eager
    # steps, and the spec's dtype as the HF path resolves it on this CPU.
    kwargs = VLLMConfig().engine_kwargs(ModelSpec(), on_gpu=False)
    assert kwargs["kv_cache_memory_bytes"] == CPU_KV_CACHE_BYTES and kwargs["enforce_eager"] is True
    assert kwargs["enable_chunked_prefill"] is False
    assert kwargs["dtype"] == str(ModelSpec().torch_dtype).removeprefix("torch.")
    assert VLLMConfig().engine_kwargs(ModelSpec(dtype="float32"), on_gpu=False)["dtype"] == "float32"
    explicit = VLLMConfig(enforce_eager=False, kv_cache_memory_bytes=2048).engine_kwargs(ModelSpec(), on_gpu=False)
    assert explicit["enforce_eager"] is False and explicit["kv_cache_memory_bytes"] == 2048
    assert VLLMConfig(dtype="float32", max_model_len=2048).engine_kwargs(ModelSpec())["max_model_len"] == 2048
    for bad in (dict(gpu_memory_utilization=0.0), dict(gpu_memory_utilization=1.5), dict(dtype="int8"),
                dict(max_model_len=0), dict(kv_cache_memory_bytes=0), dict(kv_cache_memory_bytes=True)):
        with pytest.raises(ValueError):
            VLLMConfig(**bad)


def test_one_engine_per_model_is_shared_across_action_sets(monkeypatch):
    started = []

    class FakeEngine:
        def __init__(self, model, tokenizer, **kwargs):
            started.append((model, kwargs))

    monkeypatch.setattr(vllm_backend, "_import_vllm", lambda: SimpleNamespace(LLM=FakeEngine, SamplingParams=dict))
    monkeypatch.setattr(vllm_backend, "locate_model", lambda name: f"/models/{name}")
    release_engines()
    try:
        config = VLLMConfig(gpu_memory_utilization=0.4)
        first = VLLMRollouts(ModelSpec(name_or_path="a"), ActionSet(PRESETS["math"]), config=config)
        second = VLLMRollouts(ModelSpec(name_or_path="a"), ActionSet(PRESETS["mix"]), config=config)
        other = VLLMRollouts(ModelSpec(name_or_path="b"), ActionSet(PRESETS["mix"]), config=config)
        assert first.llm is second.llm and other.llm is not first.llm
        assert [model for model, _ in started] == ["/models/a", "/models/b"]
        assert started[0][1]["gpu_memory_utilization"] == 0.4
        assert started[0][1]["dtype"] == _default_dtype(ModelSpec(), torch.cuda.is_available())
    finally:
        release_engines()


def test_real_sampling_params_accept_every_preset_action():
    vllm = pytest.importorskip("vllm", reason="vLLM is not installed (pip install -e '.[vllm]')")
    for action in EVERY_ACTION:
        params = vllm.SamplingParams(**sampling_params_dict(action, 16, seed=1))
        assert params.max_tokens == 16 and params.seed == 1
        if action.is_greedy:
            assert params.temperature == 0.0
        else:
            assert params.temperature == pytest.approx(action.temperature)
            assert (params.top_p == pytest.approx(action.top_p or 1.0)
                    and params.min_p == pytest.approx(action.min_p or 0.0))


# ---- processor order: ours / HF / vLLM V0 versus vLLM V1 ---------------------------------------


def _kept(logits: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(logits)


def _ours(logits: torch.Tensor, action: DecodingAction) -> torch.Tensor:
    """temperature -> top-k -> top-p -> min-p (ours, HF, vLLM V0)."""
    n = logits.shape[0]
    x = apply_temperature(logits, torch.full((n,), action.temperature))
    x = apply_top_k(x, torch.full((n,), action.top_k or 0, dtype=torch.long))
    x = apply_top_p(x, torch.full((n,), action.top_p or 1.0))
    return apply_min_p(x, torch.full((n,), action.min_p or 0.0))


def _vllm_v1(logits: torch.Tensor, action: DecodingAction) -> torch.Tensor:
    """temperature -> min-p -> top-k -> top-p (vLLM V1's sampler)."""
    n = logits.shape[0]
    x = apply_temperature(logits, torch.full((n,), action.temperature))
    x = apply_min_p(x, torch.full((n,), action.min_p or 0.0))
    x = apply_top_k(x, torch.full((n,), action.top_k or 0, dtype=torch.long))
    return apply_top_p(x, torch.full((n,), action.top_p or 1.0))


def test_min_p_and_top_k_commute():
    gen = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(256, 300, generator=gen)
    top_k = torch.randint(1, 60, (256,), generator=gen)
    min_p = torch.rand(256, generator=gen) * 0.5
    k_then_m = apply_min_p(apply_top_k(logits, top_k), min_p)
    m_then_k = apply_top_k(apply_min_p(logits, min_p), top_k)
    assert torch.equal(_kept(k_then_m), _kept(m_then_k))
    assert (_kept(k_then_m).sum(-1) < top_k).any()  # min-p did bind on some rows: the test has teeth


def test_only_top_p_with_min_p_depends_on_the_order():
    # p = [.5, .2, .15, .1, .05], top_p = 0.8, min_p = 0.25. Ours: top-p keeps 3 tokens (.85 >= .8),
    # min-p keeps all 3. V1: min-p keeps 3 (>= .125), renormalised [.59, .24, .18]; top-p keeps 2.
    logits = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]).log()
    action = DecodingAction(temperature=1.0, top_p=0.8, min_p=0.25)
    assert order_sensitive(action)
    assert _kept(_ours(logits, action)).sum() == 3 and _kept(_vllm_v1(logits, action)).sum() == 2
    # Every preset and pool action that is not order-sensitive keeps the same tokens in both orders.
    logits = 2 * torch.randn(64, 400, generator=torch.Generator().manual_seed(1))
    differs = {}
    for action in EVERY_ACTION:
        if action.is_greedy:
            continue
        differs[action] = not torch.equal(_kept(_ours(logits, action)), _kept(_vllm_v1(logits, action)))
        if not order_sensitive(action):
            assert not differs[action], action.name
    assert any(differs.values())  # some top-p + min-p actions really do differ on these logits
    assert {a for a, d in differs.items() if d} <= {a for a in differs if order_sensitive(a)}


# ---- the real engine (GPU machines) ------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_setup():
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install -e '.[vllm]')")
    if not torch.cuda.is_available():
        pytest.skip("vLLM tests need a CUDA GPU")
    from decoding_adapters.lm.models import load_frozen_lm
    from decoding_adapters.tasks import get_task

    lm = load_frozen_lm(ModelSpec(device="cuda"))
    task = get_task("arithmetic")
    prompts = lm.encode_chat([task.prompt(p) for p in task.load("validation")[:8]])
    actions = ActionSet(PRESETS["math"] + (DecodingAction(do_sample=False),))
    # Prefix caching off: a cached prefix can take another kernel path than a fresh prefill, and
    # the reproducibility test compares two runs of the same rows bit for bit.
    config = VLLMConfig(gpu_memory_utilization=0.3, dtype="float32", enforce_eager=True, enable_prefix_caching=False)
    rollouts = VLLMRollouts(ModelSpec(), actions, lm.tokenizer, config=config)
    yield lm, prompts, actions, rollouts
    rollouts.close()
    release_engines()


def _rows(prompts, action, samples=2):
    rows = [(p, s) for p in range(len(prompts)) for s in range(samples)]
    return RolloutRequest(prompts, [p for p, _ in rows], [row_seed(0, p, s) for p, s in rows], 24, [action] * len(rows))


@pytest.mark.gpu
def test_vllm_rows_are_well_formed_and_reproducible(vllm_setup):
    lm, prompts, actions, rollouts = vllm_setup
    request = _rows(prompts, 0)
    a, b = rollouts.run(request), rollouts.run(request)
    assert torch.equal(a.tokens, b.tokens) and a.texts == b.texts  # same seeds, same rows
    assert (a.lengths >= 1).all() and (a.lengths <= 24).all()
    for i in range(request.num_rows):
        ids = a.tokens[i, : a.lengths[i]].tolist()
        assert lm.tokenizer.decode(ids, skip_special_tokens=True).strip() == a.texts[i].strip()
        assert bool(a.stopped_at_eos[i]) == (ids[-1] in lm.eos_token_ids)


@pytest.mark.gpu
def test_vllm_greedy_agrees_with_hf_greedy(vllm_setup):
    from decoding_adapters.decoding.rollouts import HFRollouts

    lm, prompts, actions, rollouts = vllm_setup
    greedy = len(actions) - 1
    request = _rows(prompts, greedy, samples=1)
    ours, theirs = HFRollouts(lm, actions).run(request), rollouts.run(request)
    prefix = 8  # float32 on both sides; compare a prefix so a late near-tie cannot fail the test
    same = [ours.tokens[i, :prefix].tolist() == theirs.tokens[i, :prefix].tolist() for i in range(request.num_rows)]
    assert sum(same) >= 0.75 * len(same)
