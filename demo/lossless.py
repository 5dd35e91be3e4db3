"""The lossless view as the page shows it (the statistics are `scd_core.lossless`): many
samples of AR and of a method, which token each put at a few positions side by side with the
test's p-value, a few of the samples (different images), and greedy mode's identical tokens."""
from __future__ import annotations

import math
import queue
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from demo import checks
from demo.charts import METHOD_COLOURS, plot_of, title
from demo.labels import METHOD_LABELS
from demo.pictures import tile_frames, to_rgb
from demo.run_view import plural
from scd_core.lossless import ChiSquare, Comparison, detectable_shift
from scd_core.models import REGISTRY

DEFAULT_SAMPLES, MIN_SAMPLES, MAX_SAMPLES = 256, 16, 1024
# What a comparison costs at the page's defaults (AR and SCD-MC), one torch thread: CPU
# seconds per sample of each method, and for the rest (the greedy runs). Measured with
# `python -m bench page-timing --only lossless` (docs/app.md); on an idle core wall = CPU.
COST_S = {"texture": (0.061, 3.5), "tiny": (0.094, 0.5), "tiny-64": (0.43, 0.5), "tiny-video": (1.15, 1.0)}
DEFAULT_COST_S = (1.15, 1.0)          # a model not measured: as the dearest
TARGET_S = 60.0                       # a comparison at a model's default samples takes about this long at most
SHOWN_SAMPLES = 8            # samples of each method drawn as pictures
SHOWN_TOKENS = 10            # bars per position: the most frequent tokens, then "others"
WAITING_FIGURE = None        # no chart before a comparison (the page hides an empty chart)
HINT = (Path(__file__).parent / "texts" / "lossless_hint.md").read_text(encoding="utf-8").rstrip("\n")


SAMPLES_FIELD = checks.Field("Samples per method", MIN_SAMPLES, MAX_SAMPLES, whole=True)


def check_samples(samples) -> int:
    """The samples per method of the lossless view (a whole number in its range)."""
    return SAMPLES_FIELD.check(samples)


def estimate_s(name: str, samples: int) -> float:
    """Seconds a comparison of `samples` per method takes on an idle CPU core, at the page's defaults."""
    per_sample, rest = COST_S.get(name, DEFAULT_COST_S)
    return per_sample * samples + rest


def default_samples(name: str) -> int:
    """A model's samples per method by default: DEFAULT_SAMPLES, or fewer (a multiple of 16) so
    that the comparison takes TARGET_S at most."""
    fits = int((TARGET_S - COST_S.get(name, DEFAULT_COST_S)[1]) / COST_S.get(name, DEFAULT_COST_S)[0]) // 16 * 16
    return max(MIN_SAMPLES, min(DEFAULT_SAMPLES, fits))


def estimate_note(name, samples) -> str:
    """Before a comparison: about how long it takes here (nothing for a model or a number it refuses)."""
    try:
        samples = check_samples(samples)
        check_model(name)
    except ValueError:
        return ""
    return (f"{samples:,} samples of each method on **{name}**: about {estimate_s(name, samples):.0f} s on an idle "
            f"CPU core at the page's defaults (longer while others use the page).")


def check_model(name: str) -> str:
    """Only the embedded models: hundreds of samples of a downloaded model take far too long."""
    entry = REGISTRY.get(name)
    if entry is None or entry.needs_weights:
        raise ValueError(f"Model: the Lossless tab runs on the embedded models (texture, tiny, "
                         f"tiny-video), not {name}: it decodes hundreds of samples.")
    return name


def method_of(method: str) -> str:
    """The method compared with AR: the one picked, or SCD maximal coupling when AR is."""
    return "scd-mc" if method == "ar" else method


def _where(model, position: int) -> str:
    grid = tuple(int(g) for g in model.grid)
    if len(grid) == 2:
        return f"row {position // grid[1] + 1}, column {position % grid[1] + 1}"
    per = grid[-1] * grid[-2]
    return f"frame {position // per + 1}, row {position % per // grid[-1] + 1}, column {position % grid[-1] + 1}"


def reading(test: ChiSquare) -> str:
    """A test's p-value in plain words."""
    if test.dof == 0:
        return "every sample of both put the same token here: nothing to tell apart"
    if test.p_value < 0.001:
        return "**the counts differ**: so different a pair would hardly ever happen by chance"
    if test.p_value < 0.05:
        return "a little unusual; at one position in twenty this happens by chance alone"
    return "consistent with one distribution"


