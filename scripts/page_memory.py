"""The memory of the page and its decoding workers while a full-size Janus-Pro-1B serves a
Generate, a race and an export: the resident set (RSS) of the page's process and of every
process under it, sampled every 0.2 s.

    python scripts/page_memory.py build DIR      # random-weight Janus-Pro-1B into DIR's Hub cache
    python scripts/page_memory.py measure DIR [--repo TREE] [--dtype bfloat16] [--out FILE.json]

`build` makes Janus-Pro-1B at its published size (the sizes of deepseek-community/Janus-Pro-1B's
config.json: a 24-layer, 2048-wide Llama with a 102400-token vocabulary, the SigLIP-L
vision tower, the 16384-code VQ decoder: 1.87 B parameters, 3.7 GB of safetensors) with
random weights in bfloat16,
and writes it as `save_pretrained` writes it (config, safetensors with their index, a word-level
tokenizer and the processor's files, the generation config with the image-start id) into
DIR/hub as the Hugging Face cache holds a download of that repository. `measure` starts
`python app.py` from TREE (default: this repository; an older tree measures the page as it
was) with HF_HOME=DIR, HF_HUB_OFFLINE=1 and SCD_DECODE=process, so that `janus-pro-1b` loads
from that cache with no network, then through gradio_client runs one Generate, one race and
one export of the Generate on it, and prints the memory of the page, of its workers and their
sum: the resident set (RSS), its anonymous part, and the proportional set size (PSS, which
counts a page shared by two processes half in each: a file both map, such as safetensors
weights read in place, is counted once in the summed PSS and twice in the summed RSS), at rest
before, at the end of each step, and at the peak of each step. A pass of the
full-size model takes seconds on a CPU, so the Generate and the race are stopped `--run-for`
seconds after their first pass (the race: after its warm-up of every method, into its first
timed run); the export draws every pass the Generate made. `--dtype bfloat16` loads the
large models in bfloat16 on the CPU too (a sitecustomize module on PYTHONPATH sets the
loaders' default dtype in every process of the run), which halves the weights: two float32
copies of Janus-Pro-1B (15 GB) do not fit beside the rest on a shared 24 GB machine.

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
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HUB_ID = "deepseek-community/Janus-Pro-1B"
REVISION = "0" * 40                        # the snapshot's name in the cache (a commit hash)
BOS, PAD, BOI, EOI, IMAGE = 100000, 100015, 100016, 100593, 100581


# ----------------------------------------------------------------------------------- build

def janus_pro_1b_config():
    from transformers import JanusConfig, JanusVisionConfig, JanusVQVAEConfig, LlamaConfig

    text = LlamaConfig(vocab_size=102400, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                       num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=16384,
                       bos_token_id=BOS, eos_token_id=100001, pad_token_id=PAD)
    vision = JanusVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                               image_size=384, patch_size=16, projection_dim=2048, num_image_tokens=576)
    vq = JanusVQVAEConfig(embed_dim=8, num_embeddings=16384, projection_dim=2048, image_token_embed_dim=2048)
    return JanusConfig(text_config=text, vision_config=vision, vq_config=vq, image_token_id=IMAGE)


def processor():
    """A JanusProcessor whose word-level tokenizer knows a few words and the special tokens at
    Janus-Pro's ids (the model's prompt template and postprocessing are the real ones)."""
    from scd_core.models.standins import janus_processor

    return janus_processor("a the red blue green apple cat dog on of in with photo".split(), pad=PAD, bos=BOS,
                           eos=100001, image=IMAGE, boi=BOI, eoi=EOI, num_image_tokens=576)


def build(home: Path, store: str = "bfloat16") -> None:
    import torch
    from transformers import JanusForConditionalGeneration

    snapshot = home / "hub" / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / REVISION
    if (snapshot / "config.json").exists():
        print(f"already built: {snapshot}")
        return
    snapshot.mkdir(parents=True)
    torch.set_default_dtype(torch.bfloat16)             # random weights made in bfloat16: 4.2 GB, not 8.4
    torch.manual_seed(0)
    started = time.perf_counter()
    model = JanusForConditionalGeneration(janus_pro_1b_config()).eval()
    model.generation_config.generation_kwargs = {"boi_token_id": BOI}
    model.generation_config.bos_token_id, model.generation_config.pad_token_id = BOS, PAD
    params = sum(p.numel() for p in model.parameters())
    model.to(getattr(torch, store)).save_pretrained(snapshot, max_shard_size="2GB")
    processor().save_pretrained(snapshot)
    (snapshot.parent.parent / "refs").mkdir(exist_ok=True)
    (snapshot.parent.parent / "refs" / "main").write_text(REVISION)
    size = sum(f.stat().st_size for f in snapshot.iterdir())
    print(f"built {params / 1e9:.2f} B parameters, {size / 1e9:.2f} GB of files in "
          f"{time.perf_counter() - started:.0f} s: {snapshot}")


# --------------------------------------------------------------------------------- measure

SITECUSTOMIZE = '''"""page_memory.py: the large models load in bfloat16 on the CPU too, in every process."""
import torch
import scd_core.models.checkpoints as _checkpoints

_pick = _checkpoints.pick_device_dtype


def _bfloat16(device=None, dtype=None):
    return _pick(device, torch.bfloat16 if dtype in (None, "auto") else dtype)


_checkpoints.pick_device_dtype = _bfloat16
'''


FIELDS = ("rss", "anon", "pss")   # resident set; its anonymous part (not file pages); PSS: shared pages split


def memory_kb(pid: int) -> tuple[int, int, int]:
    """(RSS, anonymous RSS, PSS) of a process in kB; zeros once it is gone. A file mapped by
    two processes (safetensors weights read in place) counts in each one's RSS but once in
    their summed PSS."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            status = {line.split(":")[0]: line.split()[1] for line in f if line.startswith(("VmRSS", "RssAnon"))}
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
            pss = next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        return int(status["VmRSS"]), int(status["RssAnon"]), pss
    except (FileNotFoundError, ProcessLookupError, StopIteration, KeyError):
        return 0, 0, 0


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", encoding="utf-8") as f:
                    kids = [int(c) for c in f.read().split()]
                out += kids
                todo += kids
        except FileNotFoundError:
            continue
    return out


