"""A race as the page shows it (the race itself is `scd_core.race`): each method's samples at
a tick of the replay, its progress line, the summary table, why SCD leads SJD by what it does
here, how it was run, and the benchmark command that gives the same per-sample figures."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from demo.charts import race_figures
from demo.labels import METHOD_LABELS
from demo.pictures import render_samples
from scd_core.race import MethodSummary, Race, Sensitivity, Spread, summarise


def bench_command(model_name: str, race: Race, samples: int) -> str:
    """The benchmark command whose per-sample figures match a race's (seeds 0..K-1 when the
    race's seed is 0: the bench numbers its seeds from 0)."""
    settings = race.settings
    prompt = race.prompt.replace("'", "'\\''")
    return (f"printf '%s\\n' '{prompt}' > prompt.txt && python -m scd_core.bench --model {model_name} "
            f"--prompts prompt.txt --seeds {samples} --windows {settings.window} --inits {settings.init} "
            f"--temperature {settings.temperature:g} --top-k {settings.top_k} --top-p {settings.top_p:g} "
            f"--cfg-scale {settings.cfg_scale:g}")


def explain_gap(summary: Sequence[MethodSummary], probe: Sensitivity | None) -> str:
    """One or two sentences, every figure measured: SCD's lead over SJD and what explains it."""
    by = {s.method: s for s in summary}
    sjd, mc = by.get("sjd"), by.get("scd-mc")
    if sjd is None or mc is None:
        return ""
    ratio = sjd.nfe.mean / mc.nfe.mean
    text = (f"Here SCD maximal coupling needs **{ratio:.2f}x fewer passes** than SJD "
            f"(mean NFE {mc.nfe.mean:.1f} against {sjd.nfe.mean:.1f}). Coupling keeps "
            f"{mc.draft_stability.mean:.0%} of the carried-over drafts unchanged from one pass to the "
            f"next, against {sjd.draft_stability.mean:.0%} for SJD's fresh draws.")
    if probe is not None:
        text += (f" Redrawing one token moves p by a total variation of {probe.tv_next:.2f} at the next "
                 f"position and {probe.tv_further:.2f} on average further along the window; ")
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
                "latency speed-up", "mean accepted length", "acceptance rate", "draft stability",
                "wall (s)"]


def race_rows(summaries: Sequence[MethodSummary], greedy: bool) -> list[list[str]]:
    rows = []
    for s in summaries:
        if s.method == "ar":
            same = "— (reference)"
        elif not greedy:
            same = "n/a (sampling)"
        else:
            same = "—" if s.same_as_ar is None else "yes" if s.same_as_ar else "NO"
        spec = s.method != "ar"
        rows.append([METHOD_LABELS.get(s.method, s.method), same, _spread(s.nfe, "{:.1f}", "{:.0f}"),
                     f"{s.step_compression.mean:.2f}x",
                     f"{s.latency_speedup:.2f}x" if s.latency_speedup is not None else "—",
                     _spread(s.mean_accepted_length) if spec else "—",
                     _spread(s.acceptance_rate) if spec else "—",
                     _spread(s.draft_stability) if spec else "—",
                     f"{s.wall:.2f}"])
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
        it = run.records[-1] if tick is None else run.at(tick)
        done = int(it.n_after.min()) >= run.num_tokens
        parts.append(f"**{METHOD_LABELS[method]}** " + (
            f"all done at NFE {it.index + 1} ✓" if done else
            f"{float(it.n_after.float().mean()):.0f}/{run.num_tokens}"))
    return ("" if tick is None else f"NFE {tick}: ") + " · ".join(parts) + (f"  \n{note}" if note else "")


def race_note(samples: int, seed: int, greedy: bool, device: str, bench: str) -> str:
    """How the race was run and timed, and the benchmark command that gives the same figures."""
    cpu = (" On a CPU latency follows NFE poorly: a pass over a window of L tokens costs more "
           "than a single-token pass, and batched AR passes are cheap." if device.startswith("CPU") else "")
    return (f"{samples} samples per method (seeds {seed}–{seed + samples - 1}), each method's batch "
            f"decoded alone and timed on its own (engine time, rendering excluded) on **{device}**."
            f"{cpu}  \n"
            + ("**Greedy**: every method must return exactly AR's tokens; the second column checks it."
               if greedy else "**Sampling**: the methods draw different samples from the same "
               "distribution; tick *Greedy* to see identical tokens.")
            + f"  \nThe same NFE, step compression, mean accepted length, acceptance rate and draft "
            f"stability from the benchmark: `{bench}`" + (" (it numbers seeds from 0)" if seed else "")
            + f"; it times one sample at a time, and a batch of {samples} as here with `--seeds 1 "
            f"--batch {samples}`.")


def race_decoding(run) -> str:
    """A method's batch while it decodes, or where Stop ended it."""
    label, n, N = METHOD_LABELS[run.method], int(run.records[-1].n_after.min()), run.num_tokens
    if run.stopped:
        return (f"**Stopped at NFE {run.nfe}, {n}/{N} tokens** (the slowest of {run.rows} samples) "
                f"while decoding {label}; the methods before it finished.")
    return (f"Decoding **{label}**: {run.rows} samples, timed alone · NFE {run.nfe} · {n}/{N} tokens "
            "in the slowest sample")


class RacePanels:
    """Each method's samples at a tick of the race replay, redrawn only when they changed:
    all K samples of an image model, or the frames of one sample (`sample`) of a video model."""

    def __init__(self, model, sample: int | None = None) -> None:
        self.model, self.sample, self._drawn = model, sample, {}

    def at(self, runs: dict, tick: int | None = None) -> dict[str, np.ndarray]:
        """{method: picture} after `tick` passes (the end when None)."""
        out = {}
        for method, run in runs.items():
            it = run.records[-1] if tick is None else run.at(tick)
            rows = list(range(run.rows)) if self.sample is None else [self.sample]
            key = (it.index, tuple(rows))
            if self._drawn.get(method, (None,))[0] != key:
                self._drawn[method] = (key, render_samples(self.model, it, rows, target=96))
            out[method] = self._drawn[method][1]
        return out


def race_report(name: str, race, runs: dict, samples: int, device: str, probe=None) -> tuple:
    """A finished race as shown: its table (HTML), why SCD's lead over SJD is what it is (with
    `probe`, `race.gap_probe`'s measure of how far p moves), how it was run with the benchmark
    command that gives the same figures, and its three charts."""
    greedy = race.settings.greedy
    table = summarise(runs, greedy)
    return (race_table_html(table, greedy), explain_gap(table, probe),
            race_note(samples, race.seed, greedy, device, bench_command(name, race, samples)),
            race_figures(runs, samples))
