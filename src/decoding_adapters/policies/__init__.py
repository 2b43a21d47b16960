"""The adapters' policies (sequence and token), their choosers, save/load and model cards."""
