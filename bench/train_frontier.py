"""The frontier campaign: train image priors at 16x16 tokens one after another, and measure each.

    python -m bench train-frontier                       # run (or resume) the whole campaign
    python -m bench train-frontier --list                # the priors and how far each has got
    python -m bench train-frontier --only deep-local6    # one prior
    FRONTIER_ROOT=/somewhere python -m bench train-frontier --threads 2

Every prior trains on `tiny-64`'s tokens (the shipped 64 px tokenizer, `scd_core/assets/tiny64`,
encodes the emoji at 64 px into 16x16 codes of 512), with batch 32, lr 2e-3 and seed 0 like
`tiny-64`'s, and only its attention, depth, width and length of training change. When a prior
has trained its steps, it is exported (fp16, with the shipped tokenizer), its samples sheet is
drawn, and it is measured:

- the benchmark on the 16 held-out prompts (`scd_core/assets/tiny64/heldout_prompts.txt`), AR,
  SJD and SCD-MC at L 16, 32 and 64, 2 seeds, random drafts, the model's own settings;
- the influence curve (`python -m bench influence-curve`);
- the nearest-emoji rates, top 1 and top 10 (`python -m bench nearest-emoji`, at 32 px);

and one row per prior goes into `results.csv` (lead = SCD-MC's step compression over SJD's, at
each L, as in the docs' tables).
Snapshots kept during training (`snapshots`, or any copy of a prior's checkpoint saved as
`checkpoints/<name>_step<N>`) are measured the same way after every prior has finished, as
further points.

State lives under `FRONTIER_ROOT` (default `~/scd-frontier`), outside the work tree, so that a
fresh checkout resumes: data, tokens, checkpoints, exported models, benchmarks, `results.csv`
and `campaign.log`. Every stage is skipped when its output exists; a prior's trainer resumes
from its checkpoint. `--max-minutes` bounds each prior's training per run: a prior stopped by it
is left to the next run and the campaign goes on to the next prior. `--measure-only` measures
what has finished so far (snapshots included) without training, e.g. beside a running campaign.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import ROOT

SHIPPED = ROOT / "scd_core" / "assets" / "tiny64"
WINDOWS = (16, 32, 64)
COMMON = "--batch 32 --lr 2e-3 --heads 4 --eval-every 250 --max-eval 320"


@dataclass(frozen=True)
class Prior:
    name: str
    steps: int
    args: str                      # the trainer's architecture arguments
    note: str
    snapshots: tuple[int, ...] = ()


def local(n: int) -> str:
    return ",".join(["local"] * n)


# In the order they train: the most promising first.
PRIORS = [
    Prior("deep-local6", 1500, f"--d-model 128 --layers 6 --attention {local(6)} --local-rows 1 --local-cols 2",
          "six local layers, each one row up and two columns: the field grows to 6 rows, 12 columns",
          (800,)),
    Prior("local-full", 1000, "--d-model 128 --layers 4 --attention local,local,full,self --local-rows 1 --local-cols 1",
          "tiny-64's stack with its third layer seeing the whole prefix"),
    Prior("full-2000", 2000, "--d-model 128 --layers 4",
          "every layer full causal attention, trained to the end of a 2,000-step schedule", (800, 1200)),
    Prior("deep-local8", 1500, f"--d-model 128 --layers 8 --attention {local(8)} --local-rows 1 --local-cols 1",
          "eight local layers, one row up and one column each (PixelCNN's growth)", (800,)),
    Prior("local2-full2", 1000, "--d-model 128 --layers 4 --attention local,local,full,full --local-rows 1 --local-cols 1",
          "two local layers, then two that see the whole prefix", ()),
    Prior("full-d192", 2000, "--d-model 192 --layers 4", "full attention, wider", ()),
]

RESULT_COLUMNS = (["prior", "step", "steps", "attention", "d_model", "layers", "local_rows", "local_cols", "params_m",
                   "val_nll", "train_minutes"]
                  + [f"{m}_L{w}" for m in ("sjd", "scd_mc") for w in WINDOWS]
                  + [f"lead_L{w}" for w in WINDOWS]
                  + ["best_window", "best_lead", "top1_train", "top1_heldout", "top10_train", "top10_heldout",
                     "model", "command"])


class Campaign:
    def __init__(self, root: Path, threads: int, max_minutes: float, py: str, device: str = "cpu") -> None:
        self.root, self.threads, self.max_minutes, self.py, self.device = root, threads, max_minutes, py, device
        self.data64, self.data32 = root / "data" / "emoji64", root / "data" / "emoji32"
        self.tokens = root / "data" / "tokens64"
        self.vq = root / "checkpoints" / "vq64"
        self.results = root / "results.csv"

    def log(self, text: str) -> None:
        print(f"== [{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def run(self, args: list[str], **kw) -> int:
        self.log("$ " + " ".join(shlex.quote(str(a)) for a in args))
        return subprocess.run([str(a) for a in args], cwd=ROOT, **kw).returncode

    def must(self, args: list[str]) -> None:
        rc = self.run(args)
        if rc:
            raise SystemExit(f"failed ({rc}): {' '.join(map(str, args))}")

    # ------------------------------------------------------------------ shared inputs

    def prepare(self) -> None:
        if not (self.data64 / "images.safetensors").exists():
            self.must([self.py, "-m", "scd_core.train.data", "--out", self.data64, "--size", "64", "--big", "0"])
        if not (self.data32 / "images.safetensors").exists():
            self.must([self.py, "-m", "scd_core.train.data", "--out", self.data32, "--size", "32", "--big", "0"])
        if not self.vq.with_suffix(".json").exists():
            shipped_tokenizer_checkpoint(self.vq)
        if not (self.tokens / "image.safetensors").exists():
            self.must([self.py, "-m", "scd_core.train.tokens", "--data", self.data64, "--vq", SHIPPED,
                       "--out", self.tokens, "--what", "image", "--threads", self.threads])

    # ------------------------------------------------------------------ one prior

    def ckpt(self, name: str) -> Path:
        return self.root / "checkpoints" / name

    def step_of(self, ckpt: Path) -> int:
        record = ckpt.with_suffix(".json")
        return json.loads(record.read_text())["step"] if record.exists() else 0

    def snapshots_of(self, prior: Prior) -> list[Path]:
        """The checkpoints kept at earlier steps (`<name>_step<N>`, the trainer's --snapshots, or a
        copy of the checkpoint made by hand while it trains), by step."""
        found = self.ckpt(prior.name).parent.glob(f"{prior.name}_step*.json")
        return sorted((p.with_suffix("") for p in found), key=self.step_of)

    def train_command(self, prior: Prior) -> list[str]:
        return ([self.py, "-m", "scd_core.train.prior", "--kind", "image", "--tokens", self.tokens,
                 "--ckpt", self.ckpt(prior.name), "--steps", prior.steps]
                + COMMON.split() + prior.args.split()
                + (["--snapshots", ",".join(map(str, prior.snapshots))] if prior.snapshots else [])
                + ["--max-minutes", self.max_minutes, "--threads", self.threads, "--device", self.device])

    def train(self, prior: Prior) -> bool:
        """Train (or resume) `prior`; True when it has trained all its steps."""
        ckpt = self.ckpt(prior.name)
        if self.step_of(ckpt) < prior.steps:
            self.log(f"train {prior.name}: {prior.note}")
            t0 = time.time()
            self.must(self.train_command(prior))
            minutes_file = ckpt.with_name(prior.name + ".minutes")
            spent = float(minutes_file.read_text()) if minutes_file.exists() else 0.0
            minutes_file.write_text(f"{spent + (time.time() - t0) / 60:.1f}")
        step = self.step_of(ckpt)
        if step < prior.steps:
            self.log(f"{prior.name} stopped at step {step} of {prior.steps} (time limit): the next run goes on")
        return step >= prior.steps

    def measure(self, name: str, ckpt: Path, prior: Prior) -> None:
        """Export the checkpoint `ckpt` as `models/name`, draw its samples, benchmark it and add its row."""
        model = self.root / "models" / name
        bench = self.root / "bench"
        if not (model / "config.json").exists():
            self.must([self.py, "-m", "scd_core.train.export", "--vq", self.vq, "--image", ckpt, "--video", "none",
                       "--vocab", self.tokens / "vocab.json", "--out", model])
        if not (model / "samples_image.png").exists():
            self.must([self.py, "-m", "scd_core.train.samples", "--model", model, "--threads", self.threads])
        if not (bench / f"{name}.csv").exists():
            self.must([self.py, "-m", "scd_core.bench", "--model", model, "--methods", "ar,sjd,scd-mc",
                       "--windows", ",".join(map(str, WINDOWS)), "--seeds", "2",
                       "--prompts", SHIPPED / "heldout_prompts.txt", "--threads", self.threads,
                       "--csv", bench / f"{name}.csv", "--prompts-csv", bench / f"{name}-prompts.csv"])
        if not (bench / f"{name}-nearest.json").exists():
            self.must([self.py, "-m", "bench", "nearest-emoji", "--model", model, "--data", self.data32,
                       "--threads", self.threads, "--json", bench / f"{name}-nearest.json"])
        if not (bench / f"{name}-influence.csv").exists():
            self.must([self.py, "-m", "bench", "influence-curve", "--model", model, "--threads", self.threads,
                       "--csv", bench / f"{name}-influence.csv", "--out", bench / f"{name}-influence.png"])
        self.write_row(name, ckpt, prior, model)

    def write_row(self, name: str, ckpt: Path, prior: Prior, model: Path) -> None:
        record = json.loads(ckpt.with_suffix(".json").read_text())
        cfg = record["config"]
        bench = read_bench(self.root / "bench" / f"{name}.csv")
        near = next(iter(json.loads((self.root / "bench" / f"{name}-nearest.json").read_text()).values()))
        minutes_file = self.ckpt(prior.name).with_name(prior.name + ".minutes")
        row = {"prior": name, "step": record["step"], "steps": prior.steps,
               "attention": "/".join(cfg["attention"]) or "full", "d_model": cfg["d_model"],
               "layers": cfg["n_layers"], "local_rows": cfg["local_rows"], "local_cols": cfg["local_cols"],
               "params_m": round(params_of(model), 3), "val_nll": record.get("val_nll", ""),
               "train_minutes": minutes_file.read_text() if minutes_file.exists() and name == prior.name else "",
               "model": str(model), "command": " ".join(map(str, self.train_command(prior)[1:]))}
        row.update(lead_columns(bench))
        for key in ("top1_train", "top1_heldout", "top10_train", "top10_heldout"):
            row[key] = round(near[key], 4)
        rows = [r for r in read_results(self.results) if r["prior"] != name] + [row]
        with open(self.results, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=RESULT_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        self.log(f"{name}: lead {row['lead_L16']} / {row['lead_L32']} / {row['lead_L64']} at L 16 / 32 / 64, "
                 f"nearest top 1 {row['top1_train']:.1%} / {row['top1_heldout']:.1%}, top 10 "
                 f"{row['top10_train']:.1%} / {row['top10_heldout']:.1%} (training / held-out designs)")

    def status(self, priors: list[Prior]) -> None:
        done = {r["prior"] for r in read_results(self.results)}
        for p in priors:
            step = self.step_of(self.ckpt(p.name))
            print(f"{p.name:14s} step {step:5d} of {p.steps:5d}  {'measured' if p.name in done else ''}  {p.note}")


def read_results(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_bench(path: Path) -> dict:
    """{(method, L): mean step compression, (method-nfe, L): mean passes} from a benchmark CSV."""
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["method"] in ("sjd", "scd-mc"):
                w = int(r["window"])
                out[(r["method"], w)] = float(r["step_compression"])
                out[(r["method"] + "-nfe", w)] = float(r["nfe"])
    return out


def lead_columns(bench: dict) -> dict:
    """SJD's and SCD-MC's step compression, the lead at each window (SCD-MC's step compression
    over SJD's: how many times fewer passes SCD-MC needs, as `python -m bench lead-figure` and the
    docs' tables give it), and the best window with its lead, from `read_bench`'s table."""
    row = {}
    for w in WINDOWS:
        row[f"sjd_L{w}"] = round(bench[("sjd", w)], 3)
        row[f"scd_mc_L{w}"] = round(bench[("scd-mc", w)], 3)
        row[f"lead_L{w}"] = round(bench[("scd-mc", w)] / bench[("sjd", w)], 3)
    best = max(WINDOWS, key=lambda w: row[f"lead_L{w}"])
    row["best_window"], row["best_lead"] = best, row[f"lead_L{best}"]
    return row


def params_of(model: Path) -> float:
    """Millions of parameters in an exported prior."""
    from safetensors.torch import load_file

    return sum(t.numel() for t in load_file(str(model / "image_prior.safetensors")).values()) / 1e6


def shipped_tokenizer_checkpoint(dst: Path) -> None:
    """The shipped 64 px tokenizer as a trainer's checkpoint (`dst`.safetensors / .json), which
    the exporter reads: its weights widened to float32 (fp16 -> fp32 -> fp16 is exact)."""
    from safetensors.torch import load_file, save_file

    config = json.loads((SHIPPED / "config.json").read_text())
    tensors = {f"model.{k}": v.float().contiguous() for k, v in load_file(str(SHIPPED / "vq.safetensors")).items()}
    dst.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst.with_suffix(".safetensors")))
    vq = config["training"]["vq"]
    record = {"config": config["vq"], "step": vq["step"], "args": vq["args"],
              "eval": {k: v for k, v in vq.items() if k not in ("step", "args")}}
    dst.with_suffix(".json").write_text(json.dumps(record, indent=1))


def parse_prior(spec: str) -> Prior:
    """'NAME:STEPS:ARGS' -> a Prior (no snapshots)."""
    parts = spec.split(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or int(parts[1]) < 1:
        raise ValueError(f"expected NAME:STEPS:TRAINER ARGS, got {spec!r}")
    return Prior(parts[0], int(parts[1]), parts[2], "given on the command line")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path(os.environ.get("FRONTIER_ROOT", Path.home() / "scd-frontier")))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-minutes", type=float, default=600.0, help="each prior's training, per run")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="these priors only (repeatable)")
    ap.add_argument("--prior", action="append", default=[], metavar="NAME:STEPS:ARGS",
                    help="train this prior instead of the campaign's list (repeatable), e.g. "
                         "'small:20:--d-model 32 --layers 2'")
    ap.add_argument("--measure-only", action="store_true",
                    help="train nothing: measure the priors that have finished and every snapshot kept so far "
                         "(beside a running campaign, which then finds them measured)")
    ap.add_argument("--list", action="store_true", help="print the priors and their progress, and stop")
    ap.add_argument("--device", default="cpu", help="where the priors train (cpu or cuda); measuring stays on the CPU")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    try:
        listed = [parse_prior(spec) for spec in args.prior] or PRIORS
    except ValueError as err:
        raise SystemExit(f"--prior: {err}") from None
    names = {p.name for p in listed}
    unknown = sorted(set(args.only) - names)
    if unknown:
        raise SystemExit(f"--only: unknown prior(s) {unknown}; expected among {sorted(names)}")
    priors = [p for p in listed if not args.only or p.name in args.only]
    campaign = Campaign(args.root, args.threads, args.max_minutes, args.python, args.device)
    if args.list:
        campaign.status(priors)
        return
    args.root.mkdir(parents=True, exist_ok=True)
    campaign.prepare()
    finished = []
    for prior in priors:
        if args.measure_only and campaign.step_of(campaign.ckpt(prior.name)) < prior.steps:
            continue
        if args.measure_only or campaign.train(prior):
            campaign.measure(prior.name, campaign.ckpt(prior.name), prior)
            finished.append(prior)
    for prior in (priors if args.measure_only else finished):    # the snapshots: once every prior is done
        for snap in campaign.snapshots_of(prior):
            campaign.measure(f"{prior.name}_s{campaign.step_of(snap)}", snap, prior)
    campaign.log(f"campaign: {len(finished)} of {len(priors)} priors finished; results in {campaign.results}")
