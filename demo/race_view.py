"""A race as the page shows it (the race itself is `scd_core.race`): each method's samples at
a tick of the replay, its progress line, the summary table, why SCD leads SJD by what it does
here, how it was run, and the benchmark command that gives the same per-sample figures."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import numpy as np

from demo.charts import race_figures
from demo.labels import METHOD_LABELS
from demo.pictures import render_iteration, tile_frames
from scd_core.race import MethodSummary, Race, Sensitivity, Spread, Timing, summarise


def bench_command(model_name: str, race: Race, samples: int, seeds: int | None = None,
                  batch: int = 1) -> str:
    """The benchmark command whose per-sample figures match a race's (seeds 0..K-1 when the
    race's seed is 0: the bench numbers its seeds from 0); with `seeds` 1 and `batch` K, the
    one that times the race's batch of K."""
    settings = race.settings
    prompt = race.prompt.replace("'", "'\\''")
    return (f"printf '%s\\n' '{prompt}' > prompt.txt && python -m scd_core.bench --model {model_name} "
            f"--prompts prompt.txt --seeds {samples if seeds is None else seeds}"
            + (f" --batch {batch}" if batch > 1 else "")
            + f" --windows {settings.window} --inits {settings.init} "
            f"--temperature {settings.temperature:g} --top-k {settings.top_k} --top-p {settings.top_p:g} "
            f"--cfg-scale {settings.cfg_scale:g}")


def explain_gap(summary: Sequence[MethodSummary], probe: Sensitivity | None) -> str:
    """One or two sentences, every figure measured: SCD's lead over SJD and what explains it."""
    by = {s.method: s for s in summary}
    sjd, mc = by.get("sjd"), by.get("scd-mc")
    if sjd is None or mc is None:
        return ""
    ratio = sjd.nfe.mean / mc.nfe.mean
    if mc.same_as_ar is not None:                     # greedy: every draft is the argmax, nothing to couple
        same = all(s.same_as_ar for s in summary if s.same_as_ar is not None)
        return (f"**Greedy**: every token is the most likely one, so there is no randomness to couple: "
                f"SJD and SCD draft the same argmax tokens, so their passes are alike (mean NFE "
                f"{mc.nfe.mean:.1f} against {sjd.nfe.mean:.1f}), and "
                + ("every method returned exactly AR's tokens." if same else
                   "a method did NOT return AR's tokens (see the table): that is a defect."))
    text = (f"Here SCD maximal coupling needs **{ratio:.2f}x fewer passes** than SJD "
            f"(mean NFE {mc.nfe.mean:.1f} against {sjd.nfe.mean:.1f}). Coupling keeps "
            f"{mc.draft_stability.mean:.0%} of the carried-over drafts unchanged from one pass to the "
            f"next, against {sjd.draft_stability.mean:.0%} for SJD's fresh draws.")
    if probe is not None:
        text += (f" Redrawing one token moves {probe.tv_next:.0%} of the model's probability to other "
                 f"tokens at the next position, and {probe.tv_further:.0%} on average further along the "
                 f"window; ")
        text += ("p further along barely moves, so coupled drafts there stay valid and are accepted "
                 "once the window reaches them." if probe.tv_further < 0.02 else
                 "because p further along moves too, coupled drafts there go stale and are redrawn, "
                 f"while two independent draws already agree {probe.collision:.0%} of the time, "
                 "so SJD loses less to flicker.")
    return text


# ----------------------------------------------------------------------------- tables

def _spread(s: Spread, fmt: str = "{:.2f}", ends: str | None = None) -> str:
    """'mean (min–max)', or the value alone when every sample gave the same."""
    if s.count < 2 or s.low == s.high:
        return fmt.format(s.mean)
    ends = ends or fmt
    return f"{fmt.format(s.mean)} ({ends.format(s.low)}–{ends.format(s.high)})"


RACE_HEADERS = ["method", "same tokens as AR", "NFE: mean (min–max)", "step compression",
                "one image: seconds (vs AR)", "batch of K: images/s (vs AR)", "mean accepted length",
                "acceptance rate", "draft stability"]


def _timed(value: str, speedup: float | None) -> str:
    return value + (f" ({speedup:.2f}x)" if speedup is not None else "")


