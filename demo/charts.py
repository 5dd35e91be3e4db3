"""The page's plotly charts: a Generate run's (tokens vs NFE, tokens per pass, flicker,
acceptance, token maps, the replay's min(1, p/q) map) and a race's. Each is built from plain
dicts and goes to the page as its JSON (`plot_of`): no plotly figure object is made, checked
or copied, which cost more than all the rest of a run's final update."""
from __future__ import annotations

import json

import numpy as np
from gradio.components.plot import PlotData

from demo.labels import METHOD_LABELS
from demo.pictures import ACCEPTED, F_CHANGED, F_KEPT, FILM_STYLE, NEW, RESAMPLED, STYLE, grid3
from demo.run_view import TraceStats, draft_facts
from scd_core import trace
from scd_core.trace import Iteration

# --------------------------------------------------------------------------- charts

MAX_TICKS = 17          # numbered ticks on an axis at most: a phone's chart reads them apart
# Every mark a chart draws (a line, a bar, a marker) is at least 3:1 against its background in
# both themes: white, and the dark theme's panel (CHART_BACKGROUNDS; WCAG 1.4.11). A heat map's
# cells are read against its colour bar, and its numbers are said in words (`alt`, the hover).
CHART_BACKGROUNDS = {"light": "#ffffff", "dark": "#1f2937"}
METHOD_COLOURS = {"ar": "#64748b", "sjd": "#d97706", "scd-mc": "#16a34a", "scd-gumbel": "#8b5cf6"}
AR_LINE = METHOD_COLOURS["ar"]          # AR's one-token-per-pass line


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def _css(rgb: tuple[int, int, int], alpha: float | None = None) -> str:
    return f"rgb{rgb}" if alpha is None else f"rgba({rgb[0]}, {rgb[1]}, {rgb[2]}, {alpha})"


def contrast(a: str, b: str) -> float:
    """WCAG's contrast ratio of two colours ("#rrggbb"), 1 to 21."""
    def luminance(colour: str) -> float:
        c = [v / 255 for v in _rgb(colour)]
        c = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def hex_of(rgb: tuple[int, int, int]) -> str:
    return "#%02x%02x%02x" % tuple(rgb)


def title(text: str, detail: str = "") -> str:
    """A chart title short enough for a phone, its figures on a second, smaller line."""
    return text + (f"<br><sub>{detail}</sub>" if detail else "")


def plot_of(figure: dict, alt: str | None = None) -> PlotData:
    """A chart as `gr.Plot` shows it: the figure's JSON, made once, without plotly's checks
    (the figures here are built by this module) and without its default template (8 KB a
    chart; the layouts set what they need). `alt`: one line of what it shows now, its text
    alternative (the layout's meta; demo/static/load.js names the chart by it)."""
    import plotly.io as pio

    if alt is not None:
        figure = {**figure, "layout": {**figure["layout"], "meta": {"alt": alt}}}
    return PlotData(type="plotly", plot=pio.to_json(figure, validate=False))


def alt_of(plot: PlotData) -> str:
    """A chart's text alternative (`plot_of`'s `alt`)."""
    return figure_of(plot)["layout"].get("meta", {}).get("alt", "")


def figure_of(plot: PlotData) -> dict:
    """The figure a chart shows, as plain dicts: `plot_of`'s inverse."""
    return json.loads(plot.plot)


