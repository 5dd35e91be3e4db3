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
from demo.run_view import TraceStats
from scd_core.trace import Iteration

# --------------------------------------------------------------------------- charts

MAX_TICKS = 17          # numbered ticks on an axis at most: a phone's chart reads them apart
METHOD_COLOURS = {"ar": "#64748b", "sjd": "#f59e0b", "scd-mc": "#16a34a", "scd-gumbel": "#7c3aed"}


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def _css(rgb: tuple[int, int, int], alpha: float | None = None) -> str:
    return f"rgb{rgb}" if alpha is None else f"rgba({rgb[0]}, {rgb[1]}, {rgb[2]}, {alpha})"


def title(text: str, detail: str = "") -> str:
    """A chart title short enough for a phone, its figures on a second, smaller line."""
    return text + (f"<br><sub>{detail}</sub>" if detail else "")


def plot_of(figure: dict) -> PlotData:
    """A chart as `gr.Plot` shows it: the figure's JSON, made once, without plotly's checks
    (the figures here are built by this module) and without its default template (8 KB a
    chart; the layouts set what they need)."""
    import plotly.io as pio

    return PlotData(type="plotly", plot=pio.to_json(figure, validate=False))


def figure_of(plot: PlotData) -> dict:
    """The figure a chart shows, as plain dicts: `plot_of`'s inverse."""
    return json.loads(plot.plot)


def _figure(data: list[dict], title: str, x: str, y: str, height: int = 300, **layout) -> PlotData:
    """A chart from plain dicts: traces `data`, a title, axis titles and layout overrides."""
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
    return plot_of(dict(data=data, layout=base))


def note_figure(title_text: str, words: str, height: int = 300) -> PlotData:
    """A chart that has nothing to plot (yet, or ever for this run), saying why in words: no
    axes, no empty placeholder."""
    hidden = dict(visible=False)
    return plot_of(dict(data=[], layout=dict(
        title=dict(text=title_text, font=dict(size=14)), height=height, margin=dict(l=20, r=20, t=56, b=20),
        plot_bgcolor="white", paper_bgcolor="white", xaxis=hidden, yaxis=hidden,
        annotations=[dict(text=words, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                          font=dict(size=13, color="#475569"), align="center")])))


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
                 name="one token per pass (AR)", line=dict(color="#94a3b8", dash="dash"),
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
    return _figure(data, title("Tokens committed vs NFE", note), "NFE",
                   "tokens committed",
                   height=320, xaxis=dict(range=[0, num_tokens * 1.02]),
                   yaxis=dict(range=[0, num_tokens * 1.05]))


def race_progress_figure(curves: dict[str, np.ndarray], num_tokens: int, upto: int | None = None):
    """Per method, the mean over its K samples of tokens committed after each pass, with a
    band from the slowest to the fastest sample. `curves[m]` is [K, NFE]; `upto` cuts the
    curves at that NFE (the lockstep replay). AR's own curve is the one-token-per-pass line:
    the dashed reference is drawn only in a race without AR, so that AR is drawn once."""
    data = [] if "ar" in curves else [
        dict(type="scatter", x=[0, num_tokens], y=[0, num_tokens], mode="lines",
             name="one token per pass (AR)", line=dict(color="#94a3b8", dash="dash"), hoverinfo="skip")]
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
        data.append(dict(type="scatter", x=x, y=low.tolist(), mode="lines", line=dict(width=0),
                         showlegend=False, legendgroup=method, hoverinfo="skip"))
        data.append(dict(type="scatter", x=x, y=high.tolist(), mode="lines", line=dict(width=0),
                         fill="tonexty", fillcolor=_css(_rgb(colour), 0.18), showlegend=False,
                         legendgroup=method, hoverinfo="skip"))
        data.append(dict(type="scatter", x=x, y=mean.round(1).tolist(), mode="lines",
                         name=f"{label}: mean of {k}" + (", band min-max" if k > 1 else ""),
                         legendgroup=method, line=dict(color=colour, width=2.5),
                         hovertemplate=f"{label}<br>NFE %{{x}}: %{{y}} tokens on average over "
                                       f"{k} samples<extra></extra>"))
    return _figure(data, title("Tokens committed vs NFE", "mean over the samples, band: min–max"),
                   "NFE", "tokens committed", height=320,
                   xaxis=dict(range=[0, num_tokens * 1.02]), yaxis=dict(range=[0, num_tokens * 1.05]))


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
    if stats.method == "ar":
        detail = "AR: one token per pass, no drafts"
    else:
        mean_len = stats.sample().mean_accepted_length if stats.records else 0.0
        detail = f"mean accepted length {mean_len:.2f}; AR commits 1 per pass"
        data.append(dict(type="scatter", x=[stats.index[0], stats.index[-1]] if stats.index else [0, 1],
                         y=[1, 1], mode="lines", name="AR: 1 token per pass",
                         line=dict(color=METHOD_COLOURS["ar"], dash="dash", width=1.5), hoverinfo="skip"))
    return _figure(data, title("Tokens committed per pass", detail), "pass", "tokens", barmode="stack",
                   bargap=0.1, showlegend=True)            # its colours named, one kind or several


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
    return _figure(data, title("Drafts changed since the last pass", said), "pass", "carried drafts",
                   barmode="stack", bargap=0.1, **(dict(margin=dict(t=76)) if others else {}))


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
    return _figure(data, title("Acceptance rate", f"{rate_now:.3f} so far; AR verifies no drafts"), "pass",
                   "accepted / verified", yaxis=dict(range=[0, 1.02]), xaxis=dict(rangemode="tozero"))


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
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, width) if width / s <= MAX_TICKS)
    return _figure(data, title("Tokens committed per pass", "share of passes" + over),
                   "tokens committed in one pass", "share of passes", barmode="group", bargap=0.15,
                   xaxis=dict(dtick=step, tick0=0 if step > 1 else 1, range=[0.5, width + 0.5]),
                   yaxis=dict(tickformat=".0%"))


