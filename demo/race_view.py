"""A race as the page shows it (the race itself is `scd_core.race`): each method's samples at
a tick of the replay, its progress line, the summary table, why SCD leads SJD by what it does
here, how it was run, and the benchmark command that gives the same per-sample figures."""
from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Sequence

import numpy as np

import gradio as gr

from demo import frontier_view
from demo.charts import RACE_WAITING, race_figures, race_progress_figure
from demo.labels import METHOD_LABELS
from demo.pictures import blank_picture, render_iteration, tile_frames
from demo.run_view import plural
from demo.texts import as_text, code_block, said
from demo.servers import FULL_SPEED_EVERY, PLOT_EVERY, STATUS_EVERY, Pacer
from scd_core.settings import METHODS
from scd_core.race import (TIMING_ROUNDS, MethodSummary, Race, Sensitivity, Spread, Timing, apart,
                           chance_apart, clearly_apart, summarise)


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
    ahead = mc.nfe.mean < sjd.nfe.mean and (mc.nfe.count < 2 or apart((mc.nfe.low, mc.nfe.high),
                                                                      (sjd.nfe.low, sjd.nfe.high)))
    if fewer(mc, sjd):
        lead = (f"Here SCD maximal coupling needs **{ratio:.2f}x fewer passes** than SJD (mean NFE {_nfe(mc)} "
                f"against {_nfe(sjd)})")
    elif ahead:                       # apart, over too few samples to call it clear
        few = "one sample each" if mc.nfe.count < 2 else \
            f"{mc.nfe.count} samples each: {_one_in(chance_apart(mc.nfe.count, sjd.nfe.count))}"
        lead = (f"Here SCD maximal coupling needed **{ratio:.2f}x fewer passes** than SJD in every sample (mean "
                f"NFE {_nfe(mc)} against {_nfe(sjd)}), though over too few samples to call it clear ({few})")
    else:
        lead = (f"Here SCD maximal coupling and SJD need about as many passes: mean NFE {_nfe(mc)} against "
                f"{_nfe(sjd)}, within the samples' spread")
    text = (f"{lead}. Coupling keeps "
            f"{mc.draft_stability.mean:.0%} of the carried-over drafts unchanged from one pass to the "
            f"next, against {sjd.draft_stability.mean:.0%} for SJD's fresh draws.")
    if probe is not None:
        text += (f" Why, measured on this model: when one token changes, the model's guess for the very "
                 f"next token changes by {probe.tv_next:.0%}, and for the tokens further along the window "
                 f"by {probe.tv_further:.0%} on average. ")
        text += ("So the guesses further along barely move: the drafts coupling keeps there stay right "
                 "and are accepted once the window reaches them, while SJD throws them away." if
                 probe.tv_further < 0.02 else
                 "So the guesses further along move too, and the drafts coupling keeps there go stale; "
                 f"and two fresh guesses already agree {probe.collision:.0%} of the time, so SJD loses "
                 "less by drawing new ones.")
    return text


# ----------------------------------------------------------------------------- tables

def span(low: str, high: str) -> str:
    """A range as the page writes it, "(0.71–0.86)", in a box that a line never breaks at its
    dash (`.nobr`, demo/static/page.css)."""
    return f'<span class="nobr">({low}–{high})</span>'


def _spread(s: Spread, fmt: str = "{:.2f}", ends: str | None = None) -> str:
    """'mean (min–max)', or the value alone when every sample gave the same."""
    if s.count < 2 or s.low == s.high:
        return fmt.format(s.mean)
    ends = ends or fmt
    return f"{fmt.format(s.mean)} {span(ends.format(s.low), ends.format(s.high))}"


RACE_HEADERS = ["method", "same tokens as AR", "NFE: mean (min–max)", "step compression",
                "one image: seconds (vs AR)", "batch of K: images/s (vs AR)", "mean accepted length",
                "acceptance rate", "draft stability"]
SAME_AS_AR = RACE_HEADERS[1]            # shown in greedy mode only, where it can say yes or no


def _timed(value: str, speedup: float | None) -> str:
    return value + (f" · {speedup:.2f}x" if speedup is not None else "")


