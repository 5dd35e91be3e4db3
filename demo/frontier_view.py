"""`tiny` and `tiny-64` side by side, at the end of "How it works": what each draws for the
same prompts (samples of the shipped models, drawn once by `scripts/frontier_samples.py` into
`demo/static/frontier/`, each file naming its model, prompts and seeds), each one's lead over
SJD at its best window (from its benchmark table in `docs/bench/`), the frontier figure of
docs/embedded-models.md drawn as a chart of the page (from `docs/bench/frontier.csv`, the points
that section draws) and one sentence on what the two show. Both models' notes and their races' "why" link here (`#frontier`:
demo/static/load.js opens the tab and brings the view into sight)."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import numpy as np
from PIL import Image

from demo import charts

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("tiny", "tiny-64")                        # the one that draws, the one that leads
# Each model's benchmark on held-out prompts (docs/embedded-models.md's table of step compression)
BENCH = {"tiny": ROOT / "docs" / "bench" / "tiny-heldout.csv",
         "tiny-64": ROOT / "docs" / "bench" / "tiny-64-heldout.csv"}
FRONTIER = ROOT / "docs" / "bench" / "frontier.csv"   # the campaign's priors, one row each
# What docs/embedded-models.md's figure draws beside the campaign's rows ("The frontier: drawing
# against leading"): the two shipped priors' nearest-emoji rates (top 10, training designs), the
# goals, the paper's lead on Lumina-mGPT, and the rows it leaves out (a 20-step pipeline check;
# a snapshot under its finished run's point).
NEAREST_EMOJI = {"tiny": 0.25, "tiny-64": 0.031}
LEAD_GOAL = 1.6
REFERENCES = {"Lumina-mGPT, the paper (L 64)": 1.82}
LEFT_OUT = ("d32-20steps", "deep-local6_s605")
SAMPLES = Path(__file__).resolve().parent / "static" / "frontier"
ANCHOR = "frontier"                                 # the view's id, the links' target
GRID = {"tiny": "8x8 tokens, each layer reads the whole prefix",
        "tiny-64": "16x16 tokens, each layer reads only its neighbours"}


def samples_file(name: str) -> Path:
    return SAMPLES / f"{name}.png"


@dataclass(frozen=True)
class Samples:
    """A shipped samples picture and what its file says it shows."""
    picture: np.ndarray       # [H, W, 3] uint8: one row per prompt, one column per seed
    model: str
    prompts: tuple[str, ...]
    seeds: tuple[int, ...]
    command: str
    tokens: np.ndarray        # [prompts x seeds, N] the sampled tokens, row by row (empty if not carried)


def read_samples(name: str, path: Path | None = None) -> Samples:
    """The samples picture of `name` with the words its PNG carries (`scripts/frontier_samples.py`
    writes them); ValueError when the file is another model's."""
    with Image.open(path or samples_file(name)) as img:
        meta = dict(img.text)
        picture = np.asarray(img.convert("RGB"))
    if meta.get("model") != name:
        raise ValueError(f"name: the samples file of {name!r} holds {meta.get('model')!r}'s")
    tokens = np.array([[int(t) for t in line.split()] for line in meta.get("tokens", "").splitlines()], dtype=np.int64)
    return Samples(picture, name, tuple(meta["prompts"].split("\n")), tuple(int(s) for s in meta["seeds"].split(",")),
                   meta.get("command", ""), tokens)


@dataclass(frozen=True)
class Lead:
    """SCD-MC's lead over SJD at the window where it is largest, from a benchmark table."""
    window: int
    lead: float               # SCD-MC's step compression over SJD's: how many times fewer passes
    sjd: float                # SJD's step compression there (tokens per pass)
    scd_mc: float


def best_lead(path: Path, init: str = "random") -> Lead:
    """The lead at the best window of a `python -m scd_core.bench --csv` table, as
    docs/embedded-models.md and the frontier campaign define it (SCD-MC's step compression over
    SJD's at the same window and draft init, chains only)."""
    compression: dict[tuple[str, int], float] = {}
    with path.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["method"] in ("sjd", "scd-mc") and r["init"] == init and r.get("tree", "1x0") == "1x0":
                compression[(r["method"], int(r["window"]))] = float(r["step_compression"])
    windows = sorted(w for m, w in compression if m == "sjd" and ("scd-mc", w) in compression)
    if not windows:
        raise ValueError(f"path: {path.name} has no SJD and SCD-MC rows at one window with {init!r} drafts")
    best = max(windows, key=lambda w: compression[("scd-mc", w)] / compression[("sjd", w)])
    sjd, scd = compression[("sjd", best)], compression[("scd-mc", best)]
    return Lead(best, scd / sjd, sjd, scd)


