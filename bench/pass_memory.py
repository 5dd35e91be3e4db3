"""The memory one pass holds, per (row, window slot, vocabulary entry), measured on the CPU.

    python -m bench pass-memory                    # every method at V 64,000, then the table per model
    python -m bench pass-memory --vocab 16384 --rows 8 --window 64
    python -m bench pass-memory --top-p 0.8 --window 128 --rows 2   # Cosmos's page settings

Each measurement runs in a process of its own: the model (`random-logits`: instant logits, so
what is measured is the engine and the logits) is loaded and warmed up at one row, then a run
of `--rows` rows at `--window` starts and four passes run; the process's peak resident set
(reset to what is resident when the run starts, through /proc/self/clear_refs) less what was
resident then is the pass's peak, its state included (every tensor over 128 KiB is its own
mapping, so the resident set follows what is live). The table then gives, per model of the registry, what
one pass needs at the page's largest settings (32 rows, the window at its most: 1,024 or the
grid) by `scd_core.memory.pass_bytes`, and how many rows fit under the cap.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, re, sys, torch, scd_core
torch.set_num_threads(1)
method, B, L, V, top_p = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
m = scd_core.load_model("random-logits", vocab_size=V, grid=(16, 16))
def status(field):                       # bytes, from the kernel's account of this process
    return int(re.search(field + r":\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
warm = scd_core.stream(m, ["x"], method=method, window=2, seed=0, top_p=top_p)
for _ in range(3): next(warm)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")                         # the peak restarts from what is resident now
base = status("VmRSS")
run = scd_core.stream(m, ["x"] * B, method=method, window=L, seed=0, top_p=top_p)
for _ in range(5): next(run)
print(json.dumps({"bytes": status("VmHWM") - base}))
"""


def measure(method: str, rows: int, window: int, vocab: int, top_p: float = 1.0) -> int:
    """Peak bytes of a pass (its state included) of `rows` rows at `window` over `vocab`,
    sampling with `top_p`. glibc
    takes every allocation over 128 KiB from its own mapping (a fixed threshold, not the one it
    raises as large blocks are freed), so freed tensors leave the resident set at once."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    out = subprocess.run([sys.executable, "-c", CHILD, method, str(rows), str(window), str(vocab), str(top_p)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.splitlines()[-1])["bytes"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=64000)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--top-p", type=float, default=1.0)
    a = ap.parse_args(argv)
    from scd_core import memory
    from scd_core.models import REGISTRY

    print("| method | top-p | rows x window x V | peak | bytes per element | the formula's |\n|---|---|---|---|---|---|")
    for method in ("ar", "sjd", "scd-mc", "scd-gumbel"):
        width = 1 if method == "ar" else a.window
        peak = measure(method, a.rows, a.window, a.vocab, a.top_p)
        print(f"| {method} | {a.top_p:g} | {a.rows} x {width} x {a.vocab:,} | {peak / 2**20:.0f} MiB | "
              f"{peak / (a.rows * width * a.vocab):.1f} | {memory.bytes_per_element(a.top_p)} |", flush=True)
    print(f"\nby the formula ({memory.PASS_BYTES_PER_ELEMENT} bytes per element), cap "
          f"{memory.DEFAULT_PASS_BYTES / memory.GiB:.0f} GiB:\n")
    print("| model | V | tokens | largest window | one row | 32 rows | rows per pass under the cap |\n|---|---|---|---|---|---|---|")
    for name, entry in REGISTRY.items():            # the registry's sizes: nothing is loaded
        if entry.test_only:
            continue
        vocab, tokens = entry.vocab, entry.tokens
        width = min(1024, tokens)
        one = memory.pass_bytes(1, width, vocab)
        print(f"| `{name}` | {vocab:,} | {tokens:,} | {width:,} | {one / 2**20:.0f} MiB | "
              f"{32 * one / memory.GiB:.1f} GiB | {max(1, memory.DEFAULT_PASS_BYTES // one)} |")