def waiting(blank, status: str) -> dict:
    """The Race tab's views before a race, by view name: every panel `blank` (a model's empty
    grid, or None), no figures, each chart saying when it comes, and `status`."""
    return dict.fromkeys(METHODS, blank) | dict.fromkeys(("table", "note", "why"), "") | \
        dict(zip(("chart", "hist", "flicker"), RACE_WAITING)) | {"status": status, "bench": BENCH_WAITING}


def race_headers(greedy: bool) -> list[str]:
    return [h for h in RACE_HEADERS if greedy or h != SAME_AS_AR]


def race_rows(summaries: Sequence[MethodSummary], greedy: bool) -> list[list[str]]:
    """The table's rows, columns as `race_headers(greedy)`: the times are medians over the
    timing rounds with their range, the rest means over the K samples with theirs."""
    rows = []
    for s in summaries:
        same = "— (reference)" if s.method == "ar" else \
            "—" if s.same_as_ar is None else "yes" if s.same_as_ar else "NO"
        spec, t = s.method != "ar", s.timing
        if t:
            one, many = _timed(_seconds(t), s.latency_speedup), _timed(_rate(t), s.throughput_speedup)
        else:
            one = many = "—"
        rows.append([METHOD_LABELS.get(s.method, s.method), *([same] if greedy else []),
                     _spread(s.nfe, "{:.1f}", "{:.0f}"), f"{s.step_compression.mean:.2f}x", one, many,
                     _spread(s.mean_accepted_length) if spec else "—",
                     _spread(s.acceptance_rate) if spec else "—",
                     _spread(s.draft_stability) if spec else "—"])
    return rows


def race_table_html(summaries: Sequence[MethodSummary], greedy: bool) -> str:
    """The race summary as a compact HTML table that wraps instead of scrolling (each cell
    carries its column's name: on a phone the rows become cards that say it)."""
    if not summaries:
        return ""
    headers = race_headers(greedy)
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td data-label="{h}">{v}</td>' for h, v in zip(headers, r)) + "</tr>"
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


def _nfe(s: MethodSummary) -> str:
    """A method's passes per image: the mean over the samples (min–max)."""
    return _spread(s.nfe, "{:.1f}", "{:.0f}")


def fewer(a: MethodSummary, b: MethodSummary) -> bool:
    """Whether `a` needs clearly fewer passes per image than `b`: their ranges over the samples
    do not overlap, over enough samples that the spread alone would seldom do that
    (`race.clearly_apart`: three samples each at least), the rule the times follow too."""
    return a.nfe.mean < b.nfe.mean and clearly_apart((a.nfe.low, a.nfe.high), (b.nfe.low, b.nfe.high),
                                                     a.nfe.count, b.nfe.count)


def passes_sentence(summaries: Sequence[MethodSummary]) -> str:
    """Which method needs the fewest forward passes per image: the same for these seeds on
    any machine, so the race leads with it. One is named the fewest only where its range over
    the samples overlaps no other's (`fewer`); where it overlaps some, they are said to be
    within the samples' spread and no method is named."""
    if not summaries:
        return ""
    head = "**Passes** (the same for these seeds on any machine)"
    best = min(summaries, key=lambda s: s.nfe.mean)
    others = [s for s in summaries if s is not best]
    shown = lambda s: f"{METHOD_LABELS[s.method]} ({_nfe(s)}, {s.nfe.mean / best.nfe.mean:.2f}x more)"  # noqa: E731
    listed = lambda group: ", ".join(map(shown, group[:-1])) + " and " + shown(group[-1]) \
        if len(group) > 1 else "".join(map(shown, group))  # noqa: E731
    name = METHOD_LABELS[best.method]
    if best.nfe.count < 2:
        return (f"{head}, one sample each, so no method is said to need fewer (passes vary from seed to "
                f"seed): {name} {_nfe(best)}" + "".join(f", {METHOD_LABELS[s.method]} {_nfe(s)}" for s in others)
                + " per image.")
    clear = [s for s in others if fewer(best, s)]
    close = [s for s in others if s not in clear]
    if not close:
        return f"{head}: {name} needs the fewest, {_nfe(best)} per image on average, clearly fewer than {listed(clear)}."
    few = [s for s in close if apart((best.nfe.low, best.nfe.high), (s.nfe.low, s.nfe.high))]
    within = [s for s in close if s not in few]
    parts = [f"within the samples' spread of {listed(within)}"] if within else []
    if few:
        parts.append(f"fewer than {listed(few)} in every sample, though with {best.nfe.count} samples "
                     f"{_one_in(chance_apart(best.nfe.count, few[0].nfe.count))}")
    return (f"{head}: {name} has the lowest mean, {_nfe(best)} per image, but is " + ", and ".join(parts)
            + ": no method clearly needs the fewest here"
            + (f"; {name} needs clearly fewer than {listed(clear)}" if clear else "") + ".")


