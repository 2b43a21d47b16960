"""decoding-adapters."""
