"""Training of the embedded `tiny` models: data, tokenizer, token files, priors, export,
sample sheets.

Every step is a command (`python -m scd_core.train.<step> --help`), deterministic given its
seed and thread count, resumable from its checkpoint, and printing progress. Nothing here
runs when `scd_core` is imported, and nothing here is needed to use the shipped weights.
`docs/training.md` gives the commands that made the shipped weights and how to train a
larger grid.
"""