def _one_in(chance: float) -> str:
    """How often noise alone sets two sets of figures apart, in words."""
    return f"the spread alone sets two methods apart one time in {1 / chance:.0f}"


def _seconds(t: Timing) -> str:
    """A time as the race writes it: the median of its rounds, then their range where it has one."""
    return _median_and_range("{:.2f}", " s", t.latency, t.latency_range)


def _rate(t: Timing) -> str:
    return _median_and_range("{:.1f}", "/s", t.throughput, t.throughput_range)


def _median_and_range(form: str, unit: str, median: float, spread: tuple[float, float]) -> str:
    low, high = (form.format(v) for v in spread)
    return form.format(median) + unit + ("" if low == high else f" {span(low, high)}")


def _names(summaries: Sequence[MethodSummary], shown=None) -> str:
    """Methods in words ("AR, SJD and SCD Gumbel coupling"), each with `shown(timing)` if given."""
    parts = [METHOD_LABELS[s.method] + (f" ({shown(s.timing)})" if shown else "") for s in summaries]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def _ranked(timed: Sequence[MethodSummary], what: str, value, spread, shown, best_is: str) -> str:
    """One time in words: the method best by median is named the winner only where its range
    overlaps no other's over enough rounds (`race.clearly_apart`: three at least; two rounds
    apart happen by noise one time in three); where it overlaps some, they are said to be within
    noise of it and no method is called the fastest, though it is said to be clearly ahead of
    those it is clearly apart from, and ahead in every round of those apart over too few rounds."""
    best = min(timed, key=value)
    others = [s for s in timed if s is not best]
    clear = [s for s in others if clearly_apart(spread(best.timing), spread(s.timing), best.timing.rounds,
                                                s.timing.rounds)]
    few = [s for s in others if s not in clear and apart(spread(best.timing), spread(s.timing))]
    close = [s for s in others if s not in clear and s not in few]
    name = METHOD_LABELS[best.method]
    if not close and not few:
        return f"{what}: {name} {best_is}, {shown(best.timing)}, clearly ahead of {_names(clear, shown)}."
    parts = [f"within noise of {_names(close, shown)}"] if close else []
    if few:
        parts.append(f"ahead of {_names(few, shown)} in each of {best.timing.rounds} rounds, too few to call "
                     f"it clear ({_one_in(chance_apart(best.timing.rounds, few[0].timing.rounds))})")
    return (f"{what}: {name} has the best median, {shown(best.timing)}, but is " + ", and ".join(parts)
            + ": no method is clearly the best here"
            + (f"; {name} is clearly ahead of {_names(clear, shown)}" if clear else "") + ".")


def timing_sentence(summaries: Sequence[MethodSummary], device: str) -> str:
    """The two times in words, after the passes: medians over the timing rounds with their
    range; a method is named faster only where the ranges do not overlap (`race.apart`), else
    the times are within noise. Says whether a row from outside the race shared its passes."""
    timed = [s for s in summaries if s.timing is not None]
    if not timed:
        return ""
    rounds, batch = min(s.timing.rounds for s in timed), timed[0].timing.batch
    if rounds < 2:                      # one timing each: no spread to tell a lead from noise
        text = (f"**Time** on {device}, timed once each, so no method is called faster (the same decode "
                f"can take twice as long from one run to the next): **one image** {_names(timed, _seconds)}; "
                f"**a batch of {batch}** {_names(timed, _rate)}.")
    else:
        text = (f"**Time** on {device}, median of {rounds} rounds (range in brackets). "
                + _ranked(timed, "**One image**", lambda s: s.timing.latency, lambda t: t.latency_range,
                          _seconds, "is done soonest")
                + " " + _ranked(timed, f"**A batch of {batch}**", lambda s: -s.timing.throughput,
                                lambda t: t.throughput_range, _rate, "gives the most images per second"))
    if device.startswith("CPU"):
        text += (" On a CPU a batched AR pass costs little more than a single one, so AR gains most "
                 "from the batch, while a pass over a window of L tokens costs more than a one-token pass.")
    if not all(s.timing.alone for s in timed):
        text += " Other visitors' rows shared some of these passes: the times are not the methods' alone."
    return text


