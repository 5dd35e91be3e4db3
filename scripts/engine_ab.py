"""Compare this checkout's engine with the engine of an earlier commit, in one process.

    python scripts/engine_ab.py --rev <commit> --model toy-grid            # engine time per pass
    python scripts/engine_ab.py --rev <commit> --model tiny --nfe-seeds 32 # mean NFE, both engines

The earlier commit's `scd_core` is extracted with `git archive` into a temporary folder and
imported as `scd_core_old`, next to this checkout's `scd_core`; both decode the same prompts
with the same settings, alternating run by run so that machine noise falls on both alike.
Engine time is a run's wall time outside `Session.step`, per forward pass (median over runs).
The model itself is loaded once, from this checkout, and shared by both engines.
"""
from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import scd_core  # noqa: E402
from scd_core.bench import parse_model_args  # noqa: E402
from scd_core.protocols import optional  # noqa: E402


def import_old(rev: str):
    """`scd_core` of commit `rev`, importable as `scd_core_old`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "scd_core"], check=True,
                             capture_output=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="scd_old_"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "scd_core").rename(folder / "scd_core_old")
    for path in (folder / "scd_core_old").rglob("*.py"):
        text = path.read_text()
        path.write_text(text.replace("from scd_core", "from scd_core_old").replace("import scd_core.", "import scd_core_old."))
    sys.path.insert(0, str(folder))
    import scd_core_old
    return scd_core_old


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", required=True, help="the earlier commit")
    ap.add_argument("--model", default="toy-grid")
    ap.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--methods", default="sjd,scd-mc,scd-gumbel")
    ap.add_argument("--windows", default="8,16,32")
    ap.add_argument("--inits", default="random,repeat-above")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per engine and case")
    ap.add_argument("--nfe-seeds", type=int, default=0, help="instead of timing: mean NFE over this many seeds")
    ap.add_argument("--top-k", type=int, default=100)
    ap.add_argument("--cfg-scale", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    old = import_old(args.rev)
    model = scd_core.load_model(args.model, **parse_model_args(args.model_arg))
    prompts = list(optional(model, "example_prompts") or ["a red apple"])
    engines = {"old": old, "new": scd_core}
    print(f"# {args.model}, top-k {args.top_k}, CFG {args.cfg_scale}, rev {args.rev}, threads {args.threads}")
    if args.nfe_seeds:
        print("| method | L | init | mean NFE old | mean NFE new | sd new / sqrt(n) |\n|---|---|---|---|---|---|")
    else:
        print("| method | L | init | engine us/pass old | engine us/pass new | new/old |\n|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        for window in (int(w) for w in args.windows.split(",")):
            for init in args.inits.split(","):
                kw = dict(method=method, window=window, init=init, top_k=args.top_k, cfg_scale=args.cfg_scale)
                if args.nfe_seeds:
                    nfe = {name: [eng.generate(model, [prompts[s % len(prompts)]], seed=s, **kw).nfe
                                  for s in range(args.nfe_seeds)] for name, eng in engines.items()}
                    se = statistics.stdev(nfe["new"]) / len(nfe["new"]) ** 0.5
                    print(f"| {method} | {window} | {init} | {statistics.fmean(nfe['old']):.2f} | "
                          f"{statistics.fmean(nfe['new']):.2f} | {se:.2f} |")
                    continue
                per_pass = {name: [] for name in engines}
                for r in range(args.runs + 1):
                    for name, eng in engines.items():
                        run = eng.generate(model, [prompts[r % len(prompts)]], seed=r, **kw)
                        if r:                                                  # the first run warms up
                            per_pass[name].append(1e6 * (run.wall_time - run.step_time) / run.nfe)
                o, n = statistics.median(per_pass["old"]), statistics.median(per_pass["new"])
                print(f"| {method} | {window} | {init} | {o:.0f} | {n:.0f} | {n / o:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
