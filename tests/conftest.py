"""Shared fixtures: a tiny random-weight Llama with a character-level tokenizer (no downloads).

``--device`` (default cpu) puts the tiny models on that device: ``--device cuda`` is the GPU lane
(``make test-gpu``). The CLI runs load their models with ``--device auto``, i.e. on cuda wherever
one is present, so the lane runs them there too."""

from __future__ import annotations

import string
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from decoding_adapters.lm.models import FrozenLM
from decoding_adapters.sandbox.runner import probe_isolation

# Tiny models: one thread is faster (no fork-join overhead per small matmul) and steadier on a
# shared 2-core machine.
torch.set_num_threads(1)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_char_tokenizer():
    """A character-level fast tokenizer with ChatML specials; ids 0..2 are pad / eos / bos."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<|im_end|>", "<|im_start|>"]
    chars = list(string.digits + string.ascii_letters + string.punctuation + " \n")
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<|im_end|>", bos_token="<|im_start|>"
    )
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.chat_template = CHAT_TEMPLATE
    return tok


TEST_DEVICE = torch.device("cpu")
"""Where the tiny models live (``--device``); set once per session by ``pytest_configure``."""


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", help="torch device of the tiny test models (cpu, cuda, cuda:N)")


def pytest_configure(config):
    global TEST_DEVICE
    TEST_DEVICE = torch.device(config.getoption("--device"))
    if TEST_DEVICE.type == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda: no CUDA device is visible here")


CPU_ONLY = pytest.mark.skipif("config.getoption('--device') != 'cpu'", reason="a CPU-only kernel (oneDNN)")
"""For tests of CPU-only kernels: skipped when the tiny models run on another device (``--device``)."""


def make_tiny_lm(seed: int = 0, hidden_size: int = 32, device: torch.device | str | None = None) -> FrozenLM:
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = make_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # Larger logits than the default init so that sampled text varies and EOS sometimes appears.
    with torch.no_grad():
        model.lm_head.weight.mul_(40)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return FrozenLM(model.to(TEST_DEVICE if device is None else device), tok)


class FakeLM:
    """The test suite's stand-in LM (a ``protocols.LanguageModel``) for trainers fed by fake
    rollouts or reward sources: every chat encodes to one token, embeddings are seeded noise."""

    def __init__(self, hidden_size: int = 8):
        self.hidden_size = hidden_size
        self.device = torch.device("cpu")
        self.spec = SimpleNamespace(name_or_path="synthetic")

    def fingerprint(self) -> dict:
        return {"hidden_size": self.hidden_size, "vocab_size": 0}

    def encode_chat(self, conversations):
        return [[1] for _ in conversations]

    def prompt_embeddings(self, prompts, pooling="mean", batch_size=32) -> torch.Tensor:
        return torch.randn(len(prompts), self.hidden_size, generator=torch.Generator().manual_seed(len(prompts)))


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``):
    tiny matrices and networks run many times faster so on a shared, busy CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_lm() -> FrozenLM:
    return make_tiny_lm()


@pytest.fixture(scope="session")
def tiny_prompts(tiny_lm):
    chats = [[{"role": "user", "content": q}] for q in ("What is 2+3?", "Hi", "Compute 17*23 now, please.", "x")]
    return tiny_lm.encode_chat(chats)


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_lm, tmp_path_factory) -> Path:
    """The tiny model saved as an HF directory, for CLI runs (``--model DIR``)."""
    directory = tmp_path_factory.mktemp("tiny-model")
    tiny_lm.model.save_pretrained(directory)
    tiny_lm.tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def isolation():
    """What isolation sandboxed runs get on this machine (probed once per session)."""
    return probe_isolation()


@pytest.fixture(scope="session")
def layers(isolation):
    """The isolation layers sandboxed runs get on this machine (``sandbox_helpers.need`` skips on a missing one)."""
    return isolation.layers