def race_note(samples: int, seed: int, greedy: bool, device: str, rounds: int = 1) -> str:
    """How the race was run and timed."""
    return (f"{samples} samples per method (seeds {seed}–{seed + samples - 1}) for the figures; each "
            f"method first decodes one image alone (seed {seed}: its seconds are the engine's, timed "
            f"where it decodes, on **{device}**), then the {samples} rows together (images/s: K over the "
            f"batch's engine seconds)"
            + (f"; both timed in {rounds} rounds, the methods taking turns, and given as the median "
               f"with the range" if rounds > 1 else "") + ".  \n"
            + ("**Greedy**: every method must return exactly AR's tokens; the second column checks it."
               if greedy else "**Sampling**: the methods draw different samples from the same "
               "distribution; tick *Greedy* to see identical tokens."))


def differ_sentence(runs: dict, greedy: bool) -> str:
    """Sampling: how far each method's samples are from AR's, seed for seed (the pictures can
    look alike; their tokens are not the same). Greedy: nothing to add to the table's check."""
    ar = runs.get("ar")
    if greedy or ar is None or not ar.done:
        return ""
    ar_tokens = ar.tokens()
    parts = [f"{METHOD_LABELS[m]} {float((r.tokens() != ar_tokens).float().mean()):.0%}"
             for m, r in runs.items() if m != "ar" and r.done and r.rows == ar.rows]
    if not parts:
        return ""
    return ("Same seeds, different pictures: each method's samples differ from AR's, seed for seed, at "
            + ", ".join(parts) + " of the tokens.")


def bench_markdown(name: str, race: Race, samples: int) -> str:
    """The benchmark commands that give a race's figures, for whoever wants to repeat them."""
    seed = race.seed
    return ("The same NFE, step compression, mean accepted length, acceptance rate and draft "
            "stability from the benchmark" + (" (it numbers seeds from 0)" if seed else "") + ":\n\n"
            f"{code_block(bench_command(name, race, samples))}\n\n"
            f"One image's seconds: the same with `--seeds 1` (column wall_s); the batch's "
            f"({samples} / wall_s images per second):\n\n"
            f"{code_block(bench_command(name, race, samples, seeds=1, batch=samples))}")


BENCH_WAITING = "After a race: the benchmark commands that give its figures."


def race_decoding(run, phase: str = "") -> str:
    """A method's rows while they decode, or where Stop ended them."""
    label, N = METHOD_LABELS[run.method], run.num_tokens
    n = min((int(it.n_after[0]) for it in run.last()), default=0)
    what = phase or (f"{run.rows} samples" if run.rows > 1 else "one sample")
    slowest = "the slowest sample" if run.rows > 1 else "the sample"
    if run.stopped:
        before = [METHOD_LABELS[m] for m in METHODS[:METHODS.index(run.method)]] if run.method in METHODS else []
        done = (f"; {', '.join(before)} had finished" if before else "; no method had finished")
        return (f"**Stopped at NFE {run.nfe}, {n}/{N} tokens** ({slowest}"
                + (f" of {run.rows}" if run.rows > 1 else "") + f") while decoding {label}{done}.")
    return f"Decoding **{label}**: {what} · NFE {run.nfe} · {n}/{N} tokens in {slowest}"


def race_said(run) -> str:
    """A method's rows in a few words for the live region: where they stand, or their stop."""
    n = min((int(it.n_after[0]) for it in run.last()), default=0)
    head = "Race stopped" if run.stopped else "Race"
    return f"{head}: {METHOD_LABELS[run.method]} at {n} of {run.num_tokens} tokens, NFE {run.nfe}."


def plain(markdown: str) -> str:
    """A sentence of the page's Markdown as words: no stars, no HTML."""
    return re.sub(r"<[^>]+>", "", markdown).replace("**", "").replace("*", "")


