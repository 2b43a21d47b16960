"""GGUF conversion: the converted directory's config.json names the architecture (vLLM 0.10 fails on
``"architectures": null``), tied embeddings are stored under ``model.embed_tokens.weight`` (loaders
that tie the head to the embeddings skip ``lm_head.weight``), and the cache key carries a layout
version so old caches are redone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

import decoding_adapters.lm.locate as locate
import decoding_adapters.lm.models as models


class _TokenizerStub:
    def save_pretrained(self, path) -> None:
        (Path(path) / "tokenizer_config.json").write_text("{}")


def _tiny_gguf_model(tied: bool = True) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied)
    model = LlamaForCausalLM(config)
    model.config.architectures = None  # what a config built from GGUF metadata holds
    return model


def test_conversion_writes_the_architecture_under_a_versioned_key(tmp_path: Path, monkeypatch) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not really a gguf: the loaders are stubbed")
    loads = []

    def load_model(folder, gguf_file, **kwargs):
        loads.append(gguf_file)
        return _tiny_gguf_model()

    # Patch the loaders on the real classes (the conversion imports them from transformers).
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", load_model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: _TokenizerStub())
    monkeypatch.setenv("DECODING_ADAPTERS_CACHE", str(tmp_path / "cache"))
    # An old (v1) conversion of the same file must not be reused.
    old = tmp_path / "cache" / f"gguf-{locate.sha256_file(gguf)[:16]}"
    old.mkdir(parents=True)
    (old / "complete").write_text("old")

    target = locate._convert_gguf(gguf)
    assert target.name == f"gguf-v{locate.GGUF_CACHE_VERSION}-{locate.sha256_file(gguf)[:16]}" and target != old
    config = json.loads((target / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" not in config
    # The directory loads back as the same class, and a second call reuses it.
    reloaded = transformers.LlamaForCausalLM.from_pretrained(target, dtype=torch.float32)
    assert type(reloaded).__name__ == config["architectures"][0]
    assert locate._convert_gguf(gguf) == target and loads == ["tiny.gguf"]


@pytest.mark.parametrize("tied", [True, False])
def test_conversion_stores_tied_embeddings_under_the_input_name(tmp_path: Path, monkeypatch, tied: bool) -> None:
    from safetensors import safe_open

    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"stubbed loaders" + bytes([tied]))
    source = _tiny_gguf_model(tied)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: source)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: _TokenizerStub())
    monkeypatch.setenv("DECODING_ADAPTERS_CACHE", str(tmp_path / "cache"))
    target = locate._convert_gguf(gguf)
    with safe_open(str(target / "model.safetensors"), "pt") as f:
        stored = {name: f.get_tensor(name) for name in f.keys()}
    # The input embedding table is always stored; the head only when it is a tensor of its own.
    assert torch.equal(stored["model.embed_tokens.weight"], source.model.embed_tokens.weight)
    assert ("lm_head.weight" in stored) == (not tied)
    if not tied:
        assert torch.equal(stored["lm_head.weight"], source.lm_head.weight)
    assert len(stored) == len({n for n, _ in source.named_parameters()})
    reloaded = transformers.LlamaForCausalLM.from_pretrained(target, dtype=torch.float32)
    ids = torch.tensor([[1, 5, 9]])
    assert torch.allclose(reloaded(ids).logits, source(ids).logits)


@pytest.mark.slow
def test_embedded_model_conversion_names_llama(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DECODING_ADAPTERS_CACHE", str(tmp_path))
    target = locate._convert_gguf(models.resolve_gguf(models.DEFAULT_MODEL))
    assert json.loads((target / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
