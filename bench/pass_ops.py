"""Operations and waits per pass: every aten operation a decode dispatches, and those that make
the host wait for the device (`tests/ops_util.py`), divided by its passes.

    python -m bench pass-ops                     # this checkout: texture, B = 8, L = 16
    python -m bench pass-ops --rev a9fe42d       # an earlier commit's engine, the same count
    python -m bench pass-ops --tree 2x2          # with a draft tree (the model's own operations left out)
    python -m bench pass-ops --models texture,tiny,tiny-video,janus-pro,emu3,lumina-mgpt,llamagen,cosmos

A chain is counted over a whole `generate` call, the texture model's operations included
(how the budget in tests/test_pass_ops.py was measured); with `--tree` the model's
`step_tree` and `keep_path` (whose argument checks read values) are left out, so that what is
counted is the engine's. `--models`: the waits a pass of each model (the embedded ones as
shipped, the adapters on the tests' tiny configs), AR and SCD-MC at L = 8, over the public
`stream` after the prefill, the model's step included, the loop's check after the last pass
left out (as tests/test_model_waits.py counts them).
"""
from __future__ import annotations

import argparse
import warnings

import torch

from bench.builds import earlier_engine, tiny_config
from ops_util import OpCounter, counted


def model_waits(names: list[str]) -> None:
    """Waits a pass of each model, AR and SCD-MC at L = 8 (see the docstring)."""
    import scd_core

    print("| model | method | passes | waits a pass |\n|---|---|---|---|")
    for name in names:
        model, prompts, cfg = tiny_config(name)
        for method in ("ar", "scd-mc"):
            kw = dict(method=method, window=8, seed=0, cfg_scale=cfg, top_k=50)
            if name == "cosmos":
                kw["init"] = "random"
            records, counter = scd_core.stream(model, prompts, **kw), OpCounter()
            next(records)                                               # the prefill
            with counter:
                passes = sum(1 for _ in records)
            print(f"| {name} | {method} | {passes} | {(counter.total_syncs - 1) / passes:.1f} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", default=None, help="count an earlier commit's engine instead (git archive)")
    ap.add_argument("--methods", default="ar,sjd,scd-mc,scd-gumbel")
    ap.add_argument("--tree", default=None, metavar="KxD")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--models", default=None, help="instead: the waits a pass of these models (comma-separated)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    if args.models:
        model_waits(args.models.split(","))
        return 0
    if args.rev:
        eng = earlier_engine(args.rev)
    else:
        import scd_core as eng
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

