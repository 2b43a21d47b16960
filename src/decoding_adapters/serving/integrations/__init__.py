"""Using a trained adapter in other decoding stacks: transformers ``generate`` (``hf``) and vLLM
(``vllm_processor``). Each module imports its engine lazily or guards the import."""