def power_words(t: ChiSquare, samples: int) -> str:
    """The test's power at a position, in words: the shift of its most common token's share it
    catches 8 times in 10 (`scd_core.lossless.detectable_shift`)."""
    counts = [a + b for a, b in zip(t.counts_a, t.counts_b)]
    share = max(counts) / sum(counts)
    if t.dof == 0 or share >= 1:
        return ""
    shift = detectable_shift(share, samples, t.dof)
    return (f"; at {samples} samples each it catches, 8 times in 10, a method that moves the most common "
            f"token's share here ({share:.0%}) by {shift * 100:.0f} points")


def summary_markdown(model, c: Comparison) -> str:
    """What the comparison shows, in plain words, with its list of positions and the test's power."""
    label, N = METHOD_LABELS[c.method], c.greedy_ar.numel()
    rows = "\n".join(          # a list, not a table: it reads the same on a phone
        f"- **Position {p}** ({_where(model, p)}): **p = {t.p_value:.2f}**, {reading(t)} "
        f"({plural(len(t.bins), 'token group')} compared{power_words(t, c.samples)})"
        for p, t in zip(c.positions, c.tests))
    greedy = ("**identical**" if c.greedy_equal == N else f"**different at {N - c.greedy_equal} positions**")
    return (f"**{c.samples} samples of AR and {c.samples} of {label}** ({c.seconds:.0f} s to decode "
            f"here), from different seeds. {c.different_images} of the {c.samples} pairs of images "
            f"differ: a speculative method does not copy AR's picture. What it keeps is the "
            f"*distribution*: at each position below, the share of samples that put each token "
            f"there should match AR's up to chance. The positions are the {len(c.positions)} where the "
            f"samples, pooled, vary most: where nearly every sample puts the same token there is "
            f"nothing to tell apart.\n\n"
            f"The **p-value** of a chi-square test answers: if both drew from the same distribution, how "
            f"often would their counts differ at least this much? Near 0 means they almost surely "
            f"differ; for equal distributions it is spread evenly between 0 and 1 (below 0.05 one "
            f"time in twenty). A large p-value says only that no difference this test can see was "
            f"found: each position says how large a change it would catch.\n\n"
            f"{rows}\n\n"
            f"**Greedy** (temperature 0, no randomness): {label}'s {N} tokens and AR's are {greedy} "
            f"({c.greedy_equal}/{N} equal), though {label} needed fewer passes to find them.")


class Progress:
    """How far a comparison has come, in words, with the time left at the pace measured so far.
    `scd_core.lossless.compare` decodes `samples` rows of AR, then of the method, `batch` rows
    at a time, and asks its `stop` before each batch: `ask` is called there, so each ask after
    the first marks one more batch done, at that time. AR's rows and the method's cost
    differently (a pass over a window of L tokens costs more): each one's time left is told
    from its own batches only."""

    def __init__(self, samples: int, batch: int, method: str, clock=time.perf_counter) -> None:
        self.samples, self.batch, self.method, self.clock = samples, batch, method, clock
        self.started, self.asks = clock(), []
        self.per = math.ceil(samples / batch)           # batches of each method

    def ask(self) -> None:
        self.asks.append(self.clock())

    def _rows(self, batches: int) -> int:
        return min(self.samples, batches * self.batch)

    def done(self) -> tuple[int, int]:
        """Samples decoded so far: AR's, the method's."""
        batches = max(0, len(self.asks) - 1)
        return self._rows(min(batches, self.per)), self._rows(max(0, batches - self.per))

    def _left(self, first: int, last: int, done: int) -> float:
        """Seconds left for one method: its samples still to decode at the pace of its batches
        done, asks `first` (its start) to `last`."""
        return (self.asks[last] - self.asks[first]) / done * (self.samples - done)

    def said(self) -> str:
        ar, other = self.done()
        label = METHOD_LABELS[self.method]
        head = (f"Decoding: **AR** {ar} of {self.samples} samples · **{label}** {other} of {self.samples} · "
                f"{self.clock() - self.started:.0f} s so far")
        first = min(self.batch, self.samples)
        if other == self.samples:
            left = "the greedy runs and the tests come next"
        elif other:                                      # the method's own pace
            left = f"about {self._left(self.per, len(self.asks) - 1, other):.0f} s left"
        elif ar:
            left = (f"about {self._left(0, min(len(self.asks) - 1, self.per), ar):.0f} s left for AR, then "
                    f"{label}'s time comes with its first {first}" if ar < self.samples else
                    f"{label}'s time left comes with its first {first}")
        else:
            left = f"the time left comes with AR's first {first}"
        return f"{head}; {left}…"


    def heard(self, first: bool) -> str:
        """Where it stands in a few words, for the live region: its start (`first`), then the samples."""
        ar, other = self.done()
        label = METHOD_LABELS[self.method]
        if first:
            return f"Lossless comparison started: {self.samples} samples of AR, then {self.samples} of {label}."
        return f"Lossless: AR {ar} of {self.samples} samples, {label} {other} of {self.samples}."


