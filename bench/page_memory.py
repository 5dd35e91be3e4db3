"""The memory of the page and its decoding workers while a full-size Janus-Pro-1B serves a
Generate, a race and an export: the resident set (RSS) of the page's process and of every
process under it, sampled every 0.2 s.

    python -m bench page-memory build DIR [--store float16]   # random-weight Janus-Pro-1B into DIR's Hub cache
    python -m bench page-memory measure DIR [--app-dir TREE] [--dtype bfloat16] [--out FILE.json]

`build` writes Janus-Pro-1B at its published size with random weights (the real-size drill's
checkpoint, `bench.published`: deepseek-community/Janus-Pro-1B's sizes, a 24-layer, 2048-wide
Llama with a 102400-token vocabulary, the SigLIP-L vision tower, the 16384-code VQ decoder;
4.15 GB in bfloat16) into DIR/hub as the Hugging Face cache holds a download of that
repository. `measure` starts `python app.py` from TREE (default: this repository; an older
tree measures the page as it was) with HF_HOME=DIR, HF_HUB_OFFLINE=1 and decode workers, so
that `janus-pro-1b` loads from that cache with no network, then through gradio_client runs
one Generate, one race and one export of the Generate on it, and prints the memory of the
page, of its workers and their sum: the resident set (RSS), its anonymous part, and the
proportional set size (PSS, which counts a page shared by two processes half in each: a file
both map, such as safetensors weights read in place, is counted once in the summed PSS and
twice in the summed RSS), at rest before, at the end of each step, and at the peak of each
step. A pass of the full-size model takes seconds on a CPU, so the Generate and the race are
stopped `--run-for` seconds after their first pass (the race: after its warm-up of every
method, into its first timed run); the export draws every pass the Generate made.
`--dtype bfloat16` loads the large models in bfloat16 on the CPU too (a sitecustomize module
on PYTHONPATH sets the loaders' default dtype in every process of the run), which halves the
weights: two float32 copies of Janus-Pro-1B do not fit beside the rest on a shared 24 GB
machine.

On a CPU a bfloat16 checkpoint loaded in bfloat16 is not copied: its tensors are mapped from
the safetensors files, pages of the system's file cache that every process mapping them
shares, resident only where touched. A page that loads the model only to draw touches its
image decoder and little else, so its copy hardly shows in RSS, while on a GPU it is a whole
second copy in the GPU's memory. `build --store float16` writes the weights in float16:
loading them in bfloat16 then converts them, and each process that loads the model holds its
own copy, as on a GPU.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

from bench import procs, published, served

HUB_ID = "deepseek-community/Janus-Pro-1B"
REVISION = "0" * 40                        # the snapshot's name in the cache (a commit hash)
# the page's inputs: Janus-Pro-1B at its page settings, two race samples
INPUTS = served.GENERATE | dict(model="janus-pro-1b", top_k=1000, cfg=5.0, prompt="a red apple", samples=2)


# ----------------------------------------------------------------------------------- build

def build(home: Path, store: str = "bfloat16") -> None:
    import torch

    snapshot = home / "hub" / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / REVISION
    if (snapshot / "config.json").exists():
        print(f"already built: {snapshot}")
        return
    started = time.perf_counter()
    repos = home / "repos"
    written = published.WRITERS["janus-pro-1b"](repos, "full", None, getattr(torch, store))
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(written.repos[HUB_ID], snapshot)
    shutil.rmtree(repos)
    (snapshot.parent.parent / "refs").mkdir(exist_ok=True)
    (snapshot.parent.parent / "refs" / "main").write_text(REVISION)
    print(f"built {written.params / 1e9:.2f} B parameters, {written.file_bytes / 1e9:.2f} GB of files in "
          f"{time.perf_counter() - started:.0f} s: {snapshot}")


# --------------------------------------------------------------------------------- measure

SITECUSTOMIZE = '''"""page-memory: the large models load in bfloat16 on the CPU too, in every process."""
import torch
import scd_core.models.checkpoints as _checkpoints

_pick = _checkpoints.pick_device_dtype


def _bfloat16(device=None, dtype=None):
    return _pick(device, torch.bfloat16 if dtype in (None, "auto") else dtype)


_checkpoints.pick_device_dtype = _bfloat16
'''


class Sampler:
    """The memory (`procs.memory_kb`: RSS, anonymous, PSS) of the page and the sum over its
    descendants, every `every` s; the peak of each step by summed RSS."""

    def __init__(self, page: int, every: float = 0.2) -> None:
        self.page, self.every, self.step = page, every, "rest"
        self.peaks: dict[str, dict] = {}
        self.last: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            page = procs.memory_kb(self.page)
            kids = [procs.memory_kb(p) for p in procs.descendants(self.page)]
            workers = tuple(sum(k[i] for k in kids) for i in range(3))
            self.last = {"page": page, "workers": workers, "sum": tuple(a + b for a, b in zip(page, workers))}
            if self.last["sum"][0] > self.peaks.get(self.step, {"sum": (0, 0, 0)})["sum"][0]:
                self.peaks[self.step] = self.last
            time.sleep(self.every)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def texts(job) -> list[str]:
    """The words a job's latest update shows (its status lines)."""
    outputs = job.outputs()
    last = outputs[-1] if outputs else ()
    return [o for o in (last if isinstance(last, (list, tuple)) else [last]) if isinstance(o, str)
            and not o.endswith((".png", ".mp4", ".gif"))]


