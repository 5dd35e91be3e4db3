"""The engine on a GPU, checked in a minute: `scripts/gpu_check.sh` runs this after the
GPU-only tests. On a CPU the same steps run, the CUDA-only ones skipped by name.

    python scripts/gpu_check.py                     # every step, a table at the end
    python scripts/gpu_check.py --models tiny,texture --compiled tiny

Per model (the embedded models as shipped, the adapters on tiny random configs of their
classes, tests/models_util.py), with `stream`:
- waits: every pass runs under `torch.cuda.set_sync_debug_mode("error")`, so any operation
  that waits for the device inside a pass raises; only the loop's check between passes reads
  back (CUDA only);
- clocks: each pass's wall time is at least its step's (`scd_core.clocks`: the engine's
  share is never negative);
- compiled (the models `--compiled` names, CUDA only): `scd_core.testing.check_cuda_graphs`
  (CUDA graphs recorded, none more in a second run, eager's tokens), then a pass's wall time
  eager and compiled, the best of three runs.
Then one pass's peak device memory at V = 64,000 (`random-logits`), top-p off and at 0.8
(Cosmos's page setting), against `scd_core.memory.pass_bytes` (CUDA only; tests/test_memory.py
measures the CPU's). Exit status 1 if a step failed.
"""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import scd_core  # noqa: E402
from scd_core import memory, passes, testing  # noqa: E402

MODELS = ["texture", "tiny", "tiny-64", "janus-pro", "emu3", "lumina-mgpt", "llamagen", "cosmos"]
COMPILED = "tiny,janus-pro,llamagen"               # `--compiled` alone
CUDA_ONLY = "skipped (CUDA only)"


class Folder:
    """What `models_util.build` asks of pytest's tmp_path_factory (Cosmos writes its files)."""

    def mktemp(self, name: str) -> Path:
        import tempfile
        return Path(tempfile.mkdtemp(prefix=f"gpu_check_{name}_"))


@contextmanager
def passes_raise_on_waits(device: torch.device):
    """Every pass that `scd_core.passes.pass_for` gives runs with CUDA's sync debug mode at
    "error"; the loop between passes (its one check) runs as usual."""
    chooser = passes.pass_for

    def strict(session, plan):
        one_pass = chooser(session, plan)

        def run(*args):
            torch.cuda.set_sync_debug_mode("error")
            try:
                return one_pass(*args)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return run

    passes.pass_for = strict if device.type == "cuda" else chooser
    try:
        yield
    finally:
        passes.pass_for = chooser


def check_model(name: str, device: torch.device, compiled: bool = False) -> dict[str, str]:
    """The steps of one model: {step: "ok", a failure's message, or why it was skipped}."""
    import models_util

    out: dict[str, str] = {}
    small = dict(grid=(8, 8)) if name == "texture" else {}
    model, prompts, cfg = models_util.build(name, torch.float32, Folder(), device=str(device), **small)
    kw = dict(method="scd-mc", window=6, seed=3, cfg_scale=cfg, top_k=40)
    if name == "cosmos":
        kw["init"] = "random"
    prompts = prompts[:1]
    try:
        with passes_raise_on_waits(device):
            records = list(scd_core.stream(model, prompts, **kw))
        out["no wait in a pass"] = "ok" if device.type == "cuda" else CUDA_ONLY
    except RuntimeError as exc:                                    # the sync debug mode's error
        out["no wait in a pass"] = f"FAILED: {str(exc).splitlines()[0]}"
        records = list(scd_core.stream(model, prompts, **kw))
    walls = [b.wall_time - a.wall_time for a, b in zip(records, records[1:])]
    steps = [b.step_time - a.step_time for a, b in zip(records, records[1:])]
    short = [i + 1 for i, (w, s) in enumerate(zip(walls, steps)) if w < s]
    out["wall >= step"] = "ok" if not short else f"FAILED: passes {short[:5]}"
    if device.type != "cuda":
        out["compiled: CUDA graphs, a pass eager and compiled"] = CUDA_ONLY
    elif compiled:
        out["compiled: CUDA graphs, a pass eager and compiled"] = compiled_timing(model, prompts, kw)
    return out


def compiled_timing(model, prompts: list[str], kw: dict) -> str:
    """`check_cuda_graphs`, then a pass's wall time eager and compiled (best of three runs)."""
    try:
        settings = {k: v for k, v in kw.items() if k != "cfg_scale"}
        graphs = testing.check_cuda_graphs(model, prompts, kw["cfg_scale"], **settings)
    except AssertionError as exc:
        return f"FAILED: {exc}"

    def per_pass(**extra) -> float:
        runs = [scd_core.generate(model, prompts, **kw, **extra) for _ in range(3)]
        return min((r.wall_time - r.iterations[0].wall_time) / (r.nfe - 1) for r in runs)   # the prefill left out
    eager, fused = per_pass(), per_pass(compile=True)
    return f"ok: {graphs} CUDA graphs; {eager * 1e3:.2f} ms a pass eager, {fused * 1e3:.2f} ms compiled " \
           f"({eager / fused:.1f}x)"


def check_memory(device: torch.device, top_p: float, rows: int = 2, window: int = 128, vocab: int = 64000) -> str:
    """One pass's peak device memory against the formula (`memory.pass_bytes`)."""
    if device.type != "cuda":
        return CUDA_ONLY
    model = scd_core.load_model("random-logits", vocab_size=vocab, grid=(16, 16), device=str(device))
    run = scd_core.stream(model, ["x"] * rows, method="scd-mc", window=window, seed=0, top_p=top_p)
    next(run), next(run)                                         # the prefill and a first pass
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    next(run)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    formula = memory.pass_bytes(rows, window, vocab, top_p)
    verdict = "ok" if peak <= formula else "FAILED"
    return f"{verdict}: {peak / 2**20:.0f} MiB of {formula / 2**20:.0f} MiB " \
           f"({peak / (rows * window * vocab):.1f} bytes per element)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--device", default=None, help="cuda where there is one, else cpu")
    ap.add_argument("--compiled", nargs="?", const=COMPILED, default="",
                    help=f"models whose pass is also timed compiled, CUDA only (alone: {COMPILED}, the models "
                         "whose graphs gpu_check.sh's GPU-only tests leave in inductor's cache)")
    ap.add_argument("--rows", default=None, help="also write the table's rows to this file")
    args = ap.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(0)
    rows: list[tuple[str, str, str]] = []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        try:
            steps = check_model(name, device, name in args.compiled.split(","))
        except Exception as exc:                                  # one model's failure, said; the others go on
            traceback.print_exc()
            steps = {"runs": f"FAILED: {type(exc).__name__}: {exc}"}
        for step, verdict in steps.items():
            rows.append((name, step, verdict))
        print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
    for top_p in (1.0, 0.8):
        rows.append(("random-logits V 64,000", f"a pass's peak memory, top-p {top_p:g}", check_memory(device, top_p)))
    print(f"\n{device.type}: {torch.cuda.get_device_name() if device.type == 'cuda' else 'no GPU'}\n")
    lines = [f"| {name}: {step} | {verdict} | |" for name, step, verdict in rows]
    print("| check | result | time |\n|---|---|---|\n" + "\n".join(lines))
    if args.rows:
        Path(args.rows).write_text("".join(line + "\n" for line in lines))
    failed = [r for r in rows if r[2].startswith("FAILED")]
    print(f"\n{len(failed)} steps failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
