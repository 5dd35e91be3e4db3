"""A Generate run as the page shows it, view by view: what each update of the run's stream
sets, by the view's name in VIEWS (the page maps each name to its component). The figures are
`run_view`'s, the charts `charts`', the pictures `pictures`'; nothing here decodes.

A run's stream: `GenerateView.cleared` (the first update clears the last run's views),
`shown` for each pass that arrives (a picture, the status and the live charts when due),
`ending` (the final picture and status, shown first), then `ended` (the final charts, the
metrics, the strip, the replay and, for a video, the clip)."""
from __future__ import annotations

import math

import gradio as gr

from demo import charts, export, pictures, run_view, servers, streaming, texts, tree_view
from demo.checks import PageRun
from demo.labels import METHOD_LABELS
from demo.models import is_video
from scd_core.trace import Iteration

VIEWS = ("picture", "status", "tree", *charts.RUN_CHARTS, "film", "film_title", "summary", "history",
         "last_run", "replay_slider", "clip_row", "clip_video", "clip_files", "replay_image", "replay_text",
         "replay_probs", "export_files", "export_video")
# The replay and export belong to the last run. The slider is left as it is (a value here, then
# the final update's Slider, left a copy of the Slider in the visitor's session at every run);
# with no last run it replays nothing.
REPLAY_CLEARED = {"last_run": None, "replay_image": None, "replay_text": run_view.REPLAY_WAITING,
                  "replay_probs": None, "export_files": None, "export_video": None}


def waiting(grid: tuple[int, ...] | None, tokens: int, pictured: bool = True) -> dict:
    """The views before a run has shown anything: AR's line on the tokens chart, each other
    chart saying when it comes, the picture's grid still grey (`pictured`; none without a
    `grid`), no strip yet."""
    return charts.waiting_figures(tokens) | \
        ({"picture": pictures.blank_picture(grid) if grid else None} if pictured else {}) | \
        {"film": None, "film_title": run_view.film_title(None), "summary": run_view.SUMMARY_WAITING,
         "tree": "", "clip_row": gr.Row(visible=False), "clip_video": None, "clip_files": None}


def replay(model, run: dict, i: int, picture=None, opened: bool = False) -> dict:
    """Pass `i` of a run as the replay shows it: its picture (`picture` when already drawn),
    caption (`opened`: the pass the replay opens on), min(1, p/q) map and the map's table."""
    its = run["iterations"]
    picture = pictures.render_iteration(model, its[i], decode=run.get("decode")) if picture is None else picture
    grid = tuple(model.grid)
    return {"replay_image": picture,
            "replay_text": run_view.replay_caption(its, i, opened) + run_view.draft_table(its[i], grid, run["method"]),
            "replay_probs": charts.accept_prob_figure(its[i], grid)}