def measure(home: Path, tree: Path, dtype: str | None, threads: int, run_for: float) -> dict:
    hook = tempfile.mkdtemp(prefix="scd-page-memory-")
    if dtype:
        Path(hook, "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "SCD_THREADS": str(threads),
           "PYTHONPATH": f"{hook}:{tree}"}
    with served.Page(tree, env, drop=("HF_", "SCD_", "SPACES_")) as page:
        client = served.visitor(page.url)
        sampler, report = Sampler(page.pid), {}
        time.sleep(3)
        report["rest"] = sampler.last
        timings, said = {}, {}
        for step, api, started_when, then in (("generate", "/generate", "NFE", run_for),
                                              ("race", "/race", "one image alone", run_for),
                                              ("export", "/export", None, 0)):
            sampler.step = step
            started = time.perf_counter()
            job = client.submit(api_name=api) if api == "/export" else client.submit(**INPUTS, api_name=api)
            if started_when is not None:             # a pass on the CPU takes seconds: Stop it after a while
                while not job.done() and not any(started_when in text for text in texts(job)):
                    time.sleep(0.5)
                time.sleep(then)
                client.predict(None, api_name="/stop")
            job.result(timeout=3600)
            timings[step] = time.perf_counter() - started
            report[step] = sampler.last
            said[step] = [t[:160] for t in texts(job)[-3:]]
            print(f"{step}: {timings[step]:.0f} s; {said[step]}", flush=True)
        sampler.close()
    return {"at_end_kb": report, "peak_kb": sampler.peaks, "seconds": timings, "said": said, "tree": str(tree),
            "dtype": dtype}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("build", "measure"))
    parser.add_argument("home", type=Path, help="the Hugging Face home (HF_HOME) that holds the model")
    served.app_dir_argument(parser)
    parser.add_argument("--dtype", choices=("bfloat16",), default=None)
    parser.add_argument("--store", choices=("bfloat16", "float16"), default="bfloat16",
                        help="build: the weights' dtype in the files")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the decoding worker")
    parser.add_argument("--run-for", type=float, default=60.0,
                        help="seconds a Generate and a race decode (once started) before Stop")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.what == "build":
        build(args.home, args.store)
        return
    result = measure(args.home, args.app_dir, args.dtype, args.threads, args.run_for)
    gb = lambda kb: f"{kb / 1024 ** 2:.2f}"                        # noqa: E731
    print("GB: RSS (anonymous part, PSS)")
    print("| step | page | workers | sum | peak: page | workers | sum |")
    print("|---|---|---|---|---|---|---|")
    for step in ("rest", "generate", "race", "export"):
        end, peak = result["at_end_kb"].get(step), result["peak_kb"].get(step)
        cells = [f"{gb(m[0])} ({gb(m[1])}, {gb(m[2])})" for at in (end, peak) if at
                 for m in (at["page"], at["workers"], at["sum"])]
        print(f"| {step} | " + " | ".join(cells) + " |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))

