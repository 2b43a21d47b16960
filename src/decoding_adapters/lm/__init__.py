"""The frozen language model: loading (GGUF, HF directory or hub id), the lean one-token step, the KV cache."""