def _figure(data: list[dict], title: str, x: str, y: str, height: int = 300, *, alt: str, **layout) -> PlotData:
    """A chart from plain dicts: traces `data`, a title, axis titles, its text alternative
    `alt` (what it shows now, in one line) and layout overrides."""
    axis = dict(gridcolor="#e5e7eb", zerolinecolor="#cbd5e1", linecolor="#94a3b8")
    base = dict(title=dict(text=title, font=dict(size=14)), height=height,
                margin=dict(l=50, r=10, t=56, b=40), plot_bgcolor="white", paper_bgcolor="white",
                xaxis=dict(title=dict(text=x, standoff=4), **axis),
                yaxis=dict(title=dict(text=y), **axis),
                legend=dict(orientation="h", x=0, y=-0.22, yanchor="top", font=dict(size=11)),
                hovermode="closest")
    for key, value in layout.items():
        base[key] = {**base[key], **value} if isinstance(base.get(key), dict) else value
    legend_rows = sum(1 for d in data if d.get("showlegend", True) and d.get("name"))
    if legend_rows:
        base["margin"]["b"] = base["margin"]["b"] + 40 + 16 * (legend_rows // 3)
        base["height"] = base["height"] + 16 * (legend_rows // 3)
    return plot_of(dict(data=data, layout=base), alt)


def note_figure(title_text: str, words: str, height: int = 300) -> PlotData:
    """A chart that has nothing to plot (yet, or ever for this run), saying why in words: no
    axes, no empty placeholder."""
    hidden = dict(visible=False)
    return plot_of(dict(data=[], layout=dict(
        title=dict(text=title_text, font=dict(size=14)), height=height, margin=dict(l=20, r=20, t=56, b=20),
        plot_bgcolor="white", paper_bgcolor="white", xaxis=hidden, yaxis=hidden,
        annotations=[dict(text=words, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                          font=dict(size=13, color="#475569"), align="center")])),
        f"{title_text}: " + words.replace("<br>", " "))


AR_NO_DRAFTS = "AR feeds no drafts: each pass<br>samples one token from p"


def waiting_figure(num_tokens: int):
    """The tokens-vs-NFE chart before any run: AR's one-token-per-pass line for the model's
    `num_tokens`. Shown on the first visit, it has the browser load its chart library while
    the visitor reads the page: loaded on the first run's first update instead, it held that
    run's updates (and a Stop) up for seconds."""
    return committed_vs_nfe_figure({}, num_tokens, note="press Generate to draw the method's curve")


def waiting_figures(num_tokens: int) -> dict[str, PlotData | None]:
    """Every Generate chart before a run (or while one starts), by its name in RUN_CHARTS: AR's
    line, and no other chart (None: the page hides a chart with nothing to draw, rather than
    show an empty frame; the metrics' place says what comes)."""
    return {"committed": waiting_figure(num_tokens)} | dict.fromkeys(RUN_CHARTS[1:])


RACE_WAITING = (None, None, None)    # the race's charts: shown once it has ended (the page hides an empty chart)
RUN_CHARTS = ("committed", "length", "flicker", "rate", "committed_at", "unchanged")


def run_figures(stats: TraceStats, history: dict, method: str, live: bool = False) -> dict[str, PlotData]:
    """A Generate run's charts by their name in RUN_CHARTS: tokens vs NFE (against AR's line,
    with this session's earlier runs of other methods, `history`), drafts changed per pass and
    the acceptance rate so far, pass by pass; once it has ended, also tokens per pass and the
    two token maps. While it runs (`live`) only the first three: a chart costs the browser far
    more to draw than the server to make. AR has no drafts: its draft charts say so in words."""
    curves = {m: (h["nfe"], h["committed"]) for m, h in history.items() if not m.startswith("_")}
    curves[method] = (stats.nfe, stats.committed)
    stabilities = {m: h["stability"] for m, h in history.items()
                   if not m.startswith("_") and m != method and h.get("stability") is not None}
    ar = method == "ar"
    out = {"committed": committed_vs_nfe_figure(curves, stats.num_tokens, method),
           "flicker": note_figure("Drafts changed since the last pass", AR_NO_DRAFTS) if ar
           else flicker_figure(stats, stabilities),
           "rate": note_figure("Acceptance rate", AR_NO_DRAFTS + ":<br>nothing to accept") if ar
           else acceptance_figure(stats)}
    if not live:
        out |= {"length": accepted_length_figure(stats), "committed_at": committed_at_figure(stats),
                "unchanged": note_figure("Longest run a draft stayed unchanged", AR_NO_DRAFTS) if ar
                else unchanged_figure(stats)}
    return out


def committed_vs_nfe_figure(curves: dict[str, tuple[list[int], list[int]]], num_tokens: int,
                            current: str | None = None, note: str = "forward passes, the prefill included"):
    """Tokens committed against forward passes: the AR diagonal, then one curve per run."""
    data = [dict(type="scatter", x=[0, num_tokens], y=[0, num_tokens], mode="lines",
                 name="one token per pass (AR)", line=dict(color=AR_LINE, dash="dash"),
                 hovertemplate="AR: one token per forward pass<br>NFE %{x} → %{y} "
                               "tokens<extra></extra>")]
    for method, (nfe, committed) in curves.items():
        label = METHOD_LABELS.get(method, method)
        data.append(dict(
            type="scatter", x=[0, *nfe], y=[0, *committed], mode="lines", name=label,
            line=dict(color=METHOD_COLOURS.get(method), width=3 if method == current else 1.5,
                      shape="hv"),
            hovertemplate=(f"{label}<br>NFE %{{x}} (forward passes, prefill included)"
                           "<br>%{y} tokens committed<extra></extra>")))
    runs = [f"{METHOD_LABELS.get(m, m)} {c[-1] if c else 0} tokens in {n[-1] if n else 0} passes"
            for m, (n, c) in curves.items()]
    alt = (f"Tokens committed against forward passes (NFE): AR's line needs {num_tokens} passes for "
           f"{num_tokens} tokens" + ("; " + "; ".join(runs) if runs else "; press Generate to draw the method's curve")
           + ".")
    return _figure(data, title("Tokens committed vs NFE", note), "NFE",
                   "tokens committed",
                   height=320, xaxis=dict(range=[0, num_tokens * 1.02]),
                   yaxis=dict(range=[0, num_tokens * 1.05]), alt=alt)


def race_progress_figure(curves: dict[str, np.ndarray], num_tokens: int, upto: int | None = None):
    """Per method, the mean over its K samples of tokens committed after each pass, with a
    band from the slowest to the fastest sample. `curves[m]` is [K, NFE]; `upto` cuts the
    curves at that NFE (the lockstep replay). AR's own curve is the one-token-per-pass line:
    the dashed reference is drawn only in a race without AR, so that AR is drawn once."""
    data = [] if "ar" in curves else [
        dict(type="scatter", x=[0, num_tokens], y=[0, num_tokens], mode="lines",
             name="one token per pass (AR)", line=dict(color=AR_LINE, dash="dash"), hoverinfo="skip")]
    said = []
    for method, c in curves.items():
        c = np.asarray(c, dtype=float)
        if upto is not None:
            c = c[:, :upto]
        if c.size == 0:
            continue
        x = list(range(0, c.shape[1] + 1))
        mean, low, high = (np.concatenate([[0.0], f(c, 0)]) for f in (np.mean, np.min, np.max))
        colour = METHOD_COLOURS.get(method, "#000000")
        label = METHOD_LABELS.get(method, method)
        k = c.shape[0]
        edge = dict(color=colour, width=1 if k > 1 else 0, dash="dot")     # the band's ends, drawn
        data.append(dict(type="scatter", x=x, y=low.tolist(), mode="lines", line=edge,
                         showlegend=False, legendgroup=method, hoverinfo="skip"))
        data.append(dict(type="scatter", x=x, y=high.tolist(), mode="lines", line=edge,
                         fill="tonexty", fillcolor=_css(_rgb(colour), 0.18), showlegend=False,
                         legendgroup=method, hoverinfo="skip"))
        said.append(f"{label} {mean[-1]:.0f} tokens" + (f" after NFE {upto}" if upto is not None else
                                                       f" in {c.shape[1]} passes at the slowest of {k}"))
        data.append(dict(type="scatter", x=x, y=mean.round(1).tolist(), mode="lines",
                         name=f"{label}: mean of {k}" + (", band min-max" if k > 1 else ""),
                         legendgroup=method, line=dict(color=colour, width=2.5),
                         hovertemplate=f"{label}<br>NFE %{{x}}: %{{y}} tokens on average over "
                                       f"{k} samples<extra></extra>"))
    alt = ("Tokens committed against forward passes, each method's mean over its samples with a band from "
           "the slowest to the fastest: " + "; ".join(said) + f" (of {num_tokens}).")
    return _figure(data, title("Tokens committed vs NFE", "mean over the samples, band: min–max"),
                   "NFE", "tokens committed", height=320,
                   xaxis=dict(range=[0, num_tokens * 1.02]), yaxis=dict(range=[0, num_tokens * 1.05]), alt=alt)


def accepted_length_figure(stats: TraceStats):
    """Per forward pass: accepted drafts (green), then the one token sampled from p: the
    residual at the first rejection (orange) or the bonus / AR sample (blue)."""
    steps = np.diff([0, *stats.committed]) - np.asarray(stats.accepted, int)
    kinds = np.asarray(stats.new_kind)
    data = [dict(type="bar", x=stats.index, y=stats.accepted, name="accepted drafts",
                 marker=dict(color=_css(STYLE[ACCEPTED][1])),
                 hovertemplate="pass %{x}: %{y} drafts accepted (U < min(1, p/q))<extra></extra>")]
    for kind, name, colour in (("resampled", "residual sample (first rejection)", STYLE[RESAMPLED][1]),
                               ("new", "bonus / AR sample", STYLE[NEW][1])):
        mask = (kinds == "resampled") if kind == "resampled" else np.isin(kinds, ["bonus", "sample"])
        data.append(dict(type="bar", x=np.asarray(stats.index)[mask].tolist(),
                         y=np.clip(steps[mask], 0, None).tolist(), name=name,
                         marker=dict(color=_css(colour)),
                         hovertemplate=f"pass %{{x}}: +%{{y}} {name}<extra></extra>"))
    data = [d for d in data if sum(d["y"]) > 0]          # a kind this run never had is not in the legend
    ends = {kind: int(np.sum(np.isin(kinds, names))) for kind, names in
            (("residual", ["resampled"]), ("bonus", ["bonus", "sample"]))}
    alt = (f"Tokens committed in each of {len(stats.index)} passes: {int(np.sum(stats.accepted))} accepted drafts "
           f"in all; {ends['residual']} passes ended at a rejection with a residual sample, {ends['bonus']} with "
           f"a bonus or AR sample; at most {max(np.diff([0, *stats.committed]), default=0)} tokens in one pass.")
    if stats.method == "ar":
        detail = "AR: one token per pass, no drafts"
    else:
        mean_len = stats.sample().mean_accepted_length if stats.records else 0.0
        detail = f"mean accepted length {mean_len:.2f}; AR commits 1 per pass"
        data.append(dict(type="scatter", x=[stats.index[0], stats.index[-1]] if stats.index else [0, 1],
                         y=[1, 1], mode="lines", name="AR: 1 token per pass",
                         line=dict(color=METHOD_COLOURS["ar"], dash="dash", width=1.5), hoverinfo="skip"))
    return _figure(data, title("Tokens committed per pass", detail), "pass", "tokens", barmode="stack",
                   bargap=0.1, showlegend=True, alt=alt)            # its colours named, one kind or several


def flicker_figure(stats: TraceStats, others: dict[str, float] | None = None):
    """Per pass: carried-over drafts whose token changed since the previous pass (flicker)
    against those that stayed the same. SJD redraws nearly all; coupling keeps most. `others`:
    the draft stability of this session's last run of each other method, said beside this
    run's (SJD's and SCD's side by side)."""
    kept = (np.asarray(stats.carried) - np.asarray(stats.changed)).tolist()
    data = [dict(type="bar", x=stats.index, y=stats.changed, name="drafts changed (flicker)",
                 marker=dict(color=_css(FILM_STYLE[F_CHANGED][1])),
                 hovertemplate="pass %{x}: %{y} carried drafts changed<extra></extra>"),
            dict(type="bar", x=stats.index, y=kept, name="drafts unchanged",
                 marker=dict(color=_css(FILM_STYLE[F_KEPT][1])),
                 hovertemplate="pass %{x}: %{y} carried drafts unchanged<extra></extra>")]
    stab = stats.sample().draft_stability if stats.records else 0.0
    said = f"draft stability {stab:.2f}"
    if others:                               # a line under it: the other methods' last runs
        said = (f"draft stability: {METHOD_LABELS.get(stats.method, stats.method)} {stab:.2f}<br>your last runs: "
                + " · ".join(f"{METHOD_LABELS.get(m, m)} {v:.2f}" for m, v in others.items()))
    alt = (f"Carried-over drafts in each of {len(stats.index)} passes: {int(np.sum(stats.changed))} changed "
           f"(flicker) and {int(np.sum(kept))} stayed the same; " + said.replace("<br>", "; ") + ".")
    return _figure(data, title("Drafts changed since the last pass", said), "pass", "carried drafts",
                   barmode="stack", bargap=0.1, **(dict(margin=dict(t=76)) if others else {}), alt=alt)


def acceptance_figure(stats: TraceStats):
    """Running acceptance rate: accepted drafts / verified drafts so far."""
    rate = stats.running_acceptance
    colour = METHOD_COLOURS.get(stats.method, "#16a34a")
    data = [dict(type="scatter", x=stats.index, y=[None if np.isnan(r) else float(r) for r in rate],
                 mode="lines", line=dict(color=colour, width=2),
                 name=f"{METHOD_LABELS.get(stats.method, stats.method)}: acceptance rate so far",
                 hovertemplate="pass %{x}: acceptance rate %{y:.3f}<br>= accepted drafts / "
                               "verified drafts so far (≤ 1)<extra></extra>")]
    rate_now = stats.sample().acceptance_rate if stats.records else 0.0
    alt = (f"Acceptance rate so far after each of {len(stats.index)} passes: {rate_now:.3f} now, "
           f"{stats.counts.accepted} of {stats.counts.verified} verified drafts accepted.")
    return _figure(data, title("Acceptance rate", f"{rate_now:.3f} so far; AR verifies no drafts"), "pass",
                   "accepted / verified", yaxis=dict(range=[0, 1.02]), xaxis=dict(rangemode="tozero"), alt=alt)


def histogram_figure(histograms: dict[str, list[float]], samples: int | None = None):
    """Share of passes that committed 1, 2, 3, ... tokens, one bar group per method."""
    width = max((len(h) for h in histograms.values()), default=1)
    data = []
    for method, h in histograms.items():
        label = METHOD_LABELS.get(method, method)
        data.append(dict(type="bar", x=list(range(1, len(h) + 1)), y=[round(v, 4) for v in h],
                         name=label, marker=dict(color=METHOD_COLOURS.get(method)),
                         hovertemplate=f"{label}: %{{y:.1%}} of passes committed %{{x}} "
                                       f"token(s)<extra></extra>"))
    over = f", {samples} samples pooled" if samples else ""
    alt = ("Share of passes that committed 1, 2, 3, ... tokens: " + "; ".join(
        f"{METHOD_LABELS.get(m, m)} most often {int(np.argmax(h)) + 1} ({max(h):.0%} of its passes)"
        for m, h in histograms.items() if len(h)) + ".")
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, width) if width / s <= MAX_TICKS)
    return _figure(data, title("Tokens committed per pass", "share of passes" + over),
                   "tokens committed in one pass", "share of passes", barmode="group", bargap=0.15,
                   xaxis=dict(dtick=step, tick0=0 if step > 1 else 1, range=[0.5, width + 0.5]),
                   yaxis=dict(tickformat=".0%"), alt=alt)


