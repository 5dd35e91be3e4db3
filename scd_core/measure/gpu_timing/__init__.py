"""GPU timing of the full-size models: what one window forward costs against one
single-token forward, what share of a pass the engine itself takes, and what one image costs
from prompt to tokens with each method, eager and compiled.

    scd-gpu-timing --out bench_out/gpu_timing.json      # one H100/H200 (python -m scd_core.measure.gpu_timing)
    scd-gpu-timing --tiny                               # the same code on tiny configs, on the CPU

It needs transformers 5.24 (the Lumina adapter's slot cache).

For each model (Janus-Pro-7B, Lumina-mGPT-7B-768, Cosmos-1.0-AR-4B) the published config is
built with random weights, directly on the GPU in bf16 (no checkpoint, no download), and
driven through the library's own adapter (`JanusTokenModel`, `LuminaTokenModel`,
`CosmosVideoModel`), so the timed path is exactly `Session.step` as the engine calls it:
- a prompt of realistic length is prefilled (with its CFG row: 2 forward rows for 1 prompt;
  Cosmos has no CFG and prefills its 5,120 conditioning tokens);
- the first `--context` fraction of the image (video) grid is fed in chunks, so the timed
  forwards see the KV cache of a run half-way through (the average over a whole run);
- each window size L is then timed as the median of `--repeats` CUDA-synchronised
  `Session.step` calls (after warm-up), every call re-feeding the same positions, which
  makes the adapter forget the previous window first (cache crop / slot overwrite included).

The engine alone is timed at the same sizes (V, grid, L, batch) with `RandomLogitsModel` on
the same device through `scd_core.generate`: engine ms per iteration = `run.engine_time /
run.nfe` (everything outside `Session.step`: sampling, verification, coupling, trace), for AR
at L = 1 and for each method at L > 1. The grid of the engine runs is cut to at most
`--engine-tokens` positions (full rows / frames kept) so a run takes seconds; the per-iteration
cost depends on V, L and the batch, not on the grid length.

Per image (`--images`, the models with a text prompt: Janus-Pro-7B and Lumina-mGPT-7B-768; Cosmos
continues a clip, which needs its tokenizer): one prompt decoded by `scd_core.generate` with AR,
SJD and both SCD couplings at the model's own window, eager and, for `--compile-methods`,
compiled (`Settings.compile`: on a GPU the pass is captured as a CUDA graph; the first run,
which compiles, is timed apart as the compile time), and for Janus-Pro transformers' own
`generate` (its image mode, static cache, CFG) as the reference. Each is timed from the call to
the tokens on the host, synchronised. With random weights the speculative methods' NFE is not
a real model's (near-uniform logits accept far more drafts): read the milliseconds per pass,
and scale them by a real model's NFE.

Output: a markdown table (model, L, forward ms, forward(L)/forward(1), engine ms per iteration
per method, engine share = engine ms / forward ms, as the paper's 1.66 ms of 36.41 ms on
Janus-Pro-7B) and a JSON file (`--out`, default $OUT/gpu_timing.json when $OUT is set, else
bench_out/gpu_timing.json), rewritten after each model so a partial run still leaves results.
A model that fails is recorded with its error and the next one runs.

The code is split by role: `configs` (what is timed), `timing` (how), `report` (the tables and
the JSON file), `cli` (the command line); every name is importable from here.
"""
from __future__ import annotations

from .configs import *  # noqa: F401,F403
from .timing import *  # noqa: F401,F403
from .report import *  # noqa: F401,F403
from .cli import *  # noqa: F401,F403
from .configs import _code_name  # noqa: F401
from .report import _version  # noqa: F401
