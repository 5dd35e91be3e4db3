"""The measurement harness: every table in docs/ is remade by one `python -m bench SUBCOMMAND`
(docs/benchmarks.md lists each table with its command). Run from the repository's root;
`python -m bench` lists the subcommands, `python -m bench SUBCOMMAND --help` says what one does.

It is not installed with the library: it measures the library (`scd_core`), the page (`app.py`,
`demo/`) and the tests' small models (`tests/`), and none of them imports it. The library's own
benchmark, `python -m scd_core.bench` (`scd-bench`), is a separate command that users get.
A subcommand is the module of the same name with `-` for `_`; the shared pieces: `served` (one
served page, its visitors and a burst of them), `procs` (a process's memory, threads and
children), `builds` (the models a measurement builds), `published` (checkpoints at their
published sizes), `figures` (the PNG charts), `stats` (percentiles).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent          # the repository
TESTS = ROOT / "tests"                                   # the tests' small models and fake Hub, shared
if str(TESTS) not in sys.path:
    sys.path.append(str(TESTS))

# subcommand -> what it measures, by topic (`python -m bench` prints this)
SUBCOMMANDS = {
    "the demo page": {
        "page-timing": "in Chromium: click to picture, a Stop, the race; many visitors against scd_core.serve; memory",
        "page-load": "N visitors at once, alone and beside an abusive client, then a flood of cancelled jobs",
        "page-soak": "many runs: the page's memory, threads, descriptors and files stay flat; then SIGTERM",
        "page-lifecycle": "start, a worker's memory, SIGTERM with a run in flight: exit status and time, orphans",
        "page-memory": "the page and its worker serving a full-size Janus-Pro-1B: resident memory at each step",
        "page-walk": "a visitor's walk through every model and method, with screenshots, in each size and theme",
        "switch-drill": "a visitor switching the page between two large models: one model's memory at a time",
    },
    "models": {
        "real-size-drill": "each family's published checkpoint at full size: download, load in bfloat16, passes",
        "model-ab": "a pass of each adapter's tiny config against an earlier commit's, eager and compiled",
        "cache-writes": "bytes a chain pass and a tree pass write into the KV cache, per layer",
        "hf-compression": "step compression through transformers' generate against scd_core's adapters",
    },
    "the engine": {
        "engine-ab": "this engine against an earlier commit's: time per pass, NFE, latency, trace memory",
        "pass-ops": "operations and host waits per pass",
        "pass-memory": "the peak memory of a pass against scd_core.memory's formula",
        "compile-check": "the compiled pass against the eager one on every golden case; compile times",
        "tree-profile": "draft trees against the chain: passes and where drafts fail",
    },
    "serving": {
        "client-timing": "Server, LocalClient and ProcessClient: bursts of requests and a cancel",
        "race-figures": "the race's figures on each model at the page's defaults: NFE, lead, stability, TV",
        "race-timing": "the race's times against the benchmark's for the same settings",
        "ray-timing": "Ray: the benchmark on 1 and 2 workers, the service on 1 and 2 replicas, a replica killed",
    },
    "the embedded models": {
        "influence-curve": "how far p moves along the window when one token is redrawn",
        "lead-figure": "SCD-MC's lead over SJD against the window, from benchmark CSVs",
        "nearest-emoji": "whether samples look like the emoji asked for: nearest-emoji rates",
        "train-frontier": "the frontier campaign: trains priors one after another and measures each",
        "frontier-figure": "the frontier figure: lead against the nearest-emoji rate, one point per prior",
        "coupling-figure": "one position of a real SCD-MC run, for the page's coupling figure",
    },
}


def module_name(subcommand: str) -> str:
    """`bench.<module>` of a subcommand: `page-timing` -> `page_timing`."""
    return subcommand.replace("-", "_")
