"""Training commands of the embedded `tiny` models (data, tokenizer, priors, export).

Every step is a command (`python -m scd_core.train.<step> --help`), deterministic given its
seed, resumable from its checkpoint, and printing progress. Nothing here runs at import time
of `scd_core`, and nothing here is needed to *use* the shipped weights.
"""
