"""The switching drill: a visitor switches the page between two large models, back and forth,
and the memory of the page and its decode workers together stays that of one model.

    python -m bench switch-drill                              # Janus-Pro-1B and -7B, about 4 GB each
    python -m bench switch-drill --models janus-pro-1b,janus-pro-7b --gb 4.2 --switches 5

Both models are written at their published layout with random weights by the real-size
drill's writers (`bench.published`), their repeated layers cut where needed so
that each holds at most --gb GB of bfloat16 weights (by default Janus-Pro-1B whole, 24
layers, and Janus-Pro-7B with 3 of its 30), and served by the fake Hub (tests/fakehub.py).
Then the page (`app.py`, worker processes: `SCD_DECODE=process`, its residency settings from
the environment: `SCD_GPU_BYTES` unset, one large model at a time) runs in a fresh process,
which measures its own resident memory before any model (the page alone), and, --switches
times, picks each model in turn (`Models.load_note`: its worker loads it, once the other's
worker is closed) and runs a Generate row on the page's client (`config.REQUESTS`), stopped
after two passes, without its pictures (a VQ decode in bfloat16 takes minutes on a CPU). A thread samples, every 20 ms, the resident memory of the page and of every worker
process it started, and counts the workers alive. At the end the page closes its client, and
the drill checks that none of its workers is left.

It passes when the sampled peak of page + workers is at most 1.2 x (the larger model's bytes,
as its worker measured them, + the page alone), never more than one worker ran at once, and
none is left. The workers load as on a GPU, in bfloat16 (the real-size drill's loads), on
this CPU; the page's "needs a GPU" gate of the 7B is lifted for the drill (it measures
memory, not speed). One JSON line (RESULT ...) and a summary are printed; the exit status is
1 when a check fails.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import ROOT, procs, published
from bench.published import GB

BOUND = 1.2               # peak of page + workers, at most this times (larger model + page alone)


class Sampler(threading.Thread):
    """Every `every` s: the resident memory of this process and its descendants together,
    and how many descendants run; the peaks, and every process seen."""

    def __init__(self, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.every, self.done = every, threading.Event()
        self.peak = self.peak_page = self.most_workers = 0
        self.seen: set[int] = set()

    def run(self) -> None:
        me = os.getpid()
        while not self.done.is_set():
            running = procs.spawned_workers(me)
            self.seen |= running
            page = procs.rss_bytes(me)
            self.peak = max(self.peak, page + sum(procs.rss_bytes(p) for p in running))
            self.peak_page = max(self.peak_page, page)
            self.most_workers = max(self.most_workers, len(running))
            time.sleep(self.every)

    def stop(self) -> None:
        self.done.set()
        self.join()


# ------------------------------------------------------------------------------- the page

def load_bf16(name: str):
    """A worker's load: the model in bfloat16, as the page loads it on a GPU (on this CPU), every
    weight then read once, as a copy onto a GPU reads it: the weights the loader left mapped
    from their files are then resident in the worker, as they are in a GPU's memory."""
    import torch

    from scd_core.models import load_model
    from scd_core.models.cache import model_bytes

    model = load_model(name, device="cpu", dtype=torch.bfloat16)
    with torch.no_grad():
        for module in [v for v in vars(model).values() if isinstance(v, torch.nn.Module)]:
            for t in [*module.parameters(), *module.buffers()]:
                t.sum()
    print(f"{name}: {model_bytes(model) / GB:.2f} GB of weights read", flush=True)
    return model