STOPPED_TIMING = ("**Stopped while timing**; every method had finished decoding: the times below are "
                  "those of the rounds that ended.")


def timing_round(r: int, rounds: int, method: str) -> str:
    """While the race times the methods again."""
    return (f"Timing round {r} (of up to {rounds}): **{METHOD_LABELS[method]}**, one image alone, then the "
            f"batch (one timing alone says little on a shared machine)…")


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
    """A finished race as shown: its table (HTML); the passes, then the times in words, and how
    it was run; why SCD's lead over SJD is what it is (with `probe`, `race.gap_probe`'s measure
    of how far p moves); the benchmark commands that give the same figures; its three charts."""
    greedy = race.settings.greedy
    table = summarise(runs, greedy, timings)
    rounds = max((t.rounds for t in (timings or {}).values()), default=1)
    lead = "\n\n".join(x for x in (passes_sentence(table), timing_sentence(table, device),
                                    race_note(samples, race.seed, greedy, device, rounds),
                                    differ_sentence(runs, greedy)) if x)
    why = explain_gap(table, probe)
    by = {s.method: s for s in table}
    if name == "tiny" and why and not greedy:          # its three leads, this race's among them
        why += " " + leads_sentence((by["sjd"].nfe.mean / by["scd-mc"].nfe.mean,
                                     f"this race (“{as_text(race.prompt)}”, {plural(samples, 'seed')}, "
                                     f"L {race.settings.window})"))
    return (race_table_html(table, greedy), why, lead, bench_markdown(name, race, samples),
            race_figures(runs, samples))


# ------------------------------------------------------------------ the race as shown

REPLAYING = ("**Replay**: every method has finished decoding; here are their passes again, side by side "
             "by NFE (the figures come after it).  \n")
VIEWS = ("status", "table", "note", "why", "chart", "hist", "flicker", "bench", "state", "sample",
         *METHODS)        # the race's views by name; each method's name is its panel
WARMING = "Warming up: a few untimed passes of each method…"


class RaceView:
    """What one race shows, view by view (names in VIEWS; the page maps each to its component):
    its steps as `scd_core.race.decode_race` yields them (the status and the pictures at most
    a few times a second), the lockstep replay, and its report. `probe(runs)`: why SCD leads
    SJD here (`race.gap_probe`), asked once the methods have finished; `rounds`: its timing
    rounds (`scd_core.race.decode_race`)."""

    def __init__(self, model, page, device: str, probe=lambda runs: None, video: bool = False,
                 rounds: int = TIMING_ROUNDS) -> None:
        self.model, self.page, self.device, self.probe, self.rounds = model, page, device, probe, rounds
        self.panels = RacePanels(model, 0 if video else None)
        self.status_due, self.picture_due = Pacer(STATUS_EVERY), Pacer(FULL_SPEED_EVERY)
        self.plot_due = Pacer(PLOT_EVERY, wait_first=True)
        self.runs: dict = {}
        self.timings: dict[str, Timing] = {}

    def started(self) -> dict:
        """The last race's views cleared: every panel the model's empty grid, the charts
        saying when they come."""
        return waiting(blank_picture(tuple(self.model.grid)), WARMING + said(
            f"Race started on {self.page.name}: each method decodes {self.page.samples} samples, then is timed.",
            "start"))

    def step(self, step) -> dict:
        """A step of the race: the status and the pictures as they come; the finished
        methods' figures kept; a stopped method's rows said, with the table of those done."""
        self.runs = {**step.runs}
        if step.run is None:             # a timing round starts: every method's panel complete (drawn once)
            return {"status": timing_round(step.round, self.rounds, step.method) + said(
                f"Race: timing round {step.round}, {METHOD_LABELS[step.method]}.", "step")} | self.panels.at(step.runs)
        out = {"status": race_decoding(step.run, step.phase) + said(race_said(step.run), "end" if step.run.stopped
                                                                     else "step")} \
            if self.status_due() or step.run.stopped else {}
        if self.picture_due() or step.run.stopped:
            out |= self.panels.at(step.runs | {step.method: step.run})
        if step.run.stopped:
            done = {m: r for m, r in step.runs.items() if r.done}
            timed = {m: Timing.of_rounds(t) for m, t in step.timings.items() if m in done}
            out["table"] = race_table_html(summarise(done, False, timed), False)
        return out

    def finished(self, step) -> None:
        """The race's last step: every method's run and its timings over the rounds that ended
        (the step's dicts, which the race filled after yielding it)."""
        self.runs = dict(step.runs)
        self.timings = {m: Timing.of_rounds(t) for m, t in step.timings.items()}

    def replay(self, tick: int) -> dict:
        """The recorded passes in lockstep at NFE `tick`: the pictures, the progress, and the
        tokens-vs-NFE chart now and then."""
        out = self.panels.at(self.runs, tick) | {"status": REPLAYING + race_progress(self.runs, tick) + said(
            f"Race: every method has finished; replaying their passes side by side, NFE {tick}.", "step")}
        if self.plot_due():
            out["chart"] = race_progress_figure({m: r.committed_curves() for m, r in self.runs.items()},
                                                self.runs["ar"].num_tokens, tick)
        return out

    def report(self, words: str, tick: int | None = None) -> dict:
        """The finished race: its table, the passes and times in words, why, the benchmark's
        commands, its charts, and `words` under the progress line (at NFE `tick`: the end when None)."""
        table, why, note, bench, figures = race_report(self.page.name, self.page.race, self.runs,
                                                       self.page.samples, self.device, self.probe(self.runs),
                                                       self.timings)
        why += frontier_view.model_link(self.page.name) if why else ""      # tiny, tiny-64: the two side by side
        heard = f"Race {'done' if tick is None and words.startswith('**Done') else 'stopped'} on {self.page.name}. " + \
            plain(note.split("\n\n")[0])
        return {"table": table, "why": why, "note": note, "bench": bench,
                "status": race_progress(self.runs, tick, words) + said(heard, "end")} | \
            dict(zip(("chart", "hist", "flicker"), figures))

    def done(self) -> dict:
        """The end: the last pictures and the report; the runs kept to show another sample of a
        video race (its slider)."""
        samples, video = self.page.samples, self.panels.sample is not None
        return self.panels.at(self.runs) | self.report(f"**Done** on **{self.page.name}**.") | {
            "state": {"model": self.page.name, "runs": {m: r.final() for m, r in self.runs.items()}},
            "sample": gr.Slider(maximum=max(samples, 2), value=1, visible=video and samples > 1)}   # min < max


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


