"""`tiny` and `tiny-64` side by side on the page (`demo.frontier_view`): their leads read from the
benchmark tables as the docs and the frontier campaign define them, the shipped samples pictures
naming what they show, and drawn again by their script (slow)."""
from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import scd_core

from demo import frontier_view as fv
from script_util import load_script

ROOT = Path(__file__).resolve().parents[1]
HEADER = "method,window,tree,init,nfe,step_compression\n"


def table(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "bench.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_the_lead_at_the_best_window_is_the_frontier_campaigns_for_each_prior_it_measured():
    """Every prior of docs/bench/frontier.csv: its benchmark table (docs/bench/frontier/) gives
    the best window and lead the campaign recorded."""
    with (ROOT / "docs" / "bench" / "frontier.csv").open(newline="", encoding="utf-8") as f:
        priors = list(csv.DictReader(f))
    assert priors
    for row in priors:
        lead = fv.best_lead(ROOT / "docs" / "bench" / "frontier" / f"{row['prior']}.csv")
        assert lead.window == int(row["best_window"]), row["prior"]
        assert lead.lead == pytest.approx(float(row["best_lead"]), abs=1e-3), row["prior"]


def test_the_leads_shown_are_the_embedded_models_tables():
    """The page's figure for each model is the one docs/embedded-models.md gives in its table of
    held-out prompts, at the window where it is largest."""
    doc = (ROOT / "docs" / "embedded-models.md").read_text(encoding="utf-8")
    for name in fv.MODELS:
        lead = fv.best_lead(fv.BENCH[name])
        row = rf"\| {lead.window} \| {lead.sjd:.2f}x \| {lead.scd_mc:.2f}x \| [\d.]+x \| (\*\*)?{lead.lead:.2f}x(\*\*)? \|"
        assert re.search(row, doc), (name, row)
        assert f"**{lead.lead:.2f}x**" in fv.lead_words(name, lead) and f"L {lead.window}" in fv.lead_words(name, lead)
    leads = {m: fv.best_lead(fv.BENCH[m]) for m in fv.MODELS}
    said = fv.sentence(leads)
    assert said.startswith("No model trained here so far does both") and said.count(". ") == 0
    assert f"{leads['tiny'].lead:.2f}x" in said and f"{leads['tiny-64'].lead:.2f}x" in said
    assert leads["tiny-64"].lead > 1.6 > leads["tiny"].lead       # the sentence's "leads" and "only"


def test_the_best_window_is_where_the_ratio_is_largest_and_a_table_without_one_is_refused(tmp_path):
    """Not the window with the most tokens per pass: at 64 both methods compress more, but SCD-MC's
    lead is larger at 32. Other draft inits and trees are not read; nothing to compare is refused."""
    path = table(tmp_path, ["ar,1,-,-,64,1.0", "sjd,32,1x0,random,30,2.0", "scd-mc,32,1x0,random,20,3.0",
                            "sjd,64,1x0,random,20,3.0", "scd-mc,64,1x0,random,15,4.0",
                            "scd-mc,64,1x0,repeat,5,9.0", "scd-mc,64,2x2,random,5,9.0"])
    lead = fv.best_lead(path)
    assert (lead.window, lead.lead, lead.sjd, lead.scd_mc) == (32, 1.5, 2.0, 3.0)
    with pytest.raises(ValueError, match="path: bench.csv"):
        fv.best_lead(table(tmp_path, ["sjd,32,1x0,repeat,30,2.0", "scd-mc,32,1x0,repeat,20,3.0"]))


def test_the_shipped_samples_name_their_model_and_show_the_same_prompts_and_seeds():
    script = load_script("frontier_samples")
    shown = [fv.read_samples(m) for m in fv.MODELS]
    for s in shown:
        assert (s.prompts, s.seeds) == (script.PROMPTS, script.SEEDS) and s.command == script.COMMAND
        height, width, _ = s.picture.shape
        assert height == len(s.prompts) * (script.TILE + script.GAP) + script.GAP
        assert width == script.LABEL_W + len(s.seeds) * (script.TILE + script.GAP)
        assert fv.title(s).startswith(f"{s.model} (") and all(p in fv.title(s) for p in s.prompts)
    assert not np.array_equal(shown[0].picture, shown[1].picture)
    with pytest.raises(ValueError, match="name: the samples file of 'tiny-64' holds 'tiny'"):
        fv.read_samples("tiny-64", fv.samples_file("tiny"))


def test_only_the_two_models_link_to_the_view():
    assert fv.model_link("texture") == "" and fv.model_link("janus-pro-1b") == ""
    assert fv.model_link("tiny").endswith(f"beside tiny-64](#{fv.ANCHOR})")
    assert fv.model_link("tiny-64").endswith(f"beside tiny](#{fv.ANCHOR})")


def test_the_shipped_pictures_are_their_own_tokens_decoded():
    """Each picture is its file's tokens as the script draws them: the decoders' arithmetic may
    round a pixel a level apart on another machine, nothing more."""
    script = load_script("frontier_samples")
    for name in fv.MODELS:
        shipped = fv.read_samples(name)
        assert shipped.tokens.shape[0] == len(shipped.prompts) * len(shipped.seeds)
        sheet, _ = script.compose(name, scd_core.load_model(name), torch.from_numpy(shipped.tokens))
        diff = np.abs(np.asarray(sheet).astype(int) - shipped.picture.astype(int))
        assert diff.max() <= 8 and diff.mean() < 0.05, (name, diff.max(), diff.mean())


@pytest.mark.slow
def test_the_samples_script_draws_the_shipped_tokens_again(tmp_path):
    """The tokens are the shipped models' own samples: their script draws them again. A sampled
    token follows the CPU's float rounding, so a sample can part from the shipped one on another
    machine at a draw that falls within rounding of a boundary (one of the 15 samples of tiny-64
    does between two Xeons); a change of the models or the engine parts them all."""
    script = load_script("frontier_samples")
    script.main(["--out", str(tmp_path)])
    for name in fv.MODELS:
        again, shipped = fv.read_samples(name, tmp_path / f"{name}.png"), fv.read_samples(name)
        assert (again.prompts, again.seeds) == (shipped.prompts, shipped.seeds)
        same = (again.tokens == shipped.tokens).all(1)
        assert same.sum() >= 2 * len(same) / 3, (name, f"{int(same.sum())} of {len(same)} samples drawn again")


def test_the_frontier_is_drawn_as_a_chart_of_the_page_its_points_named_in_words():
    """The figure docs/embedded-models.md draws, from the same rows (its left-out ones left out),
    each point named by what the prior is, not by its training run's name; its marks 3:1 against
    both themes' backgrounds; its words say every point and that none meets both goals."""
    from demo import charts
    from plots_util import figure

    points = fv.frontier_points()
    with fv.FRONTIER.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["prior"] not in fv.LEFT_OUT]
    assert len(points) == len(rows) + 2 and all("_" not in name for name, _, _ in points)
    for name, (shown, rate, lead) in zip(fv.MODELS, points):
        assert shown.startswith(name) and lead == pytest.approx(fv.best_lead(fv.BENCH[name]).lead)
    for row, (name, rate, lead) in zip(rows, points[2:]):
        assert row["prior"] not in name and (rate, lead) == (float(row["top10_train"]), float(row["best_lead"]))
    doc = (ROOT / "docs" / "embedded-models.md").read_text(encoding="utf-8")
    for prior in fv.LEFT_OUT:
        assert f"--leave-out {prior}" in doc
    assert fv.prior_name({"layers": "6", "attention": "/".join(["local"] * 6), "step": "374", "steps": "1500"}) \
        == "6 local layers, at step 374 of 1,500"
    plot = fv.figure()
    fig = figure(plot)
    marks = [d.marker.color for d in fig.data if d.mode == "markers"] + [d.line.color for d in fig.data if d.mode == "lines"]
    assert all(charts.contrast(c, bg) >= 3 for c in marks for bg in charts.CHART_BACKGROUNDS.values())
    names = [d.name for d in fig.data]
    assert all(any(name in n for n in names) for name, _, _ in points)
    alt = charts.alt_of(plot)
    assert all(name in alt for name, _, _ in points) and alt.endswith("none meets both.")


def test_tinys_three_leads_are_told_in_one_sentence():
    """The race's 1.08x, the benchmark's 1.17x and the best window's 1.30x, each from its table."""
    from demo import race_view

    said = race_view.leads_sentence()
    race = race_view.shipped_passes("tiny-race")
    bench = race_view.shipped_passes("tiny")
    best = fv.best_lead(fv.BENCH["tiny"])
    for ratio in (race["sjd"] / race["scd-mc"], bench["sjd"] / bench["scd-mc"], best.lead):
        assert f"**{ratio:.2f}x**" in said
    assert said.count(". ") == 0 and f"L {best.window}" in said
    assert said in race_view.ratios_markdown()
