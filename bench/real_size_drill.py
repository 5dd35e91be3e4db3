"""Real sizes, real files, measured: each family's published checkpoint at full size with
random weights, written in its repository's file layout, served by the fake Hub
(tests/fakehub.py), downloaded and loaded by `scd_core.load_model(..., dtype=torch.bfloat16)`
on the CPU in a fresh process, then a Generate of a few passes.

    python -m bench real-size-drill                           # every drill, one at a time
    python -m bench real-size-drill --drills janus-pro-1b,llamagen-c2i-xxl
    python -m bench real-size-drill --scale ci --drills llamagen-c2i-b     # the small configs CI runs

Each drill writes its repositories (`bench.published`: sharded safetensors with their index,
or the .pt files an adapter reads; config, tokenizer and processor files) under --work, serves
them from disk,
and runs the loading process, which:
- watches the load (installed before torch's first user is imported): elements written by a
  `torch.nn.init` function into a real (non-meta) tensor, and float32 parameter bytes placed
  in a module on a real device, against those the loaded model keeps;
- reads its resident memory before loading (after the imports), its peak (VmHWM) after the
  load and after the passes, and the peak of its anonymous memory (sampled every 20 ms):
  the rest of the peak is pages of mapped files;
- times the download (first, from the fake Hub), then `load_model` from the cache, then the
  prefill and the passes of `scd_core.stream` (scd-mc, the model's default settings).
Then the files and the download cache are deleted, and the same drill runs on its small
config: its peak over its RSS before loading is what any load pays (library code paged in,
allocator state), the table's "small" column.

A model that does not fit this machine (its bfloat16 weights over --budget-gb, by default
(what /proc/meminfo says is available - --keep-free-gb - 1.5 GB) / 1.25) is written with
the largest number of its repeated layers that fits, and the table says so. The table
(markdown, for docs/models.md) is printed and the results go to --out as JSON, rewritten
after each drill. `--scale ci` builds small configs of the same classes in the same layouts
(tests/test_real_size_drill.py runs them).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench import ROOT, procs
from bench.published import GB, SCALES, WRITERS, Written, cosmos_config


# ============================================================================ the loading process

class LoadWatch:
    """What a load does besides reading files: `torch.nn.init` calls on real tensors, and the
    float32 parameters put into modules on a real device. Installed before transformers is
    imported (it keeps its own references to the init functions)."""

    INIT = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
            "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
            "sparse_")

    def __init__(self) -> None:
        self.init_elements = 0           # elements written by init functions into real tensors
        self.fp32_param_bytes = 0        # float32 parameter bytes placed in modules on a real device
        self.active = False

    def install(self) -> None:
        import torch

        depth = [0]

        def counting(fn):
            def wrapped(tensor, *args, **kwargs):
                depth[0] += 1
                try:
                    if self.active and depth[0] == 1 and not tensor.is_meta:
                        self.init_elements += tensor.numel()
                    return fn(tensor, *args, **kwargs)
                finally:
                    depth[0] -= 1
            return wrapped

        for name in self.INIT:
            setattr(torch.nn.init, name, counting(getattr(torch.nn.init, name)))
        register = torch.nn.Module.register_parameter

        def register_parameter(module, name, param):
            if self.active and param is not None and not param.is_meta and param.dtype == torch.float32:
                self.fp32_param_bytes += param.nbytes
            return register(module, name, param)

        torch.nn.Module.register_parameter = register_parameter


def _status_kb(field_name: str) -> int:
    return procs.status(os.getpid())[field_name]


class AnonPeak(threading.Thread):
    """The peak of this process's anonymous resident memory (RssAnon), sampled."""

    def __init__(self, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.every, self.peak_kb, self.done = every, 0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak_kb = max(self.peak_kb, _status_kb("RssAnon"))
            time.sleep(self.every)

    def stop(self) -> int:
        self.done.set()
        self.join()
        return max(self.peak_kb, _status_kb("RssAnon")) * 1024


def loaded_tensors() -> dict[str, int]:
    """Bytes per dtype of the parameters and buffers of every live module (each storage once)."""
    import gc

    import torch

    seen, out = set(), {}
    with warnings.catch_warnings():        # isinstance on some lazily deprecated torch objects warns
        warnings.simplefilter("ignore")
        modules = [obj for obj in gc.get_objects() if isinstance(obj, torch.nn.Module)]
    for obj in modules:
        for t in [*obj.parameters(recurse=False), *obj.buffers(recurse=False)]:
            if t is None or t.is_meta:
                continue
            key = (t.untyped_storage().data_ptr(), t.dtype)
            if key not in seen:
                seen.add(key)
                out[str(t.dtype).removeprefix("torch.")] = out.get(str(t.dtype).removeprefix("torch."), 0) + t.nbytes
    return out


def child(spec: dict) -> dict:
    """Load one drill's model as a user would and run a few passes; runs in a fresh process."""
    watch = LoadWatch()
    watch.install()
    import torch

    torch.set_num_threads(spec["threads"])
    import scd_core
    import transformers  # noqa: F401  (imported before the baseline: an import is not the load)
    from huggingface_hub import snapshot_download
    from scd_core.models.hub import fetch

    out: dict = {}
    name, folder = spec["model"], ""
    t0 = time.perf_counter()                     # the download first: the load then reads the cache
    if name.startswith("hub:"):                  # a checkpoint without a registry name: its repository
        name = folder = snapshot_download(name[len("hub:"):])
    else:
        for files in importlib.import_module(f"scd_core.models.{spec['family']}").hub_files(name):
            fetch(files)
    out["download_s"] = time.perf_counter() - t0
    importlib.import_module(f"scd_core.models.{spec['family']}")   # the adapter's code is not its weights
    kwargs = load_kwargs(spec["kwargs"], folder)
    before = _status_kb("VmRSS") * 1024
    anon = AnonPeak()
    anon.start()
    watch.active = True
    t0 = time.perf_counter()
    model = scd_core.load_model(name, device="cpu", dtype=torch.bfloat16, **kwargs)
    out["load_s"] = time.perf_counter() - t0
    watch.active = False
    out.update(rss_before=before, peak_load=_status_kb("VmHWM") * 1024, anon_peak_load=anon.stop(),
               init_elements=watch.init_elements, fp32_param_bytes=watch.fp32_param_bytes,
               tensors=loaded_tensors())
    settings = scd_core.Settings.for_model(model, method="scd-mc")
    passes, t0 = [], time.perf_counter()
    for record in scd_core.stream(model, [spec["prompt"]], seed=0, settings=settings):
        passes.append(time.perf_counter() - t0)
        if len(passes) > spec["passes"]:
            break
        t0 = time.perf_counter()
    out.update(prefill_s=passes[0], pass_s=passes[1:], committed=int(record.n_after[0]), window=settings.window,
               peak_total=_status_kb("VmHWM") * 1024)
    return out


def load_kwargs(given: dict, folder: str) -> dict:
    """A drill's load_model keywords: "{folder}" is the downloaded snapshot; "ci" marks what a
    small config needs besides its files (Lumina's special ids, Cosmos' latent layout)."""
    out = {}
    for key, value in given.items():
        if key == "layout" and value == "ci":
            from scd_core.measure import gpu_timing
            from scd_core.models.lumina import LuminaLayout
            value = LuminaLayout(**gpu_timing.LUMINA_TINY_LAYOUT)
        elif key == "config" and value == "ci":
            value = cosmos_config("ci")
        elif isinstance(value, str):
            value = value.replace("{folder}", folder)
        out[key] = value
    return out


@dataclass
class Drill:
    name: str
    what: str                            # the published checkpoint
    model: str                           # registry name, or "hub:<repo>": that snapshot's folder
    family: str                          # its module under scd_core.models
    kwargs: dict = field(default_factory=dict)   # for load_model; "{folder}" is the snapshot's folder
    ci_kwargs: dict = field(default_factory=dict)  # added at --scale ci (what a small config's tensors do not tell)
    prompt: str | Callable[[Path], str] = "w1 w2 w3"

    def write(self, root: Path, scale: str, budget: float | None) -> Written:
        """Its repositories under `root` (`bench.published`)."""
        return WRITERS[self.name](root, scale, budget)



def cosmos_clip(work: Path) -> str:
    import test_models_cosmos as tc

    return tc.write_clip(work / "clip.mp4")


# ---------------------------------------------------------------------------- the drills


LLAMAGEN_CI = {"n_head": 4}            # a 64-wide test GPT: no published size tells its heads
DRILLS = {d.name: d for d in [
    Drill("janus-pro-1b", "deepseek-community/Janus-Pro-1B", "janus-pro-1b", "janus"),
    Drill("janus-pro-7b", "deepseek-community/Janus-Pro-7B", "janus-pro-7b", "janus"),
    Drill("lumina-mgpt-7b-768", "Alpha-VLLM/Lumina-mGPT-7B-768", "lumina-mgpt-7b-768", "lumina",
          ci_kwargs={"layout": "ci"}),
    Drill("emu3-gen", "BAAI/Emu3-Gen-hf", "emu3-gen", "emu3", ci_kwargs={"image_area": 768, "ratio": "4:3"}),
    Drill("llamagen-c2i-b", "FoundationVision/LlamaGen c2i_B_256.pt", "llamagen-c2i", "llamagen",
          ci_kwargs=LLAMAGEN_CI, prompt="7"),
    Drill("llamagen-c2i-l", "FoundationVision/LlamaGen c2i_L_384.pt", "hub:FoundationVision/LlamaGen", "llamagen",
          kwargs={"gpt_ckpt": "{folder}/c2i_L_384.pt"}, ci_kwargs=LLAMAGEN_CI, prompt="7"),
    Drill("llamagen-c2i-xxl", "FoundationVision/LlamaGen c2i_XXL_384.pt", "hub:FoundationVision/LlamaGen", "llamagen",
          kwargs={"gpt_ckpt": "{folder}/c2i_XXL_384.pt"}, ci_kwargs=LLAMAGEN_CI, prompt="7"),
    Drill("llamagen-t2i-xl", "peizesun/llamagen_t2i t2i_XL_stage2_512.pt + google/flan-t5-xl", "llamagen-t2i",
          "llamagen", ci_kwargs=LLAMAGEN_CI),
    Drill("cosmos-1-ar-4b", "nvidia/Cosmos-1.0-Autoregressive-4B", "cosmos-1-ar-4b", "cosmos",
          ci_kwargs={"config": "ci"}, prompt=cosmos_clip),
]}


# ============================================================================ running the drills

def available_bytes() -> int:
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    return info["MemAvailable"]


def run_drill(drill: Drill, scale: str, work: Path, budget: float | None, threads: int, passes: int,
              timeout: float) -> dict:
    """Write a drill's files, serve them, load and run them in a fresh process; delete the files."""
    from fakehub import FakeHub, client_env

    root = work / drill.name
    shutil.rmtree(root, ignore_errors=True)
    result = {"drill": drill.name, "checkpoint": drill.what, "scale": scale}
    try:
        t0 = time.perf_counter()
        written = drill.write(root / "repos", scale, budget)
        prompt = drill.prompt(root) if callable(drill.prompt) else drill.prompt
        result.update(layers=written.layers, params=written.params, weight_bytes=written.weight_bytes,
                      file_bytes=written.file_bytes, note=written.note, not_in_files=written.not_in_files,
                      write_s=time.perf_counter() - t0)
        spec = {"model": drill.model, "family": drill.family, "kwargs": {**drill.kwargs, **(drill.ci_kwargs if scale == "ci" else {})},
                "prompt": prompt, "threads": threads, "passes": passes}
        with FakeHub() as hub:
            for repo, folder in written.repos.items():
                hub.add_folder(repo, folder, on_disk=True)
            env = client_env(hub, root / "home", OMP_NUM_THREADS=str(threads))
            proc = subprocess.run([sys.executable, "-m", "bench", "real-size-drill", "--child", json.dumps(spec)],
                                  env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=timeout)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"the loading process failed ({proc.returncode}): {proc.stderr[-3000:]}")
        result.update(json.loads(lines[-1][len("RESULT "):]))
        if scale == "full":        # what the same load and passes cost with (almost) no weights
            small = run_drill(drill, "ci", work, None, threads, 1, timeout)
            result["fixed_bytes"] = small["peak_total"] - small["rss_before"]
    except Exception as exc:                     # recorded; the next drill runs
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return result