def lead_words(name: str, lead: Lead) -> str:
    """Under a model's samples: its lead at its best window and where the figure comes from."""
    return (f"SCD-MC needs **{lead.lead:.2f}x** fewer passes than SJD at its best window, L {lead.window} "
            f"({lead.scd_mc:.2f} tokens per pass against {lead.sjd:.2f}; held-out prompts, "
            f"`docs/bench/{BENCH[name].name}`).")


def sentence(leads: dict[str, Lead]) -> str:
    """The one sentence the view says: no prior trained so far both draws and leads."""
    return (f"No model trained here so far does both: `tiny` draws what its prompt names but leads SJD by only "
            f"{leads['tiny'].lead:.2f}x, while `tiny-64` leads by {leads['tiny-64'].lead:.2f}x but draws colour "
            "fields.")


def title(s: Samples) -> str:
    """A samples picture's title, which also names it for a screen reader (demo/static/load.js)."""
    return (f"{s.model} ({GRID[s.model]}): {len(s.seeds)} samples each of "
            + ", ".join(s.prompts) + ", one prompt a row")


FIGURE_TITLE = ("Every prior trained so far: its lead over SJD at its best window (up) against how often its "
                "samples are recognised as the emoji named (right)")
FIGURE_NOTE = ("One point per trained prior (docs/embedded-models.md, \"The frontier: drawing against leading\"); "
               "the dashed lines are the two goals, the dotted one Lumina-mGPT's lead in the paper.")


def prior_name(row: dict) -> str:
    """A campaign prior in words, from what it is (not its training run's name): which of its
    layers read the whole prefix, and its step where it was measured before its last."""
    layers, full = int(row["layers"]), row["attention"].split("/").count("full")
    name = f"{layers} local layers" if full == 0 else \
        f"{full} of {layers} layers {'reads' if full == 1 else 'read'} the whole prefix"
    step, steps = int(row["step"]), int(row["steps"])
    return name + (f", at step {step:,} of {steps:,}" if step < steps else "")


def frontier_points(path: Path = FRONTIER) -> list[tuple[str, float, float]]:
    """(name in words, nearest-emoji rate, lead at the best window) of every prior the figure
    draws: `tiny` and `tiny-64` (their leads from their held-out benchmarks), then the campaign's."""
    shipped = [(f"{m}: {GRID[m].split(' ')[0]}, {'reads the whole prefix' if m == 'tiny' else 'local layers'}",
                NEAREST_EMOJI[m], best_lead(BENCH[m]).lead) for m in MODELS]
    with path.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["prior"] not in LEFT_OUT]
    return shipped + [(prior_name(r), float(r["top10_train"]), float(r["best_lead"])) for r in rows]


def figure():
    """The frontier, drawn as a chart of the page (its theme, its words)."""
    return charts.frontier_figure(frontier_points(), LEAD_GOAL, NEAREST_EMOJI["tiny"], REFERENCES)


def model_link(name: str) -> str:
    """At the end of the note under the model, for the two models compared: a link to them side by side."""
    if name not in MODELS:
        return ""
    other = MODELS[1 - MODELS.index(name)]
    return f" [Why it {'leads SJD by little' if name == 'tiny' else 'draws colour fields'}: beside {other}](#{ANCHOR})"


def picture(elem_id: str, value: np.ndarray) -> gr.Image:
    """A shipped picture, drawn as the page draws its own (no label or tool bar; named by the
    title above it)."""
    return gr.Image(value, show_label=False, buttons=[], format="png", type="numpy", interactive=False,
                    elem_id=elem_id, container=False, elem_classes="bare")


def layout(told: str = "") -> None:
    """The view, inside the Blocks context where it goes: its heading, the sentence, the two
    models' samples with their leads (`told`: under `tiny`'s, how its leads elsewhere relate),
    the figure."""
    leads = {m: best_lead(BENCH[m]) for m in MODELS}
    with gr.Column(elem_id=ANCHOR):
        gr.Markdown("## Why `tiny` draws and `tiny-64` leads\n\n" + sentence(leads), elem_id="frontier-sentence")
        with gr.Row():
            for m in MODELS:
                s = read_samples(m)
                with gr.Column(min_width=240):
                    gr.Markdown(title(s), elem_classes="panel-title")
                    picture(f"frontier-{m}", s.picture)
                    gr.Markdown(lead_words(m, leads[m]) + (f"\n\n{told}" if told and m == "tiny" else ""),
                                elem_id=f"frontier-lead-{m}")
        gr.Markdown(FIGURE_TITLE, elem_classes="panel-title")
        gr.Plot(figure(), show_label=False, elem_id="frontier-figure", elem_classes="chart")
        gr.Markdown(FIGURE_NOTE, elem_id="frontier-note")
