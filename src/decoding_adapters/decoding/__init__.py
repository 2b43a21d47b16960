"""Decoding actions and their sampling kernels, the batched decode loop, and rollout engines behind one interface."""
