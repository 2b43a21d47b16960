"""The token adapter's vLLM processor without vLLM: fed the hidden states and logits of our own LM
step by step, as the registered model class and vLLM's V1 runner would, it reproduces the loop's
actions and tokens for the same adapter and row seeds, and leaves plain requests alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from adapter_helpers import make_adapter
from conftest import make_tiny_lm
from decoding_adapters.decoding.actions import ActionSet
from decoding_adapters.decoding.loop import decode, row_seed
from decoding_adapters.policies.networks import TokenPolicyChooser, load_adapter
from decoding_adapters.serving.integrations import vllm_model
from decoding_adapters.serving.integrations.vllm_model import EXTRA_ARGS_KEY, TokenAdapterLogitsProcessor

BUDGET = 8


def _params(options=None):
    return SimpleNamespace(extra_args={} if options is None else {EXTRA_ARGS_KEY: options}, max_tokens=BUDGET)


@torch.inference_mode()
def test_processor_reproduces_the_loop_with_its_row_seeds(tmp_path):
    lm = make_tiny_lm()
    path = str(make_adapter(tmp_path / "tok", lm, "token"))
    policy, config = load_adapter(path)
    prompts = lm.encode_chat([[{"role": "user", "content": c}] for c in ("1+1", "what is 2+3", "hi")])
    seeds = [row_seed(0, i) for i in range(len(prompts))]
    ours = decode(lm, prompts, ActionSet(config.action_list), chooser=TokenPolicyChooser(policy.eval()),
                  token_budget=BUDGET, row_seeds=seeds, stop_token_ids=[])

    processor = TokenAdapterLogitsProcessor(None, torch.device("cpu"), False)
    outputs: list[list[int]] = [[] for _ in range(len(prompts) + 1)]
    added = [(i, _params({"path": path, "seed": seeds[i]}), prompts[i], outputs[i]) for i in range(len(prompts))]
    added.append((len(prompts), _params(), prompts[0], outputs[-1]))  # a plain request in the same batch
    processor.update_state(SimpleNamespace(removed=[], moved=[], added=added))
    processor.trace = []
    fan_out = torch.tensor([0, 1, 2, 0])
    hidden, logits, state = lm.start_decode(prompts, fan_out, BUDGET)
    for _ in range(BUDGET):
        vllm_model._HIDDEN["last"] = hidden  # what the model class's compute_logits keeps
        out = processor.apply(logits.clone())
        assert torch.equal(out[-1], logits[-1])  # the plain row is untouched
        assert bool(torch.isinf(out[:-1]).sum(-1).eq(out.shape[-1] - 1).all())  # adapter rows: one-hot
        tokens = out.argmax(-1)
        for row, token in zip(outputs, tokens.tolist()):
            row.append(token)
        hidden, logits = state.step(tokens)
    assert torch.equal(torch.tensor(outputs[:-1]), ours.tokens)
    actions = {(s, entry["t"]): a for entry in processor.trace for s, a in zip(entry["seeds"], entry["actions"])}
    assert [[actions[(s, t)] for t in range(BUDGET)] for s in seeds] == ours.actions.tolist()
    assert len(set(actions.values())) > 1


def test_processor_needs_the_model_class_and_the_v1_runner(tmp_path):
    lm = make_tiny_lm()
    path = str(make_adapter(tmp_path / "tok", lm, "token"))
    processor = TokenAdapterLogitsProcessor(None, torch.device("cpu"), False)
    processor.update_state(SimpleNamespace(removed=[], moved=[], added=[(0, _params({"path": path}), [1], [])]))
    vllm_model._HIDDEN.clear()
    with pytest.raises(RuntimeError, match="DecodingAdapterLlamaForCausalLM"):
        processor.apply(torch.zeros(1, 10))
    with pytest.raises(RuntimeError, match="V1 model runner"):
        TokenAdapterLogitsProcessor(None, SimpleNamespace(device="cpu"))
    with pytest.raises(ValueError, match="unknown keys"):
        TokenAdapterLogitsProcessor.validate_params(_params({"path": path, "temperature": 1}))
    with pytest.raises(ValueError, match="no adapter.json"):
        TokenAdapterLogitsProcessor.validate_params(_params({"path": str(tmp_path / "missing")}))
