"""REINFORCE trainers for the sequence- and token-level adapters."""