def race_flicker_figure(changed: dict[str, np.ndarray]):
    """Per method: carried-over drafts that changed in each pass, mean over the samples."""
    data, said = [], []
    for method, c in changed.items():
        c = np.asarray(c, dtype=float)
        if c.size == 0 or method == "ar":
            continue
        label = METHOD_LABELS.get(method, method)
        said.append(f"{label} {c.mean():.1f}")
        data.append(dict(type="scatter", x=list(range(1, c.shape[1] + 1)), y=c.mean(0).round(2).tolist(),
                         mode="lines", name=label, line=dict(color=METHOD_COLOURS.get(method), width=2),
                         hovertemplate=f"{label}<br>pass %{{x}}: %{{y}} drafts changed on "
                                       f"average<extra></extra>"))
    alt = "Drafts changed since the last pass, mean per pass over the samples: " + ", ".join(said) + "."
    return _figure(data, title("Drafts changed since the last pass", "flicker, mean over the samples"),
                   "pass (NFE)", "changed drafts", alt=alt)


def _tile_maps(values: np.ndarray, grid: tuple[int, ...], cols: int = 4) -> np.ndarray:
    """[N] -> one float map with the frames laid out like `tile_frames` (NaN gaps)."""
    T, H, W = grid3(grid)
    v = values.reshape(T, H, W).astype(np.float64)
    if T == 1:
        return v[0]
    cols = min(T, cols)
    rows = -(-T // cols)
    sheet = np.full((rows * (H + 1) - 1, cols * (W + 1) - 1), np.nan)
    for t in range(T):
        r, c = divmod(t, cols)
        sheet[r * (H + 1):r * (H + 1) + H, c * (W + 1):c * (W + 1) + W] = v[t]
    return sheet


def _map_axes(shape: tuple[int, int]) -> dict:
    """Axes of a token map: row and column numbers, cells separated by white gaps (no grid
    lines through the cells), square cells, the grid's extent whatever is drawn (a pass's map
    keeps its axes from pass to pass)."""
    h, w = shape
    axis = dict(showgrid=False, zeroline=False, ticks="outside", constrain="domain", autorange=False)
    return dict(xaxis=dict(axis, title=dict(text="column"), dtick=1 if w <= 16 else None, range=[-0.5, w - 0.5]),
                yaxis=dict(axis, title=dict(text="row"), range=[h - 0.5, -0.5], scaleanchor="x",
                           dtick=1 if h <= 16 else None))


def heatmap_figure(values: np.ndarray, grid: tuple[int, ...], title: str, hover: str,
                   colorscale: str = "Viridis", missing: float | None = None, colorbar: str = "",
                   extra: tuple[dict, ...] = (), heat: dict | None = None, *, alt: str, **layout) -> PlotData:
    """A token map: `values` [N] laid out on the grid (frames tiled), NaN cells left blank;
    `heat`: more attributes of the map's trace, `extra`: traces drawn over it, `layout`: overrides."""
    z = _tile_maps(values, grid)
    if missing is not None:
        z = np.where(z == missing, np.nan, z)
    rows = [[None if np.isnan(v) else float(v) for v in r] for r in z]
    gap = 1 if max(z.shape) <= 32 else 0
    from plotly.colors import get_colorscale

    # the scale's colours, not its name: the browser's plotly knows few names (not Magma, RdYlGn)
    trace = dict(type="heatmap", z=rows, colorscale=get_colorscale(colorscale), hoverongaps=False,
                 xgap=gap, ygap=gap, hovertemplate=hover + "<extra></extra>",
                 colorbar=dict(thickness=10, title=dict(text=colorbar, side="right"))) | (heat or {})
    return _figure([trace, *extra], title, "", "", **(dict(height=300, margin=dict(b=40)) | layout),
                   **_map_axes(z.shape), alt=alt)


def committed_at_figure(stats: TraceStats):
    """Which forward pass committed each token."""
    vals = stats.committed_at if stats.committed_at is not None else np.full(stats.num_tokens, -1)
    done = vals[vals >= 0]
    alt = (f"Which pass committed each token: {done.size} of {vals.size} tokens committed, "
           + (f"by passes {int(done.min())} to {int(done.max())}, row by row." if done.size else "none yet."))
    return heatmap_figure(vals, stats.grid, "Committed by pass k",
                          "row %{y}, column %{x}<br>committed by forward pass %{z}",
                          missing=-1, colorbar="pass", alt=alt)


def unchanged_figure(stats: TraceStats):
    """The longest run of passes in which each position's draft kept the same token."""
    n = stats.num_tokens
    vals = stats.longest_unchanged if stats.longest_unchanged is not None else np.zeros(n)
    alt = (f"The longest run of passes each position's draft stayed unchanged: {int(np.max(vals, initial=0))} at most, "
           f"{float(np.mean(vals)):.1f} on average over the {n} positions.")
    return heatmap_figure(vals, stats.grid, "Longest run a draft stayed unchanged",
                          "row %{y}, column %{x}<br>draft unchanged for %{z} consecutive passes"
                          "<br>(0: never drafted)", colorscale="Magma", colorbar="passes", alt=alt)


def draft_words(it: Iteration, row: int = 0) -> dict[int, str]:
    """What a pass did with each draft it fed, by position, in words for the p/q map's hover
    (`run_view.draft_facts`: the draft's token x, p(x) of this pass and q(x) of the law it was
    drawn from, its test, and the next pass's draft there, the same token kept, by coupling for
    SCD, or redrawn). A chain's drafts only (a tree's nodes share positions): {} for a tree."""
    kept = "kept by the coupling" if it.method.startswith("scd") else "drawn again, the same token"
    out = {}
    for f in draft_facts(it, row):
        said = f"draft token {f.token}: p(x) = {f.p:.3f} at this pass, q(x) = {f.q:.3f} when drawn<br>"
        if f.test == "accepted":
            said += f"accepted (U < min(1, p/q) = {f.keep:.3f}), committed"
        elif f.test == "rejected":
            said += (f"rejected (U ≥ min(1, p/q) = {f.keep:.3f}); the residual "
                     f"norm(max(0, p − q)) drew token {f.residual}")
        else:
            said += f"fed after the first rejection, not tested (min(1, p/q) = {f.keep:.3f})"
        if f.next_draft is not None:
            said += f"<br>next pass's draft here: {kept}" if f.next_draft == f.token else \
                f"<br>next pass's draft here: redrawn, token {f.next_draft}"
        out[f.position] = said
    return out


def accept_prob_figure(it: Iteration, grid: tuple[int, ...], row: int = 0):
    """min(1, p/q) of the drafts this pass verified (the accepted ones and the first
    rejection), at their positions; drafts fed after the first rejection were never tested.
    Pointing at a cell says what the pass did with its draft (`draft_words`)."""
    n = int(np.prod(grid))
    words = draft_words(it, row)
    at = _tile_maps(np.arange(n, dtype=np.float64), grid)          # each cell's position (NaN: a gap)
    said = [[words.get(int(p), "") if np.isfinite(p) else "" for p in r] for r in at]
    probs = it.accept_prob[row].float().numpy()
    pos = int(it.n_before[row]) + np.arange(probs.shape[0])
    verified = it.verified[row].numpy() & (pos < n)
    untested = np.isfinite(probs) & ~verified & (pos < n)
    vals = np.full(n, np.nan)
    vals[pos[verified]] = probs[verified]
    mask = np.full(n, np.nan)
    mask[pos[untested]] = 1.0
    ys, xs = np.nonzero(np.isfinite(_tile_maps(mask, grid)))
    untested_cells = dict(type="scatter", x=xs.tolist(), y=ys.tolist(), mode="markers",
                          marker=dict(symbol="square-open", size=7, color=AR_LINE),
                          name="fed, not verified (after the first rejection)",
                          customdata=[said[y][x] or "draft fed after the first rejection: not tested"
                                      for y, x in zip(ys.tolist(), xs.tolist())],
                          hovertemplate="row %{y}, column %{x}<br>%{customdata}<extra></extra>")
    key = dict(type="scatter", x=[None], y=[None], mode="markers", name="verified draft, coloured by min(1, p/q)",
               marker=dict(symbol="square", size=9, color="rgb(26, 152, 80)"))
    facts = draft_facts(it, row)                   # a chain's (a tree's nodes share positions: none)
    rejected = [f for f in facts if f.test == "rejected"]
    verified, accepted = trace.verified_drafts([it], row), trace.accepted_drafts([it], row)
    alt = (f"min(1, p/q) of the drafts pass {it.index} verified: {verified} verified, {accepted} accepted"
           + (f", the first rejected at min(1, p/q) = {rejected[0].keep:.3f}" if rejected else "")
           + (f", {sum(f.test == 'untested' for f in facts)} fed after it, not tested; the table under the "
              "caption lists each draft's p(x) and q(x)." if facts else "."))
    return heatmap_figure(vals, grid, title("min(1, p/q) of the verified drafts", f"pass {it.index}"),
                          "row %{y}, column %{x}<br>verified: min(1, p/q) = %{z:.3f}<br>%{customdata}",
                          colorscale="RdYlGn", colorbar="min(1, p/q)", extra=(untested_cells, key),
                          heat=dict(zmin=0, zmax=1, customdata=said), height=420, legend=dict(y=-0.28),
                          margin=dict(b=70), alt=alt)           # + 40 for the legend's line


def race_figures(runs: dict, samples: int) -> tuple:
    """The race's three charts: tokens vs NFE (mean and band), tokens per pass, flicker."""
    return (race_progress_figure({m: r.committed_curves() for m, r in runs.items()},
                                 next(iter(runs.values())).num_tokens),
            histogram_figure({m: r.histogram() for m, r in runs.items() if m != "ar"}, samples),
            race_flicker_figure({m: r.changed_per_pass() for m, r in runs.items()}))


COUPLING = "texts/coupling.json"       # two positions of a real run (python -m bench coupling-figure)
# The coupling figure's own colours (not the methods'), each 3:1 against both themes; the
# residual in the orange the pictures give a residual sample.
COUPLING_COLOURS = {"q": "#0891b2", "p": "#db2777", "overlap": "#6366f1", "residual": "#ea580c"}


def keep_probability(case: dict) -> float:
    """min(1, p/q) of a coupling case's draft."""
    i = case["tokens"].index(case["draft"])
    return 1.0 if case["q"][i] == 0 else min(1.0, case["p"][i] / case["q"][i])


def coupling_figure(data: dict | None = None):
    """"How it works": maximal coupling at two positions of a real SCD-MC run, one panel each:
    the law q the draft was drawn from (p at the pass before), p now, their overlap; where p rose
    at the draft it is kept (probability 1), where it fell it is kept with probability
    min(1, p/q) < 1, else redrawn from the residual norm(max(0, p − q)), drawn there too."""
    if data is None:
        from pathlib import Path
        data = json.loads((Path(__file__).parent / COUPLING).read_text(encoding="utf-8"))
    c = COUPLING_COLOURS
    bars, notes, axes, said = [], [], {}, []
    for k, (name, case) in enumerate((("kept", data["kept"]), ("redrawn", data["redrawn"]))):
        x = [str(t) for t in case["tokens"]]
        q, p = case["q"], case["p"]
        i, keep = case["tokens"].index(case["draft"]), keep_probability(case)
        axis = "" if k == 0 else "2"
        shown = [("q", "q: p at the pass that drew the draft", q),
                 ("p", "p at the next pass", p), ("overlap", "overlap min(p, q)", [min(a, b) for a, b in zip(q, p)])]
        if name == "redrawn":
            shown.append(("residual", "residual norm(max(0, p − q)): where a redraw lands", case["residual"]))
        for key, label, values in shown:
            bars.append(dict(type="bar", x=x, y=values, name=label, legendgroup=key, showlegend=k == 0 or key == "residual",
                             marker=dict(color=c[key]), xaxis=f"x{axis}", yaxis=f"y{axis}",
                             hovertemplate=f"token %{{x}}: {label.split(':')[0]} = %{{y:.3f}}<extra></extra>"))
        if name == "kept":
            words = (f"<b>p rose at the draft</b> (position {case['position']}, pass {case['before']} → "
                     f"{case['now']}):<br>kept with probability min(1, p/q) = {keep:.2f}")
        else:
            words = (f"<b>p fell at the draft</b> (position {case['position']}, pass {case['before']} → "
                     f"{case['now']}):<br>kept with probability min(1, p/q) = {keep:.2f}, else<br>redrawn "
                     f"from the residual: here, token {case['again']}")
        top = max(max(q), max(p), max(case["residual"]) if name == "redrawn" else 0)
        low, high = (0.58, 1.0) if k == 0 else (0.0, 0.40)
        axes |= {f"xaxis{axis}": dict(type="category", anchor=f"y{axis}", tickfont=dict(size=10),
                                      title=dict(text="token" if k else "", standoff=2)),
                 f"yaxis{axis}": dict(domain=[low, high - 0.1], range=[0, top * 1.1], anchor=f"x{axis}",
                                      title=dict(text="probability", font=dict(size=11)))}
        notes += [dict(text=words, x=0, y=high - 0.08, xref="paper", yref="paper", showarrow=False, xanchor="left",
                       yanchor="bottom", align="left", font=dict(size=11)),
                  dict(x=i, y=max(q[i], p[i]) * 0.6, xref=f"x{axis}", yref=f"y{axis}", text=f"the draft, {case['draft']}",
                       showarrow=True, arrowhead=2, ax=-70 if i > len(x) // 2 else 70, ay=0, font=dict(size=11))]
        said.append(f"where p {'rose' if name == 'kept' else 'fell'} at the draft (token {case['draft']}, q "
                    f"{q[i]:.2f}, p {p[i]:.2f}) it is kept with probability {keep:.2f}"
                    + (f", else redrawn from the residual, as it was here (token {case['again']})"
                       if name == "redrawn" else ""))
    overlaps = " and ".join(f"{data[k]['overlap']:.2f}" for k in ("kept", "redrawn"))
    alt = (f"Maximal coupling at two positions of a real run ({data['model']}, “{data['prompt']}”): "
           + "; ".join(said) + f". Overlap Σ min(p, q) = 1 − TV(p, q): {overlaps}.")
    return _figure(bars, title("Maximal coupling at two positions",
                               f"{data['model']}, \u201c{data['prompt']}\u201d · overlap \u03a3 min(p, q) = "
                               f"1 \u2212 TV(p, q): {overlaps}"), "", "",
                   barmode="group", bargap=0.2, height=620, annotations=notes, margin=dict(t=72, b=60),
                   legend=dict(y=-0.1), alt=alt, **axes)


# The frontier figure's marks: a colour and a symbol each (told apart without colour too), every
# colour at least 3:1 against both themes' backgrounds.
POINT_STYLES = (("#0891b2", "circle"), ("#db2777", "square"), ("#6366f1", "diamond"), ("#ea580c", "triangle-up"),
                ("#16a34a", "x"), ("#8b5cf6", "star"), ("#d97706", "cross"), ("#64748b", "triangle-down"))
GOAL_COLOUR, PAPER_COLOUR = "#64748b", "#c026d3"


def frontier_figure(points: list[tuple[str, float, float]], lead_goal: float, rate_goal: float,
                    references: dict[str, float]):
    """Every prior trained so far: its lead over SJD at its best window (y) against its
    nearest-emoji rate (x), each point named in words in the legend; the two goals as dashed
    lines, each reference model (a lead without an emoji rate) as a dotted one."""
    top = max([y for _, _, y in points] + list(references.values()) + [lead_goal]) + 0.15
    bottom = max(0.0, min([y for _, _, y in points] + [lead_goal]) - 0.15)
    right = max([x for _, x, _ in points] + [rate_goal]) * 1.15
    data = [dict(type="scatter", x=[x], y=[y], mode="markers", name=name,
                 marker=dict(color=colour, symbol=symbol, size=11, line=dict(width=1.5, color=colour)),
                 hovertemplate=f"{name}<br>lead over SJD %{{y:.2f}}x<br>nearest-emoji rate %{{x:.1%}}<extra></extra>")
            for (name, x, y), (colour, symbol) in zip(points, POINT_STYLES * 2)]
    data += [dict(type="scatter", x=[0, right], y=[lead_goal, lead_goal], mode="lines", hoverinfo="skip",
                  name=f"goal: a lead of {lead_goal:.2f}x", line=dict(color=GOAL_COLOUR, dash="dash", width=1.5)),
             dict(type="scatter", x=[rate_goal, rate_goal], y=[bottom, top], mode="lines", hoverinfo="skip",
                  name=f"goal: drawing like tiny, {rate_goal:.0%}", line=dict(color=GOAL_COLOUR, dash="longdash",
                                                                            width=1.5))]
    data += [dict(type="scatter", x=[0, right], y=[lead, lead], mode="lines", hoverinfo="skip",
                  name=f"{name}: {lead:.2f}x", line=dict(color=PAPER_COLOUR, dash="dot", width=2))
             for name, lead in references.items()]
    both = [n for n, x, y in points if x >= rate_goal and y >= lead_goal]
    alt = ("Every prior trained so far, its lead over SJD at its best window against how often its samples are "
           "recognised as the emoji named: " + "; ".join(f"{n}, {y:.2f}x and {x:.1%}" for n, x, y in points)
           + f". Goals: a lead of {lead_goal:.2f}x and drawing like tiny, {rate_goal:.0%}; "
           + (f"{', '.join(both)} meets both." if both else "none meets both."))
    return _figure(data, title("Drawing against leading", "one point per trained prior"),
                   "nearest-emoji rate", "lead over SJD, best window",
                   height=520, xaxis=dict(range=[0, right], tickformat=".0%"),
                   yaxis=dict(range=[bottom, top], ticksuffix="x"),
                   legend=dict(orientation="v", x=0, y=-0.16, yanchor="top", font=dict(size=11)), alt=alt)