class GenerateView:
    """What one Generate run shows. `history`: this session's earlier runs (another model's
    are dropped); `device`: where it decodes, in words."""

    def __init__(self, model, page: PageRun, history: dict | None, device: str) -> None:
        self.model, self.page, self.device = model, page, device
        self.method, self.label = page.settings.method, METHOD_LABELS[page.settings.method]
        self.stats = run_view.TraceStats(tuple(model.grid))
        self.history = streaming.history_of(history, page.name)
        self.pace_said = {running: run_view.pace_note(page.pace, servers.shown_pace(page.pace), running)
                          for running in (True, False)}      # as it runs, after
        self.picture, self.first_shown, self.started = None, None, False
        self.clear = waiting(None, math.prod(model.grid), pictured=False) | REPLAY_CLEARED

    def cleared(self, update: dict) -> dict:
        """`update` with the last run's views cleared, in the run's first update only. The
        charts are cleared there too, even when the next update draws them all: a chart that a
        stream's first update leaves out and a later one sets stays in the visitor's session
        as a copy of the component, one more at every run."""
        clear, self.clear = self.clear, {}
        return clear | update

    def status(self, state: str, shared: int, **said) -> str:
        """The status line, with what the live region says of it (the first one shown: the start)."""
        first, self.started = state == "running" and not self.started, True
        kind = "end" if state != "running" else "start" if first else "step"
        return run_view.run_status(self.label, self.stats, self.stats.records[-1].wall_time, state, shared,
                                   pace_raised=self.pace_said[state == "running"], model=self.page.name, **said) \
            + texts.said(run_view.spoken(self.label, self.page.name, self.stats, state, first), kind)

    def shown(self, it: Iteration | None, picture_due: bool, charts_due: bool, row) -> dict:
        """A pass as it arrives (None: slow motion waits for passes that other runs hold up):
        its picture, tree and status when one is due, the live charts with the first picture
        and then when due; {} when nothing is shown. `row`: the run's row on the decode client
        (`demo.backend.Row`: its decoder, and how many others shared its passes)."""
        if it is None:
            return self.cleared({"status": texts.WAITING})
        self.stats.add(it)
        if not picture_due or self.stats.done:
            return {}
        shared = row.shared(len(self.stats.records))
        self.picture = pictures.render_iteration(self.model, it, decode=row.decode())
        self.first_shown = self.first_shown or servers.now()
        live = charts.run_figures(self.stats, self.history, self.method, live=True) if charts_due or self.clear else {}
        return self.cleared({"picture": self.picture, "tree": tree_view.tree_html(it, self.page.settings.tree),
                             "status": self.status("running", shared)} | live)

    def ending(self, decode, shared: int) -> dict:
        """The ended run's picture (a stop keeps the one shown), tree and status: shown first,
        before the charts that take the browser longer to draw."""
        stats, settings = self.stats, self.page.settings
        it, end = stats.records[-1], "done" if stats.done else "stopped"
        self.last_picture = pictures.render_iteration(self.model, it, decode=decode)
        shown_for = servers.now() - self.first_shown if self.page.pace and self.first_shown is not None else None
        sibling = tree_view.last_sibling(stats.records)       # the tree shown at the end
        self.chain = streaming.chain_nfe(self.history, self.method, self.page.race.seed, settings.window)
        return self.cleared({                              # the final charts come with `ended`
            "picture": self.picture if end == "stopped" and self.picture is not None else self.last_picture,
            "tree": tree_view.tree_html(sibling or it, settings.tree, last=sibling is not None),
            "status": self.status(end, shared, shown_for=shown_for, tree=settings.tree, chain_nfe=self.chain)})

    def ended(self, decode, shared: int) -> dict:
        """The ended run's charts, metrics, strip and replay (on a pass that rejected a draft,
        `run_view.telling_pass`, drawn), kept in the session's history when it finished; a video's
        clip as MP4 and GIF."""
        stats, settings, name, it = self.stats, self.page.settings, self.page.name, self.stats.records[-1]
        first = streaming.first_run(self.history)
        if stats.done:
            streaming.remember(self.history, self.method, stats.nfe, stats.committed,
                               None if shared else it.wall_time, settings.tree, self.page.race.seed,
                               settings.window, None if self.method == "ar" else stats.sample().draft_stability)
        run = {"model": name, "method": self.method, "iterations": stats.records, "decode": decode}
        last, opened = len(stats.records) - 1, run_view.telling_pass(stats.records)
        out = charts.run_figures(stats, self.history, self.method) | {
            "summary": texts.prompt_note(self.model, self.page.race.prompt) + run_view.run_summary(
                self.label, stats.sample(), it.wall_time, self.history.get("ar", {}).get("walls", []), self.device,
                shared, stats.done, settings.tree, stats.counts, settings.window, self.chain, first=first),
            "film": pictures.filmstrip_image(stats.film), "film_title": run_view.film_title(self.method),
            "history": self.history, "last_run": run,
            "replay_slider": gr.Slider(minimum=0, maximum=max(1, last), value=opened, step=1,   # 0 < max
                                       interactive=True)} | replay(
            self.model, run, opened, self.last_picture if opened == last else None, opened=True)
        if is_video(name):
            mp4, gif = export.export_run_clip(self.model, it, f"{name}-{self.method}", decode)
            out |= {"clip_row": gr.Row(visible=True), "clip_video": mp4, "clip_files": [mp4, gif]}
        return out