def leads_sentence(this_race: tuple[float, str] | None = None, directory: Path = BENCH_DIR) -> str:
    """`tiny`'s lead over SJD measured three ways, in one sentence: in a race (`this_race`: its
    SJD / SCD-MC ratio and how it was run; by default the page's default race, the benchmark's
    `docs/bench/tiny-race.csv`), over the benchmark's prompts at L 16 (`tiny.csv`) and at its best
    window on held-out prompts (`tiny-heldout.csv`, as "How it works" gives it)."""
    if this_race is None:
        p = shipped_passes("tiny-race", directory=directory)
        this_race = (p["sjd"] / p["scd-mc"], "the default race (“red heart”, 8 seeds, L 16)")
    bench = shipped_passes("tiny", directory=directory)
    with (directory / "tiny-prompts.csv").open(encoding="utf-8") as f:
        prompts = len({r["prompt"] for r in csv.DictReader(f)})
    best = frontier_view.best_lead(directory / "tiny-heldout.csv")
    ratio, how = this_race
    return (f"`tiny`'s lead over SJD, measured three ways: **{ratio:.2f}x** in {how}, "
            f"**{bench['sjd'] / bench['scd-mc']:.2f}x** over the benchmark's {prompts} prompts at L 16, and "
            f"**{best.lead:.2f}x** at its best window, L {best.window}, on held-out prompts: one prompt is not "
            "the average prompt, and a wider window leaves coupling more drafts to keep.")


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
            why.append(f"- **{m}**: {WHY[m]}" + (f" {leads_sentence(directory=directory)}" if m == "tiny" else ""))
    return ("**Passes per image** (forward passes to finish one image; fewer is faster), from the "
            "benchmark's shipped tables (`docs/bench/<model>.csv`: `python -m scd_core.bench`, window "
            "16, random drafts, means over prompts and seeds):\n\n" + "\n".join(lines)
            + ("\n\nWhy the ratio differs:\n\n" + "\n".join(why) if why else ""))