def page_main(spec: dict) -> dict:
    """Runs in a fresh process: the page, its two models switched back and forth."""
    os.environ["SCD_DECODE"] = "process"
    import torch

    torch.set_num_threads(1)
    from demo import backend, checks, config, models

    models.unavailable = checks.unavailable = lambda name, loaded=False: None   # the GPU gate, lifted
    config.REQUESTS.client.close()
    client = backend.make_client("process", None, load_bf16, config.SERVERS.max_batch)   # the page's settings
    config.REQUESTS = backend.Requests(client)
    config.MODELS.use(client, downloads_here=True)
    time.sleep(1.0)
    alone = procs.rss_bytes(os.getpid())                              # the page before any large model
    sampler = Sampler()
    sampler.start()
    switches, measured = [], {}
    for _ in range(spec["switches"]):
        for name in spec["models"]:
            t0 = time.perf_counter()
            note = config.MODELS.load_note(name)                 # the visitor picks it
            loaded = time.perf_counter() - t0
            page, sampling, _ = config.MODELS.defaults(name)
            settings = checks.settings_of("scd-mc", page["window"], page["init"], sampling["temperature"],
                                              sampling["top_k"], sampling["top_p"], sampling["cfg_scale"])
            waiting = config.MODELS.swap_note(name)              # what Generate's status would say first
            rid = config.REQUESTS.submit("drill", name, config.MODELS.examples(name)[0], 0, settings)
            for index, _ in enumerate(client.records(rid)):   # Generate, stopped after two passes
                if index == 1:
                    client.cancel(rid)
            nfe = client.result(rid, timeout=600).nfe
            config.REQUESTS.done(rid)
            client.release(rid)
            measured.update(client.residency.resident())
            running = procs.spawned_workers(os.getpid())
            switches.append({"model": name, "load_s": round(loaded, 1), "note": note, "waiting": waiting,
                             "nfe": nfe, "workers": len(running),
                             "page_and_workers": procs.rss_bytes(os.getpid()) + sum(map(procs.rss_bytes, running))})
    before_close = procs.spawned_workers(os.getpid())
    client.close()
    sampler.stop()
    time.sleep(0.5)
    left = sorted(p for p in sampler.seen | before_close if procs.alive(p))
    return {"page_alone": alone, "peak": sampler.peak, "peak_page": sampler.peak_page,
            "most_workers": sampler.most_workers, "model_bytes": measured, "switches": switches,
            "workers_started": len(sampler.seen), "left_behind": left}


# ------------------------------------------------------------------------------- the drill

def write(names: list[str], root: Path, gb: float) -> dict:
    """Each model's repository at about `gb` GB of bfloat16 weights; name -> what was written."""
    out = {}
    for name in names:
        written = published.WRITERS[name](root / name, "full", gb * GB)
        out[name] = written
        print(f"{name}: {written.layers} layers, {written.file_bytes / GB:.2f} GB of files", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="janus-pro-1b,janus-pro-7b",
                        help="two registry names the real-size drill writes (comma-separated)")
    parser.add_argument("--gb", type=float, default=4.2, help="bfloat16 weights of each model, GB at most")
    parser.add_argument("--switches", type=int, default=5, help="rounds of picking each model in turn")
    parser.add_argument("--work", default=os.environ.get("TMPDIR", "/tmp") + "/switch_drill",
                        help="where the files and the page's Hugging Face cache go (deleted after)")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--page", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.page:
        print("RESULT " + json.dumps(page_main(json.loads(args.page))), flush=True)
        return 0
    from fakehub import FakeHub, client_env

    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if len(names) != 2:
        parser.error(f"--models: expected two names, got {args.models!r}")
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    try:
        written = write(names, work / "repos", args.gb)
        spec = {"models": names, "switches": args.switches}
        with FakeHub() as hub:
            for w in written.values():
                for repo, folder in w.repos.items():
                    hub.add_folder(repo, folder, on_disk=True)
            env = client_env(hub, work / "home", SCD_DECODE="process", SCD_THREADS="1")
            proc = subprocess.run([sys.executable, "-m", "bench", "switch-drill", "--page", json.dumps(spec)],
                                  env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=args.timeout)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            print(proc.stdout[-3000:], proc.stderr[-6000:], sep="\n")
            return 1
        result = json.loads(lines[-1][len("RESULT "):])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    larger = max(result["model_bytes"].values())
    bound = BOUND * (larger + result["page_alone"])
    result.update(files={n: w.file_bytes for n, w in written.items()}, layers={n: w.layers for n, w in written.items()},
                  larger_model=larger, bound=bound, ratio=result["peak"] / (larger + result["page_alone"]))
    print("RESULT " + json.dumps(result), flush=True)
    for s in result["switches"]:
        print(f"  {s['model']}: picked in {s['load_s']} s, {s['nfe']} passes, {s['workers']} worker(s), "
              f"page + workers {s['page_and_workers'] / GB:.2f} GB; {s['note'][-100:]}")
    ok = result["peak"] <= bound and result["most_workers"] <= 1 and not result["left_behind"]
    print(f"{args.switches} x ({' -> '.join(names)}): peak of page + workers {result['peak'] / GB:.2f} GB; "
          f"the larger model {larger / GB:.2f} GB + the page alone {result['page_alone'] / GB:.2f} GB = "
          f"{(larger + result['page_alone']) / GB:.2f} GB; ratio {result['ratio']:.2f} (at most {BOUND}); "
          f"at most {result['most_workers']} worker(s) at once, {result['workers_started']} started, "
          f"{len(result['left_behind'])} left behind: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1