def race_flicker_figure(changed: dict[str, np.ndarray]):
    """Per method: carried-over drafts that changed in each pass, mean over the samples."""
    data = []
    for method, c in changed.items():
        c = np.asarray(c, dtype=float)
        if c.size == 0 or method == "ar":
            continue
        label = METHOD_LABELS.get(method, method)
        data.append(dict(type="scatter", x=list(range(1, c.shape[1] + 1)), y=c.mean(0).round(2).tolist(),
                         mode="lines", name=label, line=dict(color=METHOD_COLOURS.get(method), width=2),
                         hovertemplate=f"{label}<br>pass %{{x}}: %{{y}} drafts changed on "
                                       f"average<extra></extra>"))
    return _figure(data, title("Drafts changed since the last pass", "flicker, mean over the samples"),
                   "pass (NFE)", "changed drafts")


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
                   extra: tuple[dict, ...] = (), heat: dict | None = None, **layout) -> PlotData:
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
                   **_map_axes(z.shape))


def committed_at_figure(stats: TraceStats):
    """Which forward pass committed each token."""
    vals = stats.committed_at if stats.committed_at is not None else np.full(stats.num_tokens, -1)
    return heatmap_figure(vals, stats.grid, "Committed by pass k",
                          "row %{y}, column %{x}<br>committed by forward pass %{z}",
                          missing=-1, colorbar="pass")


def unchanged_figure(stats: TraceStats):
    """The longest run of passes in which each position's draft kept the same token."""
    n = stats.num_tokens
    vals = stats.longest_unchanged if stats.longest_unchanged is not None else np.zeros(n)
    return heatmap_figure(vals, stats.grid, "Longest run a draft stayed unchanged",
                          "row %{y}, column %{x}<br>draft unchanged for %{z} consecutive passes"
                          "<br>(0: never drafted)", colorscale="Magma", colorbar="passes")


