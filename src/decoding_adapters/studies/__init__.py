"""Studies: multi-stage experiments that train and evaluate several adapters and write a committed
report (``domains``: single-domain vs mixed-domain training and out-of-distribution evaluation)."""
