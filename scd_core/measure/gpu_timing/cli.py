"""The command line (`scd-gpu-timing`): arguments, the device, one model after another, the
report rewritten after each."""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import torch

from .configs import DEFAULT_WINDOWS, METHODS, MODELS, PUBLISHED_PARAMS, build_bench, engine_settings
from .timing import (IMAGE_METHODS, IMAGE_MODELS, Image, engine_grid, images_markdown, time_engines, time_forwards,
                     time_images)
from .report import Row, environment, make_rows, markdown, write_json


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="scd-gpu-timing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--windows", default=None,
                    help="comma-separated L (default: 1,16,32,64; Cosmos 1,32,64,128); 1 is added if missing")
    ap.add_argument("--methods", default=",".join(METHODS), help="engine methods timed at L > 1")
    ap.add_argument("--repeats", type=int, default=10, help="timed forwards per L (median reported)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed forwards per L first")
    ap.add_argument("--context", type=float, default=0.5,
                    help="fraction of the grid fed before timing (0.5: the mean context of a run)")
    ap.add_argument("--prompt-tokens", type=int, default=64, help="prompt length of Janus / Lumina")
    ap.add_argument("--engine-tokens", type=int, default=576, help="grid positions of the engine runs")
    ap.add_argument("--images", default=",".join(IMAGE_METHODS),
                    help="methods timed per image from the prompt (Janus-Pro, Lumina-mGPT); empty: none")
    ap.add_argument("--compile-methods", default=None,
                    help="of those, the methods also timed compiled (default: all on CUDA, none elsewhere)")
    ap.add_argument("--tiny", action="store_true", help="tiny configs of the same classes (CPU plumbing check)")
    ap.add_argument("--device", default=None, help="cuda (default) or, with --tiny, cpu")
    ap.add_argument("--dtype", default=None, help="bfloat16 (default on CUDA) / float32 (default on CPU) / float16")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads when running on CPU (default 1)")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON path (default: $OUT/gpu_timing.json if $OUT is set, else bench_out/gpu_timing.json)")
    return ap.parse_args(argv)


def resolve_device(args: argparse.Namespace) -> tuple[torch.device, torch.dtype]:
    """CUDA + bf16 for the full-size models; --tiny may run on CPU in float32."""
    wanted = args.device or ("cuda" if torch.cuda.is_available() or not args.tiny else "cpu")
    device = torch.device(wanted)
    if device.type == "cuda" and not torch.cuda.is_available():
        hint = "" if args.tiny else " The full-size models need one (~15 GB each in bf16); --tiny checks the plumbing on CPU."
        raise RuntimeError(f"no CUDA GPU is available here (device {wanted!r}).{hint}")
    if device.type != "cuda" and not args.tiny:
        raise RuntimeError(f"the full-size models run on a CUDA GPU only, not on {wanted!r}; "
                           "use --tiny for a CPU check of the plumbing")
    from scd_core.models.checkpoints import pick_device_dtype

    try:
        return pick_device_dtype(device, args.dtype)
    except ValueError as exc:
        raise RuntimeError(str(exc).replace("dtype:", "--dtype:")) from None


def parse_list(text: str, name: str, allowed: Sequence[str]) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise ValueError(f"{name}: expected some of {', '.join(allowed)}, got {text!r}")
    return items


def windows_for(name: str, text: str | None) -> list[int]:
    if text is None:
        return list(DEFAULT_WINDOWS[name])
    try:
        windows = sorted({int(w) for w in text.split(",") if w.strip()} | {1})
    except ValueError:
        raise ValueError(f"--windows: expected comma-separated integers, got {text!r}") from None
    if windows[0] < 1:
        raise ValueError(f"--windows: every L must be >= 1, got {text!r}")
    return windows