def draft_words(it: Iteration, row: int = 0) -> dict[int, str]:
    """What a pass did with each draft it fed, by position, in words for the p/q map's hover:
    the draft's token x, p(x) of this pass and q(x) of the law it was drawn from, its test
    (accepted, or the first rejection and the residual's token, or never tested), and the next
    pass's draft there (the same token kept, by coupling for SCD,
    or redrawn). A chain's drafts only (a tree's nodes share positions): {} for a tree."""
    if it.parents is not None:
        return {}
    fed, a = it.window_tokens[row].tolist(), it.accept_prob[row].float().tolist()
    p_x, q_x = it.p_draft[row].float().tolist(), it.q_draft[row].float().tolist()
    n_before, n_after, accepted = int(it.n_before[row]), int(it.n_after[row]), int(it.num_accepted[row])
    committed, nxt = it.tokens_after[row].tolist(), it.drafts_after[row].tolist()
    kept = "kept by the coupling" if it.method.startswith("scd") else "drawn again, the same token"
    out = {}
    for i, p_q in enumerate(a):
        pos = n_before + i
        if pos >= len(committed) or np.isnan(p_q):
            continue
        token = fed[1 + i]
        said = f"draft token {token}: p(x) = {p_x[i]:.3f} at this pass, q(x) = {q_x[i]:.3f} when drawn<br>"
        if i < accepted:
            said += f"accepted (U < min(1, p/q) = {p_q:.3f}), committed"
        elif i == accepted:
            said += (f"rejected (U ≥ min(1, p/q) = {p_q:.3f}); the residual "
                     f"norm(max(0, p − q)) drew token {committed[pos]}")
        else:
            said += f"fed after the first rejection, not tested (min(1, p/q) = {p_q:.3f})"
        if pos >= n_after and pos - n_after < len(nxt) and nxt[pos - n_after] >= 0:
            again = nxt[pos - n_after]
            said += f"<br>next pass's draft here: {kept}" if again == token else \
                f"<br>next pass's draft here: redrawn, token {again}"
        out[pos] = said
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
                          marker=dict(symbol="square-open", size=7, color="#94a3b8"),
                          name="fed, not verified (after the first rejection)",
                          customdata=[said[y][x] or "draft fed after the first rejection: not tested"
                                      for y, x in zip(ys.tolist(), xs.tolist())],
                          hovertemplate="row %{y}, column %{x}<br>%{customdata}<extra></extra>")
    key = dict(type="scatter", x=[None], y=[None], mode="markers", name="verified draft, coloured by min(1, p/q)",
               marker=dict(symbol="square", size=9, color="rgb(26, 152, 80)"))
    return heatmap_figure(vals, grid, title("min(1, p/q) of the verified drafts", f"pass {it.index}"),
                          "row %{y}, column %{x}<br>verified: min(1, p/q) = %{z:.3f}<br>%{customdata}",
                          colorscale="RdYlGn", colorbar="min(1, p/q)", extra=(untested_cells, key),
                          heat=dict(zmin=0, zmax=1, customdata=said), height=420, legend=dict(y=-0.28),
                          margin=dict(b=70))           # + 40 for the legend's line


def race_figures(runs: dict, samples: int) -> tuple:
    """The race's three charts: tokens vs NFE (mean and band), tokens per pass, flicker."""
    return (race_progress_figure({m: r.committed_curves() for m, r in runs.items()},
                                 next(iter(runs.values())).num_tokens),
            histogram_figure({m: r.histogram() for m, r in runs.items() if m != "ar"}, samples),
            race_flicker_figure({m: r.changed_per_pass() for m, r in runs.items()}))


COUPLING = "texts/coupling.json"       # one position of a real run (python -m bench coupling-figure)


def coupling_figure(data: dict | None = None):
    """"How it works": maximal coupling at one position of a real SCD-MC run: the law q the
    draft was drawn from (p at the pass before), p now, their overlap, and the draft kept."""
    if data is None:
        from pathlib import Path
        data = json.loads((Path(__file__).parent / COUPLING).read_text(encoding="utf-8"))
    x = [str(t) for t in data["tokens"]]
    q, p = data["q"], data["p"]
    overlap = [min(a, b) for a, b in zip(q, p)]
    draft, i = str(data["draft"]), data["tokens"].index(data["draft"])
    keep = 1.0 if q[i] == 0 else min(1.0, p[i] / q[i])
    before, now = data["before"], data["now"]
    bars = [dict(type="bar", x=x, y=q, name=f"q: p at pass {before}, the law the draft was drawn from",
                 marker=dict(color=METHOD_COLOURS["sjd"]),
                 hovertemplate=f"token %{{x}}: q = %{{y:.3f}} (pass {before})<extra></extra>"),
            dict(type="bar", x=x, y=p, name=f"p at pass {now}, now", marker=dict(color=METHOD_COLOURS["scd-gumbel"]),
                 hovertemplate=f"token %{{x}}: p = %{{y:.3f}} (pass {now})<extra></extra>"),
            dict(type="bar", x=x, y=overlap, name="overlap min(p, q)", marker=dict(color=METHOD_COLOURS["scd-mc"]),
                 hovertemplate="token %{x}: min(p, q) = %{y:.3f}<extra></extra>")]
    said = (f"{data['model']}, \u201c{data['prompt']}\u201d, position {data['position']}<br>overlap "
            f"\u03a3 min(p, q) = {data['overlap']:.2f} = 1 \u2212 TV(p, q)")
    top = max(max(q), max(p))
    note = dict(x=i, y=max(q[i], p[i]) * 0.6,                 # x: the draft's category, by its index
                text=f"the draft, {draft}: kept with<br>probability min(1, p/q) = {keep:.2f}",
                showarrow=True, arrowhead=2, ax=-90 if i > len(x) // 2 else 90, ay=0, font=dict(size=11))
    return _figure(bars, title("Maximal coupling at one position", said), "token (the most likely ones)",
                   "probability", barmode="group", bargap=0.2, height=400, annotations=[note],
                   margin=dict(t=72), xaxis=dict(type="category"), yaxis=dict(range=[0, top * 1.1]))