class Sampler:
    """The memory (`memory_kb`) of the page (pid) and the sum over its descendants, every
    `every` s; the peak of each step by summed RSS."""

    def __init__(self, page: int, every: float = 0.2) -> None:
        self.page, self.every, self.step = page, every, "rest"
        self.peaks: dict[str, dict] = {}
        self.last: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            page = memory_kb(self.page)
            kids = [memory_kb(p) for p in descendants(self.page)]
            workers = tuple(sum(k[i] for k in kids) for i in range(3))
            self.last = {"page": page, "workers": workers, "sum": tuple(a + b for a, b in zip(page, workers))}
            if self.last["sum"][0] > self.peaks.get(self.step, {"sum": (0, 0, 0)})["sum"][0]:
                self.peaks[self.step] = self.last
            time.sleep(self.every)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def texts(job) -> list[str]:
    """The words a job's latest update shows (its status lines)."""
    outputs = job.outputs()
    last = outputs[-1] if outputs else ()
    return [o for o in (last if isinstance(last, (list, tuple)) else [last]) if isinstance(o, str)
            and not o.endswith((".png", ".mp4", ".gif"))]


def measure(home: Path, tree: Path, dtype: str | None, threads: int, run_for: float) -> dict:
    from gradio_client import Client

    hook = tempfile.mkdtemp(prefix="scd-page-memory-")
    if dtype:
        Path(hook, "sitecustomize.py").write_text(SITECUSTOMIZE)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SCD_", "SPACES_"))}
    env.update(HF_HOME=str(home), HF_HUB_OFFLINE="1", SCD_DECODE="process", SCD_THREADS=str(threads),
               GRADIO_SERVER_PORT=str(port), PYTHONPATH=os.pathsep.join([hook, str(tree)]))
    page = subprocess.Popen([sys.executable, "app.py"], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(Path(hook, "page.log"), "w"))
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            client = Client(url, verbose=False)
            break
        except Exception:                                  # noqa: BLE001 - not up yet
            time.sleep(1)
    else:
        page.kill()
        raise SystemExit(f"the page did not start: {Path(hook, 'page.log').read_text()[-2000:]}")
    sampler, report = Sampler(page.pid), {}
    time.sleep(3)
    report["rest"] = sampler.last

    # the page's inputs: model, method, window, init, temperature, top-k, top-p, CFG, seed, prompt,
    # slow motion, race samples, clip, clip text, draft tree
    inputs = ["janus-pro-1b", "scd-mc", 16, "random", 1.0, 1000, 1.0, 5.0, 0, "a red apple", 0.0, 2, "", "",
              "chain (no tree)"]
    timings, said = {}, {}
    for step, api, started_when, then in (("generate", "/generate", "NFE", run_for),
                                          ("race", "/race", "one image alone", run_for),
                                          ("export", "/export", None, 0)):
        sampler.step = step
        started = time.perf_counter()
        job = client.submit(api_name=api) if api == "/export" else client.submit(*inputs, api_name=api)
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
    page.terminate()
    page.wait(30)
    return {"at_end_kb": report, "peak_kb": sampler.peaks, "seconds": timings, "said": said, "tree": str(tree),
            "dtype": dtype}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("build", "measure"))
    parser.add_argument("home", type=Path, help="the Hugging Face home (HF_HOME) that holds the model")
    parser.add_argument("--repo", type=Path, default=REPO, help="the tree whose app.py is measured")
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
    result = measure(args.home, args.repo.resolve(), args.dtype, args.threads, args.run_for)
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


if __name__ == "__main__":
    main()
