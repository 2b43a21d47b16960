"""Tables, verdicts and figures from evaluation results."""