def done_words(name: str, c: Comparison) -> str:
    """A finished comparison in a few words, for the live region."""
    values = ", ".join(f"{t.p_value:.2f}" for t in c.tests)
    worst = min(c.tests, key=lambda t: t.p_value)
    return (f"Lossless comparison done on {name}: p-values {values}; the lowest reads "
            f"{reading(worst).replace('**', '')}. Greedy tokens "
            + ("identical." if c.greedy_equal == c.greedy_ar.numel() else "different.") )


class Comparing:
    """A comparison decoding in a thread of the page while its handler says how far it has
    come: `compare(stop)` runs there, asking `stop()` before every forward pass. `close()`
    (in the handler's `finally`: however it ends, the event cancelled or the tab closed
    included) makes `stop()` true and waits for the thread, which ends within a pass, its
    memory with it (the handler's `compare` drops the model's idle buffers as it ends)."""

    PENDING = object()           # `result`'s answer while the comparison goes
    CLOSE_S = 2.0                # the longest wait for its thread at `close` (a pass is far shorter)

    def __init__(self, compare: Callable[[Callable[[], bool]], Comparison | None],
                 stopped: Callable[[], bool]) -> None:
        self._closed = threading.Event()
        self._result: queue.Queue = queue.Queue()
        self.stop = lambda: self._closed.is_set() or stopped()
        self.thread = threading.Thread(target=self._run, args=(compare,), name="scd-lossless", daemon=True)
        self.thread.start()

    def _run(self, compare) -> None:
        try:
            self._result.put(compare(self.stop))
        except Exception as exc:                          # noqa: BLE001: said by the handler
            self._result.put(exc)

    def result(self, timeout: float):
        """The Comparison, None if it was stopped, the exception it raised, or PENDING after
        `timeout` s."""
        try:
            return self._result.get(timeout=timeout)
        except queue.Empty:
            return self.PENDING

    def close(self) -> None:
        self._closed.set()
        self.thread.join(self.CLOSE_S)


PANEL_PX = 210               # the height of one position's panel