def table(results: list[dict]) -> str:
    """The markdown table of docs/models.md. Ratios: (peak RSS - RSS before loading) / the
    weights as used; "small": the same drill's small config, its peak - before (library code
    paged in and allocator state, which any load pays)."""
    lines = ["| model | layers | files GB | weights GB | load s | RSS before GB | peak after load GB | ratio after load | "
             "peak after passes GB | ratio after passes | small GB | peak anon GB | prefill s | pass s | window | "
             "random init | float32 params GB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['drill']} | failed: {r['error'][:200]} |" + " |" * 15)
            continue
        w, before = r["weight_bytes"], r["rss_before"]
        small = r.get("fixed_bytes")
        pass_s = sorted(r["pass_s"])[len(r["pass_s"]) // 2] if r["pass_s"] else float("nan")
        lines.append(
            f"| {r['drill']} | {r['layers']} | {r['file_bytes'] / GB:.2f} | {w / GB:.2f} | {r['load_s']:.1f} | "
            f"{before / GB:.2f} | {r['peak_load'] / GB:.2f} | {(r['peak_load'] - before) / w:.2f} | "
            f"{r['peak_total'] / GB:.2f} | {(r['peak_total'] - before) / w:.2f} | "
            f"{'' if small is None else f'{small / GB:.2f}'} | {r['anon_peak_load'] / GB:.2f} | {r['prefill_s']:.1f} | "
            f"{pass_s:.2f} | {r['window']} | {r['init_elements']:,} | {r['fp32_param_bytes'] / GB:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drills", default=",".join(DRILLS), help=f"some of {', '.join(DRILLS)}")
    parser.add_argument("--scale", choices=SCALES, default="full")
    parser.add_argument("--work", default=os.environ.get("TMPDIR", "/tmp") + "/real_size_drill",
                        help="where the files are written (deleted after each drill)")
    parser.add_argument("--out", default="bench_out/real_size.json")
    parser.add_argument("--keep-free-gb", type=float, default=6.0, help="memory left to others")
    parser.add_argument("--budget-gb", type=float, default=None,
                        help="bfloat16 weights at most (default: from the available memory)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--passes", type=int, default=3, help="passes after the prefill")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--table", metavar="JSON", help="print the table of an earlier run's --out file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    names = [n.strip() for n in args.drills.split(",") if n.strip()]
    unknown = [n for n in names if n not in DRILLS]
    if unknown:
        parser.error(f"--drills: unknown {', '.join(unknown)}; known: {', '.join(DRILLS)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        budget = args.budget_gb * GB if args.budget_gb else \
            (available_bytes() - args.keep_free_gb * GB - 1.5 * GB) / 1.25
        if args.scale == "ci":
            budget = None
        print(f"{name}: budget {budget / GB:.1f} GB of bfloat16 weights" if budget else name, flush=True)
        results.append(run_drill(DRILLS[name], args.scale, Path(args.work), budget, args.threads, args.passes,
                                 args.timeout))
        print(json.dumps(results[-1]), flush=True)
        out.write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0
