"""vLLM backend: the action -> SamplingParams mapping and result assembly run anywhere (no vLLM
needed: a stand-in engine); the real-engine tests need vLLM and a CUDA GPU (``pytest -m gpu``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from decoding_adapters.actions import PRESETS, ActionSet, DecodingAction
from decoding_adapters.decoding import row_seed
from decoding_adapters.models import ModelSpec
from decoding_adapters.rollouts import RolloutRequest
from decoding_adapters.vllm_backend import CHOOSER_ERROR, VLLMRollouts, sampling_params_dict

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
            completion = SimpleNamespace(token_ids=tuple(ids), text="x" * len(ids), finish_reason="stop" if stops else "length",
                                         stop_reason=None)
            out.append(SimpleNamespace(outputs=[completion]))
        return out


def _rollouts(llm):
    tok = SimpleNamespace(eos_token_id=EOS)
    return VLLMRollouts(ModelSpec(name_or_path="fake"), ActionSet(PRESETS["mix"]), tok, llm=llm, sampling_params_cls=dict)


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


# ---- the real engine (GPU machines) ------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_setup():
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install -e '.[vllm]')")
    if not torch.cuda.is_available():
        pytest.skip("vLLM tests need a CUDA GPU")
    from decoding_adapters.models import load_frozen_lm
    from decoding_adapters.tasks import get_task

    lm = load_frozen_lm(ModelSpec(device="cuda"))
    task = get_task("arithmetic")
    prompts = lm.encode_chat([task.prompt(p) for p in task.load("validation")[:8]])
    actions = ActionSet(PRESETS["math"] + (DecodingAction(do_sample=False),))
    rollouts = VLLMRollouts(ModelSpec(), actions, lm.tokenizer, dtype="float32", gpu_memory_utilization=0.3,
                            enforce_eager=True)
    yield lm, prompts, actions, rollouts
    rollouts.close()


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
    from decoding_adapters.rollouts import HFRollouts

    lm, prompts, actions, rollouts = vllm_setup
    greedy = len(actions) - 1
    request = _rows(prompts, greedy, samples=1)
    ours, theirs = HFRollouts(lm, actions).run(request), rollouts.run(request)
    prefix = 8  # float32 on both sides; compare a prefix so a late near-tie cannot fail the test
    same = [ours.tokens[i, :prefix].tolist() == theirs.tokens[i, :prefix].tolist() for i in range(request.num_rows)]
    assert sum(same) >= 0.75 * len(same)
