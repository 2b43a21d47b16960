"""Choosing a small set of decoding actions from a large pool by coverage on validation problems."""
