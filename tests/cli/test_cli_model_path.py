"""model-path prints the directory transformers loads a model from, including the cached conversion
of a GGUF (the form the embedded default takes) and an adapter's own base model."""

from pathlib import Path

import transformers

import decoding_adapters.lm.models as models
from adapter_helpers import make_adapter, save_tiny_base
from decoding_adapters.cli import main


def test_model_path_prints_a_directory_transformers_loads(tmp_path, tiny_lm, capsys, monkeypatch):
    base = save_tiny_base(tiny_lm, tmp_path / "base")
    adapter = make_adapter(tmp_path / "tok", tiny_lm, "token", base_model=str(base))
    assert main(["model-path", "--adapter", str(adapter)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(base)
    assert transformers.AutoConfig.from_pretrained(printed).hidden_size == tiny_lm.hidden_size
    assert main(["model-path", "--adapter", str(tmp_path)]) == 2
    assert "holds no adapter.json" in capsys.readouterr().err


def test_model_path_of_a_gguf_is_its_cached_conversion(tmp_path, tiny_lm, capsys, monkeypatch):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not really a gguf: the loaders are stubbed")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: tiny_lm.model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tiny_lm.tokenizer)
    monkeypatch.setenv("DECODING_ADAPTERS_CACHE", str(tmp_path / "cache"))
    assert main(["model-path", "--model", str(gguf)]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed.parent == tmp_path / "cache" and (printed / "config.json").is_file()
    assert str(printed) == models.locate_model(str(gguf))
