"""The page's pictures, trace statistics, plots and GIF/MP4 export (demo.pictures, run_view,
charts, race_view, export): token states, overlays, plots and files.

Hand-built Iteration records pin the state rules; runs of the real engine on the fast
synthetic models check that the pictures and statistics agree with the trace's own metrics.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from PIL import Image

import scd_core
from legend_check import unnamed_colours
from plots_util import figure
from scd_core import race, trace
from demo import charts, export, pictures, race_view, run_view, streaming
from scd_core.trace import Iteration, Run, TokenLog


def make_iteration(n_before: int, n_after: int, accepted: int, drafts: int, N: int = 16,
                   window: int = 5, resampled: bool = False, index: int = 1) -> Iteration:
    """A one-row record: `accepted` drafts accepted, then one new token, `drafts` drafts after."""
    D = window - 1
    tokens_after = torch.full((1, N), -1, dtype=torch.long)
    tokens_after[0, :n_after] = 7
    drafts_after = torch.full((1, D), -1)
    drafts_after[0, :drafts] = 3
    return Iteration(
        index=index, method="sjd", n_before=torch.tensor([n_before]), n_after=torch.tensor([n_after]),
        start=torch.tensor([max(n_before - 1, 0)]),
        window_tokens=torch.zeros(1, window, dtype=torch.long), num_accepted=torch.tensor([accepted]),
        accept_prob=torch.full((1, D), 0.5), p_draft=torch.full((1, D), 0.25), q_draft=torch.full((1, D), 0.5),
        resampled=torch.tensor([resampled]),
        drafts_after=drafts_after, log=TokenLog(tokens_after),
        nfe=index + 1, wall_time=0.1, step_time=0.05)


@pytest.fixture(scope="module")
def toy_grid():
    return scd_core.load_model("toy-grid")


@pytest.fixture(scope="module")
def sjd_iterations(toy_grid):
    return list(scd_core.stream(toy_grid, ["red apple"], method="sjd", window=8, seed=1))


def test_token_states_mark_each_kind_of_position():
    it = make_iteration(n_before=4, n_after=7, accepted=2, drafts=3, resampled=True)
    states = pictures.token_states(it)
    assert states.tolist() == [pictures.COMMITTED] * 4 + [pictures.ACCEPTED] * 2 + [pictures.RESAMPLED] + \
        [pictures.DRAFT] * 3 + [pictures.EMPTY] * 6


def test_token_states_bonus_token_is_a_new_sample():
    it = make_iteration(n_before=2, n_after=7, accepted=4, drafts=0, resampled=False)
    states = pictures.token_states(it)
    assert (states[2:6] == pictures.ACCEPTED).all() and states[6] == pictures.NEW and (states[7:] == pictures.EMPTY).all()


def test_overlay_upscales_and_colours_cells():
    frame = np.full((8, 8, 3), 255, np.uint8)           # a 4x4 grid of 2x2-pixel tokens
    states = np.array([[pictures.COMMITTED, pictures.ACCEPTED, pictures.RESAMPLED, pictures.DRAFT]] + [[pictures.EMPTY] * 4] * 3)
    out = pictures.overlay_frame(frame, states, scale=10)
    assert out.shape == (80, 80, 3) and out.dtype == np.uint8
    centre = lambda r, c: out[r * 20 + 10, c * 20 + 10]
    assert tuple(centre(0, 0)) == (255, 255, 255)                   # committed: untouched
    assert centre(0, 1)[1] > centre(0, 1)[0] and centre(0, 1)[1] > centre(0, 1)[2]  # green tint
    assert centre(0, 2)[0] > centre(0, 2)[2]                        # orange
    assert tuple(out[0, 25]) == pictures.OUTLINE[pictures.ACCEPTED]               # outline on the edge
    assert tuple(centre(1, 1)) == pictures.STYLE[pictures.EMPTY][1]               # empty: flat grey


def test_render_iteration_of_an_image_model(toy_grid, sjd_iterations):
    pic = pictures.render_iteration(toy_grid, sjd_iterations[len(sjd_iterations) // 2])
    assert pic.dtype == np.uint8 and pic.ndim == 3 and pic.shape[2] == 3
    assert 256 <= pic.shape[0] <= 384 and pic.shape[0] == pic.shape[1]   # 64 px upscaled


def test_render_iteration_of_a_video_model_tiles_the_frames():
    model = scd_core.load_model("toy", vocab_size=3, grid=(3, 2, 2))
    its = list(scd_core.stream(model, ["x"], method="scd-mc", window=4, seed=0))
    pic = pictures.render_iteration(model, its[1])
    frame = pictures.render_iteration(model, its[1], overlay=False)
    assert pic.shape == frame.shape and pic.shape[1] > 2.5 * pic.shape[0]   # 3 frames in a row


def test_large_frames_are_box_filtered_down_for_streaming():
    frame = np.zeros((1024, 768, 3), np.uint8)
    frame[:, 384:] = 200
    small = pictures.shrink(frame, 320)
    assert small.shape == (341, 256, 3) and small[0, 0, 0] == 0 and small[0, -1, 0] == 200
    assert pictures.shrink(frame[:400, :400], 320).shape == (400, 400, 3)     # under 2x: untouched


def test_temporal_tokenizer_shows_one_decoded_frame_per_token_frame():
    """A video tokenizer may decode T token frames into more pixel frames (Cosmos: 5 -> 33)."""
    class Temporal:
        grid = (2, 2, 2)
        vocab_size = 3

        def decode(self, tokens):
            return [[Image.new("RGB", (8, 8), (40 * t, 0, 0)) for t in range(5)]
                    for _ in tokens]

    it = make_iteration(n_before=2, n_after=4, accepted=1, drafts=2, N=8)
    pic = pictures.render_iteration(Temporal(), it, overlay=False)
    frame = pic.shape[0]
    assert pic.shape[1] > 2 * frame - 10                       # two frames side by side
    assert pic[frame // 2, frame // 2, 0] == 0 and pic[frame // 2, -frame // 2, 0] == 80


def test_trace_stats_agree_with_the_run_metrics(toy_grid, sjd_iterations):
    stats = run_view.TraceStats(tuple(toy_grid.grid))
    for it in sjd_iterations:
        stats.add(it)
    run = Run.from_iterations(sjd_iterations, decode=toy_grid.decode)
    assert stats.done and stats.committed[-1] == run.num_tokens
    assert stats.nfe[-1] == run.nfe == len(sjd_iterations)
    sample = stats.sample()
    assert sample.acceptance_rate == pytest.approx(run.acceptance_rate)
    assert sample.mean_accepted_length == pytest.approx(run.mean_accepted_length)
    assert sample.draft_stability == pytest.approx(run.draft_stability)
    assert stats.running_acceptance[-1] == pytest.approx(run.acceptance_rate)
    for i in (1, len(sjd_iterations) // 3, len(sjd_iterations) // 2):    # the chart's curve: the
        assert stats.running_acceptance[i] == pytest.approx(              # trace's rate so far
            trace.acceptance_rate(sjd_iterations[:i + 1]))
    # every position was committed by exactly one pass, in raster order
    assert (stats.committed_at >= 0).all() and (np.diff(stats.committed_at) >= 0).all()
    assert stats.longest_unchanged.max() >= 1


def test_the_flicker_views_count_what_the_trace_counts(toy_grid, sjd_iterations):
    """Per pass: changed drafts = carried - unchanged (the trace's), and the filmstrip shows
    exactly that many changed and unchanged drafts."""
    stats = run_view.TraceStats(tuple(toy_grid.grid))
    for it in sjd_iterations:
        stats.add(it)
    for it, changed, carried, film in zip(sjd_iterations, stats.changed, stats.carried, stats.film):
        assert changed == int(it.carried[0].sum()) - int(it.unchanged[0])
        assert carried == int(it.carried[0].sum())
        assert (film == pictures.F_CHANGED).sum() == changed and (film == pictures.F_KEPT).sum() == carried - changed
    img = pictures.filmstrip_image(stats.film)
    assert img.dtype == np.uint8 and img.shape[0] >= len(stats.film[0])


def test_coupling_keeps_drafts_that_sjd_redraws(toy_grid):
    """The quantity SCD raises, seen on the maps: longer runs of unchanged drafts."""
    def longest(method):
        means = []
        for seed in (3, 4):
            stats = run_view.TraceStats(tuple(toy_grid.grid))
            for it in scd_core.stream(toy_grid, ["fox"], method=method, window=16, seed=seed):
                stats.add(it)
            means.append(stats.longest_unchanged.mean())
        return np.mean(means)
    sjd = longest("sjd")
    assert longest("scd-mc") > 1.1 * sjd and longest("scd-gumbel") > 1.1 * sjd


def all_figures(toy_grid, sjd_iterations):
    stats = run_view.TraceStats(tuple(toy_grid.grid))
    for it in sjd_iterations:
        stats.add(it)
    settings = race.Race("fox", scd_core.Settings(window=8))
    runs = {m: list(race.decode(toy_grid, settings, m, 2))[-1] for m in ("ar", "sjd", "scd-mc")}
    return stats, [figure(f) for f in (
        charts.committed_vs_nfe_figure({"sjd": (stats.nfe, stats.committed)}, stats.num_tokens, "sjd"),
        charts.accepted_length_figure(stats), charts.acceptance_figure(stats), charts.flicker_figure(stats),
        charts.committed_at_figure(stats), charts.unchanged_figure(stats),
        charts.accept_prob_figure(sjd_iterations[3], tuple(toy_grid.grid)),
        charts.race_progress_figure({m: r.committed_curves() for m, r in runs.items()}, 256),
        charts.histogram_figure({m: r.histogram() for m, r in runs.items()}, 2),
        charts.race_flicker_figure({m: r.changed_per_pass() for m, r in runs.items()}))]


def test_figures_are_valid_plotly_with_hover_definitions(toy_grid, sjd_iterations):
    stats, figs = all_figures(toy_grid, sjd_iterations)        # plotly checks every attribute
    curve = figs[0]
    assert curve.data[0].x == (0, stats.num_tokens)             # the AR diagonal
    assert "forward passes" in curve.data[1].hovertemplate
    assert "verified" in figs[2].data[0].hovertemplate
    assert figs[4].data[0].type == "heatmap" and figs[4].layout.xaxis.title.text == "column"


def test_token_maps_send_their_colours_not_a_colour_scale_name(toy_grid, sjd_iterations):
    stats = run_view.TraceStats(tuple(toy_grid.grid))
    for it in sjd_iterations:
        stats.add(it)
    for plot in (charts.committed_at_figure(stats), charts.unchanged_figure(stats),
                 charts.accept_prob_figure(sjd_iterations[3], tuple(toy_grid.grid))):
        scale = charts.figure_of(plot)["data"][0]["colorscale"]       # what the browser gets
        assert [s[0] for s in scale][::len(scale) - 1] == [0, 1] and all(c.startswith("#") or
                                                                         c.startswith("rgb") for _, c in scale)


def test_every_chart_names_each_colour_it_draws(toy_grid, sjd_iterations):
    for fig in all_figures(toy_grid, sjd_iterations)[1]:
        assert unnamed_colours(fig) == [], fig.layout.title.text


def test_every_mark_of_every_chart_is_3_to_1_against_both_themes_backgrounds(toy_grid, sjd_iterations):
    """WCAG 1.4.11: every line, bar and marker a chart draws, and every method's colour, at least
    3:1 against white and against the dark theme's panel; a band's translucent fill is drawn with
    its edges in its line's colour. A heat map's cells are read against its colour bar."""
    from demo import frontier_view
    from legend_check import colours

    figs = all_figures(toy_grid, sjd_iterations)[1] + [figure(charts.coupling_figure()),
                                                       figure(frontier_view.figure())]
    low = []
    for fig in figs:
        for trace in (d.to_plotly_json() for d in fig.data):
            if trace.get("type") == "heatmap":
                continue
            fill = trace.pop("fillcolor", None)
            if fill is not None:
                assert trace["line"]["width"] > 0, fig.layout.title.text      # a band: its edges drawn
            for rgb in colours(trace):
                for theme, background in charts.CHART_BACKGROUNDS.items():
                    if charts.contrast(charts.hex_of(rgb), background) < 3:
                        low.append((fig.layout.title.text.split("<")[0], trace.get("name"), rgb, theme))
    assert low == []
    for colour in charts.METHOD_COLOURS.values():
        assert min(charts.contrast(colour, b) for b in charts.CHART_BACKGROUNDS.values()) >= 3, colour
    for kept, changed in [(pictures.FILM_STYLE[pictures.F_KEPT][1], pictures.FILM_STYLE[pictures.F_CHANGED][1])]:
        assert min(charts.contrast(charts.hex_of(c), b) for c in (kept, changed)
                   for b in charts.CHART_BACKGROUNDS.values()) >= 3


def test_every_chart_says_what_it_shows_in_one_line(toy_grid, sjd_iterations):
    """A chart's text alternative (what a screen reader hears for it) carries its figures."""
    stats = run_view.TraceStats(tuple(toy_grid.grid))
    for it in sjd_iterations:
        stats.add(it)
    said = {name: charts.alt_of(plot) for name, plot in charts.run_figures(stats, {}, "sjd").items()}
    assert set(said) == set(charts.RUN_CHARTS) and all(s and "\n" not in s for s in said.values())
    assert f"{stats.num_tokens} tokens in {stats.nfe[-1]} passes" in said["committed"]
    assert f"{stats.sample().acceptance_rate:.3f} now" in said["rate"]
    assert f"{int(np.sum(stats.changed))} changed" in said["flicker"]
    ar = charts.run_figures(stats, {}, "ar")
    assert charts.alt_of(ar["rate"]).startswith("Acceptance rate: AR feeds no drafts")
    it = sjd_iterations[3]
    facts = run_view.draft_facts(it)
    assert f"{sum(f.test == 'accepted' for f in facts)} accepted" in charts.alt_of(
        charts.accept_prob_figure(it, tuple(toy_grid.grid)))


def test_the_replays_table_holds_what_pointing_at_the_map_says(toy_grid, sjd_iterations):
    """The per-draft p(x), q(x), test and next draft, in a table a keyboard and a screen reader
    reach; the replay opens on a pass that rejected a draft (the most verified among those)."""
    grid = tuple(toy_grid.grid)
    for it in sjd_iterations[1:6]:
        table = run_view.draft_table(it, grid, "sjd")
        words = charts.draft_words(it)
        assert table.count("\n| row ") == len(words)
        for f in run_view.draft_facts(it):
            assert f"| {run_view.place(f.position, grid)} | {f.token} | {f.p:.3f} | {f.q:.3f} | {f.keep:.3f} |" in table
            assert f"p(x) = {f.p:.3f} at this pass, q(x) = {f.q:.3f}" in words[f.position]
    i = run_view.telling_pass(sjd_iterations)
    rejected = [j for j, it in enumerate(sjd_iterations) if bool(it.resampled[0])]
    assert i in rejected and all(trace_verified(sjd_iterations[j]) <= trace_verified(sjd_iterations[i])
                                 for j in rejected)
    caption = run_view.replay_caption(sjd_iterations, i, opened=True)
    assert "The replay opens here" in caption and f"the last pass, {len(sjd_iterations) - 1}" in caption
    assert run_view.place(70, (2, 6, 6)) == "frame 1, row 5, column 4"


def trace_verified(it) -> int:
    from scd_core import trace
    return trace.verified_drafts([it], 0)


def test_accepted_length_bars_take_the_colour_their_legend_gives(toy_grid, sjd_iterations):
    stats, _ = all_figures(toy_grid, sjd_iterations)
    fig = figure(charts.accepted_length_figure(stats))
    by_name = {t.name: t for t in fig.data}
    residual = by_name["residual sample (first rejection)"]
    assert isinstance(residual.marker.color, str)                # one colour per legend entry
    assert len(residual.x) == stats.new_kind.count("resampled")


def test_race_progress_band_spans_the_samples():
    curves = {"sjd": np.array([[1, 3, 6, 8], [1, 2, 4, 8]])}
    fig = figure(charts.race_progress_figure(curves, 8))
    low, high, mean = fig.data[1:4]
    assert list(low.y) == [0, 1, 2, 4, 8] and list(high.y) == [0, 1, 3, 6, 8]
    assert list(mean.y) == [0, 1, 2.5, 5, 8] and mean.name == "SJD: mean of 2, band min-max"
    assert len(figure(charts.race_progress_figure(curves, 8, upto=2)).data[3].y) == 3


def test_accept_prob_map_colours_only_the_verified_drafts(toy_grid, sjd_iterations):
    for it in sjd_iterations[1:6]:
        fig = figure(charts.accept_prob_figure(it, tuple(toy_grid.grid)))
        z = np.array(fig.data[0].z, dtype=float)
        assert np.isfinite(z).sum() == int(it.verified[0].sum())
        untested = fig.data[1]
        assert len(untested.x) == int(np.isfinite(it.accept_prob[0].numpy()).sum()) - \
            int(it.verified[0].sum())


def test_race_table_puts_the_losslessness_check_second():
    spread = race.Spread.of
    s = race.MethodSummary("sjd", 3, spread([20, 22, 24]), spread([3.2, 2.9, 2.7]),
                           spread([0.6, 0.7, 0.8]), spread([1, 2, 3]), spread([0.1, 0.2, 0.3]), True)
    html = race_view.race_table_html([s], greedy=True)
    assert race_view.RACE_HEADERS[1] == "same tokens as AR"
    assert ('<td data-label="method">SJD</td><td data-label="same tokens as AR">yes</td>'
            '<td data-label="NFE: mean (min–max)">22.0 <span class="nobr">(20–24)</span></td>') in html


def test_race_table_shows_the_check_against_ar_only_in_greedy_mode():
    """Sampling, the methods' tokens differ from AR's by design: no column of "n/a"."""
    spread = race.Spread.of
    s = race.MethodSummary("sjd", 3, spread([20, 22, 24]), spread([3.2, 2.9, 2.7]),
                           spread([0.6, 0.7, 0.8]), spread([1, 2, 3]), spread([0.1, 0.2, 0.3]), None)
    html = race_view.race_table_html([s], greedy=False)
    assert "same tokens as AR" not in html and "n/a" not in html
    assert '<td data-label="method">SJD</td><td data-label="NFE: mean (min–max)">22.0 <span class="nobr">(20–24)</span></td>' in html


def words(html: str) -> str:
    """A sentence as read: its ranges' boxes (`race_view.span`) left out."""
    return re.sub(r"</?span[^>]*>", "", html)


def summary_of(method: str, latencies, batch_times, nfe=(100,)) -> race.MethodSummary:
    spread = race.Spread.of
    timing = race.Timing.of_rounds([race.Timing(t, nfe[0], 8, b) for t, b in zip(latencies, batch_times)])
    return race.MethodSummary(method, len(nfe), spread(nfe), spread([1.0]), spread([0.5]), spread([1.0]),
                              spread([0.5]), None, timing)


def test_race_names_a_faster_method_only_when_the_rounds_ranges_do_not_overlap():
    """Times are the median of the rounds with their range; overlapping ranges are said to be
    within noise, whatever the medians."""
    ar = summary_of("ar", [0.50, 0.52, 0.55], [1.0, 1.1, 1.2], nfe=(576,))
    mc = summary_of("scd-mc", [0.12, 0.13, 0.15], [0.5, 0.6, 0.7], nfe=(135,))
    gumbel = summary_of("scd-gumbel", [0.13, 0.14, 0.16], [0.55, 0.6, 0.65], nfe=(135,))
    said = words(race_view.timing_sentence([ar, mc, gumbel], "CPU (1 thread)"))
    assert "median of 3 rounds" in said
    assert ("**One image**: SCD maximal coupling has the best median, 0.13 s (0.12–0.15), but is within "
            "noise of SCD Gumbel coupling (0.14 s (0.13–0.16)): no method is clearly the best here; SCD "
            "maximal coupling is clearly ahead of AR (0.52 s (0.50–0.55)).") in said
    assert "soonest" not in said
    said = words(race_view.timing_sentence([ar, mc], "CPU (1 thread)"))
    assert ("**One image**: SCD maximal coupling is done soonest, 0.13 s (0.12–0.15), clearly ahead of "
            "AR (0.52 s (0.50–0.55)).") in said
    noisy = summary_of("sjd", [0.10, 0.54, 0.83], [0.4, 0.9, 1.3], nfe=(250,))
    said = words(race_view.timing_sentence([ar, noisy], "CPU (1 thread)"))
    assert ("**One image**: AR has the best median, 0.52 s (0.50–0.55), but is within noise of "
            "SJD (0.54 s (0.10–0.83)): no method is clearly the best here.") in said
    ar2 = summary_of("ar", [0.50, 0.55], [1.0, 1.2], nfe=(576,))          # two rounds apart: not yet clear
    mc2 = summary_of("scd-mc", [0.12, 0.15], [0.5, 0.7], nfe=(135,))
    said = words(race_view.timing_sentence([ar2, mc2], "CPU (1 thread)"))
    assert "clearly ahead" not in said and "soonest" not in said
    assert ("SCD maximal coupling has the best median, 0.14 s (0.12–0.15), but is ahead of AR (0.53 s "
            "(0.50–0.55)) in each of 2 rounds, too few to call it clear (the spread alone sets two methods "
            "apart one time in 3)") in said


def test_a_race_timed_once_calls_no_method_faster():
    ar = summary_of("ar", [0.5], [1.0], nfe=(576,))
    mc = summary_of("scd-mc", [0.1], [0.5], nfe=(135,))
    said = words(race_view.timing_sentence([ar, mc], "GPU"))
    assert "timed once each, so no method is called faster" in said
    assert "**one image** AR (0.50 s) and SCD maximal coupling (0.10 s)" in said
    assert "soonest" not in said and "clearly" not in said


def test_race_leads_with_passes_the_same_on_any_machine():
    """Passes per image lead; a method is named the fewest only where its range over the
    samples overlaps no other's, over samples enough that the spread alone would seldom set
    them apart (three each: one time in ten; two: one time in three), the rule the times follow
    (no winner inside the noise)."""
    ar = summary_of("ar", [0.5], [1.0], nfe=(576, 576, 576))
    mc = summary_of("scd-mc", [0.1], [0.5], nfe=(130, 134, 138))
    sjd = summary_of("sjd", [0.2], [0.7], nfe=(250, 255, 260))
    said = words(race_view.passes_sentence([ar, sjd, mc]))
    assert said == ("**Passes** (the same for these seeds on any machine): SCD maximal coupling needs the fewest, "
                    "134.0 (130–138) per image on average, clearly fewer than AR (576.0, 4.30x more) and SJD "
                    "(255.0 (250–260), 1.90x more).")
    two = [summary_of("sjd", [0.2], [0.7], nfe=(250, 260)), summary_of("scd-mc", [0.1], [0.5], nfe=(130, 138))]
    said = words(race_view.passes_sentence(two))                            # apart, but two samples each
    assert "clearly" not in said.replace("no method clearly", "") and "in every sample" in said
    assert "one time in 3" in said
    gap = words(race_view.explain_gap(two, None))
    assert "fewer passes** than SJD in every sample" in gap and "too few samples to call it clear" in gap
    gumbel = summary_of("scd-gumbel", [0.1], [0.5], nfe=(131, 142, 153))    # 142.0: its range overlaps MC's
    said = words(race_view.passes_sentence([ar, sjd, mc, gumbel]))
    assert "coupling needs the fewest" not in said and "SCD maximal coupling has the lowest mean, 134.0 (130–138)" in said
    assert "within the samples' spread of SCD Gumbel coupling (142.0 (131–153), 1.06x more): no method " \
           "clearly needs the fewest here; SCD maximal coupling needs clearly fewer than AR" in said
    tiny = [summary_of("sjd", [0.1], [1], nfe=(20, 24)), summary_of("scd-mc", [0.1], [1], nfe=(18, 22))]
    said = words(race_view.passes_sentence(tiny))
    assert "no method clearly needs the fewest" in said and "clearly fewer" not in said
    assert "in every sample" not in said                                    # overlapping: within the spread
    gap = words(race_view.explain_gap(tiny, None))
    assert "about as many passes" in gap and "fewer passes" not in gap
    once = words(race_view.passes_sentence([summary_of(m, [0.1], [1], nfe=(21.2,)) for m in ("sjd", "scd-mc")]))
    assert "one sample each, so no method is said to need fewer" in once and "fewest" not in once


def test_video_maps_are_tiled_like_the_frames():
    grid = (6, 2, 3)                                   # 6 frames -> 2 rows of 4 (2 empty)
    z = charts._tile_maps(np.arange(36), grid)
    assert z.shape == (2 * 3 - 1, 4 * 4 - 1)
    assert z[0, 0] == 0 and z[0, 4] == 6 and z[3, 0] == 24 and np.isnan(z[2]).all()


def test_legend_names_every_state():
    html = pictures.legend_html()
    for s in pictures.LEGEND_ORDER:
        assert pictures.STYLE[s][0] in html
    strip = pictures.legend_strip(320)
    assert strip.shape[1] == 320 and strip.dtype == np.uint8


def test_export_clip_writes_h264_mp4_and_gif(tmp_path):
    import imageio.v3 as iio

    frames = [np.full((32, 32, 3), 40 * t, np.uint8) for t in range(5)]
    mp4, gif = export.export_clip(frames, "clip", fps=4, folder=str(tmp_path))
    video = iio.imread(mp4)
    assert video.shape[0] == 5 and video.shape[1] % 16 == 0 and video.shape[2] % 16 == 0
    import imageio.v2 as imageio

    meta = imageio.get_reader(mp4).get_meta_data()
    assert meta["codec"] == "h264" and meta["pix_fmt"].startswith("yuv420p")   # plays in browsers
    with Image.open(gif) as im:
        assert im.n_frames == 5 and im.size == (256, 256)


def test_export_pads_odd_sizes_to_multiples_of_16(tmp_path):
    import imageio.v3 as iio

    frames = [np.zeros((30, 50, 3), np.uint8)] * 3
    video = iio.imread(export.write_mp4(frames, str(tmp_path / "odd.mp4")))
    assert video.shape[1:3] == (32, 64)


def test_export_decoding_one_frame_per_iteration(toy_grid, sjd_iterations, tmp_path):
    import imageio.v3 as iio

    mp4, gif = export.export_decoding(toy_grid, sjd_iterations, "run", folder=str(tmp_path))
    with Image.open(gif) as im:
        assert im.n_frames == len(sjd_iterations)
    assert iio.imread(mp4).shape[0] == len(sjd_iterations) + 10     # the last held 1 s at 10 fps


def test_pick_frames_keeps_ends():
    idx = export.pick_frames(1000, limit=50)
    assert idx[0] == 0 and idx[-1] == 999 and len(idx) <= 50
    assert export.pick_frames(7) == list(range(7))



def test_a_run_that_shared_its_passes_says_so_and_gives_no_latency_speedup(toy_grid, sjd_iterations):
    stats = run_view.TraceStats(tuple(toy_grid.grid))
    for it in sjd_iterations:
        stats.add(it)
    assert "(passes shared with up to 3 other samples)" in run_view.run_status("SJD", stats, 0.5, "done", 3)
    assert "shared" not in run_view.run_status("SJD", stats, 0.5, "done")
    assert run_view.run_status("SJD", stats, 0.5, "running", 1).endswith(
        "decoding, passes shared with up to 1 other sample…")
    shared = run_view.run_summary("SJD", stats.sample(), 0.5, 0.9, "CPU", shared=3)
    assert "| latency speed-up | not measured: this run's passes shared" in shared
    assert "so it includes their work" in shared
    assert "| latency speed-up | 1.80x" in run_view.run_summary("SJD", stats.sample(), 0.5, 0.9, "CPU")


def test_the_latency_speedup_divides_a_warm_ars_median_never_a_first_run(toy_grid, sjd_iterations):
    """A session's first run on a model may be its worker's, which warms the model up (tiny's AR:
    3.02 s, then 0.97 s and 0.34 s): its time is never the reference, and its own ratio is not
    given; one warm AR run is said as one run each; more give their median."""
    stats = run_view.TraceStats(tuple(toy_grid.grid))
    for it in sjd_iterations:
        stats.add(it)
    history = {"_model": "toy-grid"}
    assert streaming.first_run(history)
    streaming.remember(history, "ar", [1], [1], 3.02, (1, 0), 0, 16)          # cold: not kept
    assert history["ar"]["walls"] == [] and not streaming.first_run(history)
    first = run_view.run_summary("SJD", stats.sample(), 0.5, [], "CPU", first=True)
    assert "| latency speed-up | not measured: your first run on this model here" in first
    assert "run AR (after a first run" in run_view.run_summary("SJD", stats.sample(), 0.5, [], "CPU")
    streaming.remember(history, "ar", [1], [1], 0.97, (1, 0), 0, 16)
    one = run_view.run_summary("SJD", stats.sample(), 0.5, history["ar"]["walls"], "CPU")
    assert "| latency speed-up | 1.94x, one run each (this one 0.50 s, your AR run 0.97 s)" in one
    for wall in (0.34, 0.40):
        streaming.remember(history, "ar", [1], [1], wall, (1, 0), 0, 16)
    many = run_view.run_summary("SJD", stats.sample(), 0.2, history["ar"]["walls"], "CPU")
    assert "| latency speed-up | 2.00x against the median of your last 3 AR runs, 0.40 s (0.34–0.97)" in many
    streaming.remember(history, "ar", [1], [1], None, (1, 0), 0, 16)          # shared its passes: not kept
    assert history["ar"]["walls"] == [0.97, 0.34, 0.40]


def test_a_stopped_run_has_no_step_compression_or_speedup(toy_grid, sjd_iterations):
    stats = run_view.TraceStats(tuple(toy_grid.grid))
    for it in sjd_iterations[:3]:
        stats.add(it)
    text = run_view.run_summary("SJD", stats.sample(), 0.2, 0.9, "CPU", complete=False)
    n = stats.committed[-1]
    assert f"| step compression | not measured: stopped after {n} tokens |" in text
    assert f"| latency speed-up | not measured: stopped after {n} tokens |" in text


def test_the_histogram_numbers_at_most_a_phones_worth_of_ticks_and_a_map_keeps_its_axes(toy_grid, sjd_iterations):
    for width, step in ((8, 1), (17, 1), (33, 2), (65, 5), (1025, 100)):
        fig = figure(charts.histogram_figure({"sjd": [1 / width] * width}, 2))
        assert fig.layout.xaxis.dtick == step and width / step <= charts.MAX_TICKS
        assert tuple(fig.layout.xaxis.range) == (0.5, width + 0.5)
    h, w = toy_grid.grid
    axes = {(tuple(f.layout.xaxis.range), tuple(f.layout.yaxis.range))
            for f in (figure(charts.accept_prob_figure(it, (h, w))) for it in sjd_iterations[1:6])}
    assert axes == {((-0.5, w - 0.5), (h - 0.5, -0.5))}          # the same at every pass, rows down


def test_a_race_stopped_names_the_methods_that_finished_and_counts_its_samples():
    from types import SimpleNamespace

    from demo import race_view

    def run(method, rows, stopped=True):
        return SimpleNamespace(method=method, num_tokens=64, rows=rows, nfe=9, stopped=stopped,
                               last=lambda: [SimpleNamespace(n_after=torch.tensor([12] * rows))])
    assert race_view.race_decoding(run("ar", 1)) == ("**Stopped at NFE 9, 12/64 tokens** (the sample) while "
                                                     "decoding AR; no method had finished.")
    assert race_view.race_decoding(run("scd-mc", 3)) == (
        "**Stopped at NFE 9, 12/64 tokens** (the slowest sample of 3) while decoding SCD maximal coupling; "
        "AR, SJD had finished.")
    assert race_view.race_decoding(run("sjd", 1, False)).endswith("12/64 tokens in the sample")
    assert "one sample" in race_view.race_decoding(run("sjd", 1, False))


def test_the_flicker_chart_sets_this_runs_draft_stability_beside_the_other_methods_last(toy_grid, sjd_iterations):
    stats = run_view.TraceStats(tuple(toy_grid.grid))
    for it in sjd_iterations:
        stats.add(it)
    own = stats.sample().draft_stability
    alone = figure(charts.flicker_figure(stats)).layout.title.text
    assert alone.endswith(f"<sub>draft stability {own:.2f}</sub>")
    history = {"_model": "toy-grid", "scd-mc": {"nfe": [1], "committed": [1], "wall": None, "stability": 0.53},
               "ar": {"nfe": [1], "committed": [1], "wall": None, "stability": None}}
    both = figure(charts.run_figures(stats, history, "sjd")["flicker"]).layout.title.text
    assert f"draft stability: SJD {own:.2f}<br>your last runs: SCD maximal coupling 0.53" in both and "AR" not in both


def test_pointing_at_a_draft_of_the_replayed_pass_says_its_token_its_test_and_its_next_draft():
    model = scd_core.load_model("texture")
    its = list(scd_core.stream(model, ["ocean waves"], method="scd-mc", window=8, seed=0))
    kept = redrawn = 0
    for it in its[1:]:
        words = charts.draft_words(it)
        n_before, accepted = int(it.n_before[0]), int(it.num_accepted[0])
        verified = int(it.verified[0].sum())
        assert sum("accepted (U < min(1, p/q)" in w for w in words.values()) == accepted
        assert sum("rejected" in w for w in words.values()) == verified - accepted
        for i in range(verified):                        # p and q of the record, beside min(1, p/q)
            p, q = float(it.p_draft[0, i]), float(it.q_draft[0, i])
            assert f"p(x) = {p:.3f} at this pass, q(x) = {q:.3f} when drawn" in words[n_before + i]
        if verified > accepted:                          # the residual's token is the one committed
            assert words[n_before + accepted].endswith(f"drew token {int(it.tokens_after[0, n_before + accepted])}")
        for f in run_view.draft_facts(it):                  # each draft the token fed at its position,
            committed = int(it.tokens_after[0, f.position])  # the window held at the grid's end included
            assert committed == f.token if f.test == "accepted" else True
            assert f.residual == committed != f.token if f.test == "rejected" else True
        kept += sum("kept by the coupling" in w for w in words.values())
        redrawn += sum("redrawn, token" in w for w in words.values())
        fig = figure(charts.accept_prob_figure(it, tuple(model.grid)))
        said = [c for r in fig.data[0].customdata for c in r if c]
        assert len(said) == len(words) and "%{customdata}" in fig.data[0].hovertemplate
    assert kept > 0 and redrawn > 0
    sjd = list(scd_core.stream(model, ["ocean waves"], method="sjd", window=8, seed=0))
    same = sum("drawn again, the same token" in w for it in sjd[1:] for w in charts.draft_words(it).values())
    assert 3 * same < kept                               # SJD redraws its drafts afresh: fewer stay


def test_the_coupling_figure_is_the_runs_own_and_teaches_the_hard_case_too():
    """"How it works" draws two positions of a real SCD-MC run: the script that measured them
    measures them again; one where p rose at the draft (kept for sure), one where it fell (kept
    only with probability min(1, p/q) < 1, and redrawn there from the residual, drawn too); the
    figure says each keep probability and overlap, in colours of its own, 3:1 in both themes."""
    import json
    from pathlib import Path

    from bench import coupling_figure

    shipped = json.loads((Path(charts.__file__).parent / charts.COUPLING).read_text(encoding="utf-8"))
    again = coupling_figure.measure()
    for name in ("kept", "redrawn"):
        a, b = again[name], shipped[name]
        assert a["tokens"] == b["tokens"] and a["draft"] == b["draft"] and a["again"] == b["again"]
        assert a["q"] == pytest.approx(b["q"], abs=2e-4) and a["p"] == pytest.approx(b["p"], abs=2e-4)
        assert sum(min(x, y) for x, y in zip(b["q"], b["p"])) <= b["overlap"] + 1e-3     # shown tokens: part of it
        assert b["overlap"] <= sum(min(x, y) for x, y in zip(b["q"], b["p"])) + min(b["rest_q"], b["rest_p"]) + 1e-3
    kept, redrawn = shipped["kept"], shipped["redrawn"]
    assert charts.keep_probability(kept) == 1.0 and kept["again"] == kept["draft"]
    assert 0.2 < charts.keep_probability(redrawn) < 0.8 and redrawn["again"] != redrawn["draft"]
    j = redrawn["tokens"].index(redrawn["again"])                 # the redraw lands where the residual has mass
    assert redrawn["residual"][j] > 0 and redrawn["residual"][redrawn["tokens"].index(redrawn["draft"])] == 0
    fig = figure(charts.coupling_figure(shipped))
    notes = " ".join(a.text for a in fig.layout.annotations)
    for case in (kept, redrawn):
        assert f"min(1, p/q) = {charts.keep_probability(case):.2f}" in notes
        assert f"{case['overlap']:.2f}" in fig.layout.title.text
    assert f"here, token {redrawn['again']}" in notes
    names = {d.name.split(":")[0] for d in fig.data}
    assert names == {"q", "p at the next pass", "overlap min(p, q)", "residual norm(max(0, p − q))"}
    colours = {d.marker.color for d in fig.data}
    assert not colours & set(charts.METHOD_COLOURS.values())       # not the methods' colours
    assert all(charts.contrast(c, bg) >= 3 for c in colours for bg in charts.CHART_BACKGROUNDS.values())
    assert "redrawn from the residual" in charts.alt_of(charts.coupling_figure(shipped))