def race_rows(summaries: Sequence[MethodSummary], greedy: bool) -> list[list[str]]:
    rows = []
    for s in summaries:
        if s.method == "ar":
            same = "— (reference)"
        elif not greedy:
            same = "n/a (sampling)"
        else:
            same = "—" if s.same_as_ar is None else "yes" if s.same_as_ar else "NO"
        spec, t = s.method != "ar", s.timing
        rows.append([METHOD_LABELS.get(s.method, s.method), same, _spread(s.nfe, "{:.1f}", "{:.0f}"),
                     f"{s.step_compression.mean:.2f}x",
                     _timed(f"{t.latency:.2f} s", s.latency_speedup) if t else "—",
                     _timed(f"{t.throughput:.1f}/s", s.throughput_speedup) if t else "—",
                     _spread(s.mean_accepted_length) if spec else "—",
                     _spread(s.acceptance_rate) if spec else "—",
                     _spread(s.draft_stability) if spec else "—"])
    return rows


def race_table_html(summaries: Sequence[MethodSummary], greedy: bool) -> str:
    """The race summary as a compact HTML table that wraps instead of scrolling."""
    if not summaries:
        return ""
    head = "".join(f"<th>{h}</th>" for h in RACE_HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{v}</td>" for v in r) + "</tr>"
                   for r in race_rows(summaries, greedy))
    return (f'<table id="race-table" style="width:100%;table-layout:fixed;font-size:0.9em;'
            f'border-collapse:collapse"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def race_progress(runs: dict, tick: int | None, note: str = "") -> str:
    """Per method at NFE `tick` (the end when None): tokens committed, mean over the samples,
    or when its slowest sample finished."""
    parts = []
    for method, run in runs.items():
        its = run.last() if tick is None else run.at(tick)
        n = [int(it.n_after[0]) for it in its]
        parts.append(f"**{METHOD_LABELS[method]}** " + (
            f"all done at NFE {max(it.index for it in its) + 1} ✓" if min(n) >= run.num_tokens else
            f"{sum(n) / len(n):.0f}/{run.num_tokens}"))
    return ("" if tick is None else f"NFE {tick}: ") + " · ".join(parts) + (f"  \n{note}" if note else "")


def timing_sentence(summaries: Sequence[MethodSummary], device: str) -> str:
    """The two times in words: which method gives one image soonest, which the most images
    per second, and whether any row from outside the race shared its passes."""
    timed = [s for s in summaries if s.timing is not None]
    if not timed:
        return ""
    fast = min(timed, key=lambda s: s.timing.latency)
    many = max(timed, key=lambda s: s.timing.throughput)
    text = (f"**One image** (one row decoded alone on {device}): {METHOD_LABELS[fast.method]} is done "
            f"soonest, in {fast.timing.latency:.2f} s. **A batch of {fast.timing.batch}** (rows sharing "
            f"passes): {METHOD_LABELS[many.method]} gives the most images per second, "
            f"{many.timing.throughput:.1f}.")
    if device.startswith("CPU"):
        text += (" On a CPU a batched AR pass costs little more than a single one, so AR gains most "
                 "from the batch, while a pass over a window of L tokens costs more than a one-token pass.")
    if not all(s.timing.alone for s in timed):
        text += " Other visitors' rows shared some of these passes: the times are not the methods' alone."
    return text


def race_note(samples: int, seed: int, greedy: bool, device: str, bench: str, batch_bench: str) -> str:
    """How the race was run and timed, and the benchmark commands that give the same figures."""
    return (f"{samples} samples per method (seeds {seed}–{seed + samples - 1}) for the figures; each "
            f"method first decodes one image alone (seed {seed}: its seconds are the engine's, timed "
            f"where it decodes, on **{device}**), then the {samples} rows together (images/s: K over the "
            f"batch's engine seconds, timed there too).  \n"
            + ("**Greedy**: every method must return exactly AR's tokens; the second column checks it."
               if greedy else "**Sampling**: the methods draw different samples from the same "
               "distribution; tick *Greedy* to see identical tokens.")
            + f"  \nThe same NFE, step compression, mean accepted length, acceptance rate and draft "
            f"stability from the benchmark: `{bench}`" + (" (it numbers seeds from 0)" if seed else "")
            + f". One image's seconds: the same with `--seeds 1` (column wall_s); the batch's: "
            f"`{batch_bench}` ({samples} / wall_s images per second).")


def race_decoding(run, phase: str = "") -> str:
    """A method's rows while they decode, or where Stop ended them."""
    label, N = METHOD_LABELS[run.method], run.num_tokens
    n = min((int(it.n_after[0]) for it in run.last()), default=0)
    what = phase or f"{run.rows} samples"
    if run.stopped:
        return (f"**Stopped at NFE {run.nfe}, {n}/{N} tokens** (the slowest of {run.rows} samples) "
                f"while decoding {label}; the methods before it finished.")
    return f"Decoding **{label}**: {what} · NFE {run.nfe} · {n}/{N} tokens in the slowest sample"


class RacePanels:
    """Each method's samples at a tick of the race replay, redrawn only when they changed:
    all K samples of an image model, or the frames of one sample (`sample`) of a video model."""

    def __init__(self, model, sample: int | None = None) -> None:
        self.model, self.sample, self._drawn = model, sample, {}

    def at(self, runs: dict, tick: int | None = None) -> dict[str, np.ndarray]:
        """{method: picture} after `tick` passes (the end when None)."""
        out = {}
        for method, run in runs.items():
            shown = run.pictures_at(tick)
            if not shown:
                continue
            rows = list(range(len(shown))) if self.sample is None else [min(self.sample, len(shown) - 1)]
            key = tuple((b, shown[b][0].index) for b in rows)
            if self._drawn.get(method, (None,))[0] != key:
                target = 96 if len(tuple(self.model.grid)) < 3 else 256     # video: frames >= 96 px
                pics = [render_iteration(self.model, shown[b][0], 0, target=target, decode=shown[b][1])
                        for b in rows]
                self._drawn[method] = (key, tile_frames(pics, cols=min(4, len(pics)), gap=4))
            out[method] = self._drawn[method][1]
        return out


def race_report(name: str, race, runs: dict, samples: int, device: str, probe=None,
                timings: dict[str, Timing] | None = None) -> tuple:
    """A finished race as shown: its table (HTML), why SCD's lead over SJD is what it is (with
    `probe`, `race.gap_probe`'s measure of how far p moves), how it was run and timed with
    the benchmark commands that give the same figures, and its three charts."""
    greedy = race.settings.greedy
    table = summarise(runs, greedy, timings)
    timing = timing_sentence(table, device)
    note = race_note(samples, race.seed, greedy, device, bench_command(name, race, samples),
                     bench_command(name, race, samples, seeds=1, batch=samples))
    return (race_table_html(table, greedy), explain_gap(table, probe),
            (timing + "  \n" if timing else "") + note, race_figures(runs, samples))


# ------------------------------------------------- texture against tiny, from the benchmark

BENCH_DIR = Path(__file__).resolve().parents[1] / "docs" / "bench"
WHY = {
    "texture": "p at a position depends only on the tokens to its left and above: a redrawn token "
               "moves p right next to it and nowhere further, so the drafts further along that coupling "
               "keeps stay right until the window reaches them, while SJD redraws them and loses them.",
    "tiny": "the trained model reads its whole prefix, so a redrawn token moves p further along too "
            "and coupled drafts there go stale; and a quarter of its tokens are near-certain "
            "background, where two independent draws already agree, so SJD loses less by redrawing.",
}


def shipped_passes(model: str, window: int = 16, init: str = "random",
                   directory: Path = BENCH_DIR) -> dict[str, float]:
    """{method: mean passes per image} from the benchmark's shipped table for `model`
    (docs/bench/<model>.csv), at this window and draft init."""
    with (directory / f"{model}.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {r["method"]: float(r["nfe"]) for r in rows
            if r["method"] == "ar" or (int(r["window"]) == window and r["init"] == init)}


def ratios_markdown(models: Sequence[str] = ("texture", "tiny"), directory: Path = BENCH_DIR) -> str:
    """SJD's and SCD-MC's passes per image on each model side by side, their ratio, and one
    sentence each on why it differs (the benchmark's shipped figures, L = 16, random drafts)."""
    lines = ["| model | AR | SJD | SCD-MC | SJD / SCD-MC |", "|---|---|---|---|---|"]
    why = []
    for m in models:
        p = shipped_passes(m, directory=directory)
        lines.append(f"| `{m}` | {p['ar']:.0f} | {p['sjd']:.1f} | {p['scd-mc']:.1f} | "
                     f"**{p['sjd'] / p['scd-mc']:.2f}x** |")
        if m in WHY:
            why.append(f"- **{m}**: {WHY[m]}")
    return ("**Passes per image** (forward passes to finish one image; fewer is faster), from the "
            "benchmark's shipped tables (`docs/bench/<model>.csv`: `python -m scd_core.bench`, window "
            "16, random drafts, means over prompts and seeds):\n\n" + "\n".join(lines)
            + ("\n\nWhy the ratio differs:\n\n" + "\n".join(why) if why else ""))