def histogram_figure(model, c: Comparison):
    """Per position: the share of AR's and the method's samples that took each of the most
    frequent tokens (the rest pooled), grouped bars, the p-value in the panel's title. One
    panel a line, each the chart's whole width and on one scale of shares (a 2 x 2 grid left a
    phone's panels 116 px wide: the right ones' share labels fell on the left ones' bars)."""
    positions = len(c.positions)
    data, layout = [], {}
    for i, (p, t) in enumerate(zip(c.positions, c.tests)):
        order = sorted((j for j in range(len(t.bins)) if t.bins[j] != -1),
                       key=lambda j: -(t.counts_a[j] + t.counts_b[j]))
        shown = order[:SHOWN_TOKENS]
        rest = [j for j in range(len(t.bins)) if j not in shown]      # the pooled bin among them
        names = [f"token {t.bins[j]}" for j in shown]
        a = [t.counts_a[j] for j in shown]
        b = [t.counts_b[j] for j in shown]
        if rest:
            names.append("all others")
            a.append(sum(t.counts_a[j] for j in rest))
            b.append(sum(t.counts_b[j] for j in rest))
        axis = "" if i == 0 else str(i + 1)
        for method, counts in (("ar", a), (c.method, b)):
            data.append(dict(type="bar", x=names, y=[v / c.samples for v in counts],
                             name=f"{METHOD_LABELS[method]} ({c.samples} samples)",
                             marker=dict(color=METHOD_COLOURS[method]), showlegend=i == 0,
                             legendgroup=method, xaxis=f"x{axis}", yaxis=f"y{axis}",
                             hovertemplate=f"{METHOD_LABELS[method]}: %{{x}} in %{{y:.1%}} of the "
                                           f"samples<extra></extra>"))
        bottom, top = 1 - (i + 1) / positions + 0.36 / positions, 1 - i / positions - 0.14 / positions
        layout[f"xaxis{axis}"] = dict(tickangle=-45, tickfont=dict(size=10), anchor=f"y{axis}", automargin=True)
        layout[f"yaxis{axis}"] = dict(domain=[bottom, top], tickformat=".0%", anchor=f"x{axis}",
                                      title=dict(text="share", font=dict(size=11)),
                                      **({"matches": "y"} if i else {}))          # one scale for all
        layout.setdefault("annotations", []).append(dict(
            text=f"position {p} · <b>p = {t.p_value:.2f}</b>", x=0, y=top + 0.01, xref="paper",
            yref="paper", showarrow=False, xanchor="left", yanchor="bottom", align="left", font=dict(size=12)))
    height = 130 + PANEL_PX * positions
    layout |= dict(title=dict(text=title("Which token each sample put at a position",
                                         "bars: share of the samples; p: the chance test")),
                   barmode="group", height=height, margin=dict(l=50, r=10, t=90, b=60),
                   plot_bgcolor="white", paper_bgcolor="white",
                   legend=dict(orientation="h", x=0, xref="paper", yref="container", y=0, yanchor="bottom"))
    alt = (f"Which token each sample put at positions {', '.join(map(str, c.positions))}: AR's share of its "
           f"{c.samples} samples beside {METHOD_LABELS[c.method]}'s, token by token; p-values "
           + ", ".join(f"{t.p_value:.2f}" for t in c.tests) + ".")
    return plot_of(dict(data=data, layout=layout), alt)


def samples_picture(model, tokens, count: int = SHOWN_SAMPLES) -> np.ndarray:
    """The first `count` samples, decoded, side by side (a video sample: its first frame)."""
    pics = []
    for out in model.decode(tokens[:count]):
        frame = out[0] if isinstance(out, (list, tuple)) else out
        pic = to_rgb(frame)
        scale = max(1, 96 // max(pic.shape[:2]))
        pics.append(pic.repeat(scale, 0).repeat(scale, 1))
    return tile_frames(pics, cols=min(4, len(pics)), gap=4)


DIFF_TITLE = "Where each pair differs (after a comparison): AR's sample k against the method's sample k"
SAME, DIFFERENT = (241, 245, 249), (220, 38, 38)


def diff_title(c: Comparison) -> str:
    """The difference maps' title, with the share of tokens that differ."""
    shown = min(SHOWN_SAMPLES, c.samples)
    share = float((c.ar_tokens[:shown] != c.method_tokens[:shown]).float().mean())
    return (f"Where each pair differs: AR's sample k against {METHOD_LABELS[c.method]}'s sample k, red where "
            f"their tokens differ ({share:.0%} of the tokens in these {shown} pairs)")


def diff_picture(model, c: Comparison, count: int = SHOWN_SAMPLES) -> np.ndarray:
    """For the first `count` pairs of samples, each token position in red where the two
    samples differ, pale where they agree (a video sample: its first frame's tokens): the
    pictures above can look alike while their tokens are not."""
    grid = tuple(int(g) for g in model.grid)
    h, w = grid[-2], grid[-1]
    pics = []
    for a, b in zip(c.ar_tokens[:count], c.method_tokens[:count]):
        differs = (a != b).reshape(-1)[:h * w].reshape(h, w).numpy()
        pic = np.where(differs[..., None], np.array(DIFFERENT, np.uint8), np.array(SAME, np.uint8))
        scale = max(1, 96 // max(h, w))
        pics.append(pic.repeat(scale, 0).repeat(scale, 1))
    return tile_frames(pics, cols=min(4, len(pics)), gap=4)


def greedy_picture(model, c: Comparison) -> np.ndarray:
    """AR's greedy image next to the method's: the same tokens, the same picture."""
    import torch
    return samples_picture(model, torch.stack([c.greedy_ar, c.greedy_method]), 2)