def default_out() -> Path:
    return Path(os.environ["OUT"]) / "gpu_timing.json" if os.environ.get("OUT") else Path("bench_out/gpu_timing.json")


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def log(msg: str, t0: float) -> None:
    print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def run_model(name: str, args: argparse.Namespace, methods: list[str], device: torch.device,
              dtype: torch.dtype, t0: float) -> tuple[dict, list[Row]]:
    windows = windows_for(name, args.windows)
    bench = build_bench(name, args.tiny, device, dtype, args.prompt_tokens)
    log(f"{name}: built in {bench.build_s:.1f}s, {bench.params / 1e9:.3f}e9 params, V {bench.model.vocab_size}, "
        f"grid {tuple(bench.model.grid)}", t0)
    times, n_fill, prefill_s = time_forwards(bench, windows, args.context, args.warmup, args.repeats, device)
    log(f"{name}: forwards timed " + ", ".join(f"L={L} {statistics.median(t):.2f}ms" for L, t in times.items()), t0)
    engine, grid = time_engines(bench, windows, methods, args.engine_tokens, device)
    log(f"{name}: engine timed on grid {grid}", t0)
    images = time_images(bench, args.image_methods, args.compiled_methods, device) \
        if name in IMAGE_MODELS and args.image_methods else []
    for im in images:
        log(f"{name}: one image by {im.how}{' compiled' if im.compiled else ''}: {im.seconds:.2f}s, NFE {im.nfe}", t0)
    info = {"params": bench.params, "published_params": PUBLISHED_PARAMS[name], "vocab_size": int(bench.model.vocab_size),
            "grid": list(bench.model.grid), "forward_rows": bench.rows, "prompt_tokens": bench.prompt_tokens,
            "context_tokens": n_fill, "prefill_s": prefill_s, "build_s": bench.build_s, "windows": windows,
            "engine_grid": list(grid), "engine_settings": bench.settings, "engine_init": bench.init,
            "peak_gpu_gb": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}
    info["images"] = [dict(vars(im), ms_per_pass=im.ms_per_pass) for im in images]
    del bench
    return info, make_rows(name, times, engine)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        models = parse_list(args.models, "--models", MODELS)
        methods = parse_list(args.methods, "--methods", METHODS)
        args.image_methods = parse_list(args.images, "--images", IMAGE_METHODS) if args.images.strip() else []
        device_kind = args.device or ("cuda" if torch.cuda.is_available() or not args.tiny else "cpu")
        default_compiled = ",".join(args.image_methods) if device_kind.startswith("cuda") else ""
        compiled_text = default_compiled if args.compile_methods is None else args.compile_methods
        args.compiled_methods = parse_list(compiled_text, "--compile-methods", args.image_methods) \
            if compiled_text.strip() else []
        for name in models:
            windows_for(name, args.windows)
        if args.repeats < 1 or args.warmup < 0 or not 0 <= args.context < 1:
            raise ValueError("--repeats must be >= 1, --warmup >= 0 and --context in [0, 1)")
        device, dtype = resolve_device(args)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if device.type == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    out = args.out or default_out()
    t0 = time.perf_counter()
    report = {"environment": environment(device, dtype, args.tiny), "args": {k: str(v) for k, v in vars(args).items()},
              "models": {}, "rows": []}
    rows: list[Row] = []
    for name in models:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            info, model_rows = run_model(name, args, methods, device, dtype, t0)
        except Exception as exc:            # keep going: GPU time is scarce, the next model may work
            traceback.print_exc()
            info, model_rows = {"error": f"{type(exc).__name__}: {exc}"}, []
            log(f"{name}: FAILED ({info['error']})", t0)
        free(device)
        rows += model_rows
        report["models"][name] = info
        report["rows"] = [vars(r) for r in rows]
        report["total_s"] = time.perf_counter() - t0
        write_json(out, report)
    print(markdown(rows, methods))
    images = [Image(**{k: v for k, v in im.items() if k != "ms_per_pass"})
              for info in report["models"].values() for im in info.get("images", [])]
    if images:
        print("\n" + images_markdown(images))
    for name, info in report["models"].items():
        if "error" in info:
            print(f"\n{name}: FAILED: {info['error']}")
    print(f"\nJSON written to {out}", file=sys.stderr)
    return 1 if any("error" in info for info in report["models"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
