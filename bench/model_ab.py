"""Time a pass of each adapter's tiny config (and the embedded `tiny`), this checkout against an
earlier commit's models and engine, eager, and this checkout compiled; and the first compiled
run's time with a cold and a warm inductor cache.

    python -m bench model-ab --rev 85a9534                       # eager A/B, and compiled, per model
    python -m bench model-ab --rev 85a9534 --models janus-pro --methods ar --rounds 5
    python -m bench model-ab --compile-times                     # first compiled run: cold, then warm
    python -m bench model-ab --rev ed5ad83 --eager --methods scd-mc,sjd-tree   # eager only; a 2x2 tree

Both versions of a model share the same weights (the tests' tiny configs, `tests/models_util.py`),
decode the same prompts with the same settings and seed, alternating run by run so that
machine noise falls on both alike. Time a pass is the thread's CPU time of a `stream` from
the first pass after the prefill to the end, divided by the passes (median over rounds),
one thread; the last column says whether both gave the same tokens. `--compile-times` runs
the first compiled `generate` of each model in a new process twice with one fresh
`TORCHINDUCTOR_CACHE_DIR`: cold (nothing built yet), then warm (inductor's code found on disk;
the pass is traced again).
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch

import scd_core
from bench import ROOT
from bench.builds import earlier_engine, tiny_config

MODELS = ["tiny", "janus-pro", "emu3", "lumina-mgpt", "llamagen", "cosmos"]


def build_old(name: str, new, old):
    """The same model (the same weights) behind the earlier commit's classes."""
    for family in ("janus", "emu3", "lumina", "llamagen", "cosmos"):
        importlib.import_module(f"{old.__name__}.models.{family}")
    if name == "tiny":
        return old.load_model("tiny")
    if name == "janus-pro":
        import test_models_janus as tj
        return old.models.janus.JanusTokenModel(new.model, encode=tj.encode, bos_token_id=tj.BOS,
                                                boi_token_id=tj.BOI, pad_token_id=tj.PAD, name="tiny-janus")
    if name == "emu3":
        import test_models_emu3 as te
        return old.models.emu3.Emu3TokenModel(new.model, encode=te.encode, grid=(te.H, te.W), negative_prompt=te.NEG,
                                              positive_suffix="", pad_token_id=te.PAD, name="tiny-emu3")
    if name == "lumina-mgpt":
        import test_models_lumina as tl
        return old.models.lumina.LuminaTokenModel(new.model, tl.encode, tl.GRID, layout=tl.LAYOUT,
                                                  prompt_template="{prompt}", vqgan=new.vqgan)
    if name == "llamagen":
        gpt = old.models.llamagen.Transformer(new.gpt.config)
        gpt.load_state_dict(new.gpt.state_dict())
        return old.models.llamagen.LlamaGenTokenModel(gpt.eval(), new.vq, None)
    if name == "cosmos":
        net = old.models.cosmos.CosmosTransformer(new.net.cfg)
        net.load_state_dict(new.net.state_dict())
        return old.models.cosmos.CosmosVideoModel(net.eval(), new.tokenizer, name=new.name, device="cpu",
                                                  dtype=torch.float32, num_input_frames=new.num_input_frames)
    raise ValueError(f"models: no tiny config of {name!r}")


def settings(name: str, method: str, cfg: float) -> dict:
    """The run's settings; METHOD-tree: the method with a 2x2 draft tree."""
    method, tree = (method[:-5], (2, 2)) if method.endswith("-tree") else (method, None)
    kw = dict(method=method, window=1 if method == "ar" else 8, seed=0, cfg_scale=cfg, top_k=50, tree=tree)
    if name == "cosmos":
        kw["init"] = "random"
    return kw


def per_pass(eng, model, prompts, **kw) -> tuple[float, torch.Tensor]:
    """(CPU seconds a pass after the prefill, tokens) of one `stream` run."""
    records = eng.stream(model, prompts, **kw)
    next(records)
    t = time.thread_time()
    last, passes = None, 0
    for last in records:
        passes += 1
    return (time.thread_time() - t) / passes, last.tokens_after.clone()


def ab(args, old) -> None:
    print(f"# time a pass (thread CPU ms, median of {args.rounds}), one thread; {args.rev} vs this checkout")
    print(f"| model | method | passes | {args.rev} eager | now eager | ratio | now compiled | compiled / eager "
          "| same tokens |\n|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        new_model, prompts, cfg = tiny_config(name)
        old_model = build_old(name, new_model, old)
        for method in args.methods.split(","):
            kw = settings(name, method, cfg)
            times = {"old": [], "new": [], "compiled": []}
            same = True
            passes = sum(1 for _ in scd_core.stream(new_model, prompts, **kw)) - 1
            if not args.eager:
                scd_core.generate(new_model, prompts, compile=True, **kw)        # compiles (untimed)
            for _ in range(args.rounds):
                t_old, tok_old = per_pass(old, old_model, prompts, **kw)
                t_new, tok_new = per_pass(scd_core, new_model, prompts, **kw)
                t_comp, tok_comp = (t_new, tok_new) if args.eager else \
                    per_pass(scd_core, new_model, prompts, compile=True, **kw)
                times["old"].append(t_old), times["new"].append(t_new), times["compiled"].append(t_comp)
                same &= torch.equal(tok_old, tok_new) and torch.equal(tok_new, tok_comp)
            o, n, c = (statistics.median(times[k]) * 1e3 for k in ("old", "new", "compiled"))
            compiled = "- | -" if args.eager else f"{c:.2f} | {c / n:.2f}"
            print(f"| {name} | {method} | {passes} | {o:.2f} | {n:.2f} | {n / o:.2f} | {compiled} | "
                  f"{'yes' if same else 'NO'} |", flush=True)


def first_compile(case: str) -> None:
    """Print the wall seconds of the first compiled run of MODEL/METHOD in this process."""
    name, method = case.split("/")
    model, prompts, cfg = tiny_config(name)
    t = time.perf_counter()
    run = scd_core.generate(model, prompts, compile=True, **settings(name, method, cfg))
    print(f"{time.perf_counter() - t:.1f} {run.nfe}")


def compile_times(args) -> None:
    print("| model | method | first compiled run, cold cache | first compiled run, warm cache | passes |\n"
          "|---|---|---|---|---|")
    for name in args.models.split(","):
        for method in args.methods.split(","):
            cache = tempfile.mkdtemp(prefix="scd_inductor_")
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
            out = []
            for _ in range(2):
                command = [sys.executable, "-m", "bench", "model-ab", "--first-compile", f"{name}/{method}",
                           "--threads", str(args.threads)]
                done = subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True, text=True)
                out.append(done.stdout.split())
            print(f"| {name} | {method} | {out[0][0]} s | {out[1][0]} s | {out[0][1]} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", default="85a9534", help="the earlier commit to compare with")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--methods", default="ar,scd-mc")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile-times", action="store_true", help="first compiled run, cold and warm cache")
    ap.add_argument("--eager", action="store_true", help="the eager A/B only (no compiled column)")
    ap.add_argument("--first-compile", default=None, metavar="MODEL/METHOD", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    if args.first_compile:
        first_compile(args.first_compile)
        return 0
    if args.compile_times:
        compile_times(args)
        return 0
    ab(args, earlier_engine(args.rev))
    return 0

