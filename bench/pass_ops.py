"""Operations and waits per pass: every aten operation a decode dispatches, and those that make
the host wait for the device (`tests/ops_util.py`), divided by its passes.

    python -m bench pass-ops                     # this checkout: texture, B = 8, L = 16
    python -m bench pass-ops --rev a9fe42d       # an earlier commit's engine, the same count
    python -m bench pass-ops --tree 2x2          # with a draft tree (the model's own operations left out)

A chain is counted over a whole `generate` call, the texture model's operations included
(how the budget in tests/test_pass_ops.py was measured); with `--tree` the model's
`step_tree` and `keep_path` (whose argument checks read values) are left out, so that what is
counted is the engine's.
"""
from __future__ import annotations

import argparse
import warnings

import torch

from bench.builds import earlier_engine
from ops_util import OpCounter, counted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", default=None, help="count an earlier commit's engine instead (git archive)")
    ap.add_argument("--methods", default="ar,sjd,scd-mc,scd-gumbel")
    ap.add_argument("--tree", default=None, metavar="KxD")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--window", type=int, default=16)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.rev:
        eng = earlier_engine(args.rev)
    else:
        import scd_core as eng
    torch.set_num_threads(1)
    model = eng.load_model("texture")
    tree = tuple(int(x) for x in args.tree.lower().split("x")) if args.tree else None
    print(f"# texture, B {args.batch}, L {args.window}, tree {args.tree or 'none'}, {args.rev or 'this checkout'}")
    print("| method | passes | operations per pass | waits per pass | waiting operations |\n|---|---|---|---|---|")
    for method in args.methods.split(","):
        kw = dict(method=method, window=args.window, seed=0)
        if tree and method != "ar":
            kw["tree"] = tree
        counter = OpCounter()
        with counter:
            run = eng.generate(counted(model, counter) if tree else model, ["ocean waves"] * args.batch, **kw)
        print(f"| {method} | {run.nfe} | {counter.total / run.nfe:.0f} | {counter.total_syncs / run.nfe:.2f} | "
              f"{dict(counter.syncs) or '-'} |", flush=True)
    return 0

