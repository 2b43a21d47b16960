"""Random-weight Llama models of the shapes the GPU figures are taken on, for machines without the
default model's file or a network (the GPU machines here have neither).

- ``default``: SmolLM2-135M-Instruct's shape (30 layers x 576, 9 query / 3 KV heads, MLP 1536,
  vocabulary 49,152, tied embeddings): the embedded default model with random weights;
- ``1b``: a 1.07B Llama (16 layers x 2048, 32 query / 8 KV heads, MLP 8192, the same vocabulary,
  tied embeddings): Llama-3.2-1B's layers over SmolLM2's vocabulary;
- ``tiny``: 2 layers x 64 over the same vocabulary, for dry runs of the GPU scripts on a CPU.

Speed does not depend on the weights' values; token-level agreement between two implementations
on random weights is a harder test than on trained ones (flat distributions: more near-ties).

As a script it saves one as an HF directory that every command loads with ``--model DIR``:

    python benchmarks/random_weights.py --shape default --tokenizer TOKENIZER_DIR --out /tmp/smollm2-random

``--tokenizer``: a directory holding the default model's tokenizer (``decoding-adapters model-path``
prints the converted default model's directory, which holds it).
"""

from __future__ import annotations

import argparse

import torch

from decoding_adapters.lm.models import FrozenLM, ModelSpec

SHAPES = {
    "default": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16),
}
"""Layer shapes; both use SmolLM2's vocabulary, RoPE base and norm epsilon (``random_llama``)."""


def random_llama(shape: str, tokenizer_dir: str, dtype: torch.dtype = torch.bfloat16, device: str = "cuda",
                 seed: int = 0) -> FrozenLM:
    """A ``FrozenLM`` of ``shape`` with seeded random weights (HF's init) and SDPA attention."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2, **SHAPES[shape],
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = 2, 2
    name = str(dtype).removeprefix("torch.")
    return FrozenLM(model, tokenizer, ModelSpec(name_or_path=f"random-{shape}", device=device, dtype=name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="default")
    parser.add_argument("--tokenizer", required=True, help="directory with the default model's tokenizer")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lm = random_llama(args.shape, args.tokenizer, torch.float32, "cpu", args.seed)
    lm.model.save_pretrained(args.out)
    lm.tokenizer.save_pretrained(args.out)
    print(f"saved {args.shape} with random weights ({sum(p.numel() for p in lm.model.parameters()) / 1e6:.0f}M "
          f"parameters) to {args.out}")


if __name__ == "__main__":
    main()
