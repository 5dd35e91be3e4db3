"""The frontier's measurements: the campaign's pieces (`python -m bench train-frontier`), the
nearest-emoji ranking (`nearest-emoji`) and the figure (`frontier-figure`)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bench import frontier_figure, nearest_emoji, train_frontier

pytestmark = pytest.mark.drill

SHIPPED = Path(__file__).resolve().parents[1] / "scd_core" / "assets" / "tiny64"


def test_nearest_hits_counts_the_own_design_first_and_among_the_top():
    nearest = nearest_emoji
    flat = torch.eye(12)                               # 12 renders, each its own point
    keys = ["a", "a"] + [f"k{i}" for i in range(10)]  # "a": one design, two variants (renders 0, 1)
    exact = flat[[0, 5]]                               # samples equal to render 0 ("a") and render 5 ("k3")
    assert nearest.nearest_hits(exact, flat, keys, ["a", "k3"], top=3) == (2, 2)
    # a sample nearest to render 5, a little towards render 1: "a" is second nearest, not first
    between = (0.9 * flat[5] + 0.3 * flat[1]).unsqueeze(0)
    assert nearest.nearest_hits(between, flat, keys, ["a"], top=1) == (0, 0)
    assert nearest.nearest_hits(between, flat, keys, ["a"], top=2) == (0, 1)
    assert nearest.nearest_hits(between, flat, keys, ["k3"], top=2) == (1, 1)


def test_the_shipped_tokenizer_checkpoint_exports_the_shipped_weights(tmp_path):
    frontier = train_frontier
    ckpt = tmp_path / "vq64"
    frontier.shipped_tokenizer_checkpoint(ckpt)
    record = json.loads(ckpt.with_suffix(".json").read_text())
    assert record["config"] == json.loads((SHIPPED / "config.json").read_text())["vq"]
    from scd_core.train.export import export_weights

    export_weights(str(ckpt), tmp_path / "vq.safetensors")
    again, shipped = load_file(str(tmp_path / "vq.safetensors")), load_file(str(SHIPPED / "vq.safetensors"))
    assert again.keys() == shipped.keys()
    assert all(torch.equal(again[k], shipped[k]) for k in shipped)


def test_lead_columns_from_a_benchmark_csv(tmp_path):
    frontier = train_frontier
    path = tmp_path / "bench.csv"
    rows = [("ar", 1, 256, 1.0)]
    # step compression is the mean over runs of 256 / passes, not 256 / the mean passes: the lead
    # is the ratio of the compressions
    for w, sjd, mc in ((16, 100, 80), (32, 90, 50), (64, 90, 45)):
        rows += [("sjd", w, 77, 2.5), ("scd-mc", w, 77, 2.5 * sjd / mc)]     # the passes column: not used
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "window", "tree", "init", "nfe", "step_compression"])
        writer.writerows([(m, w, "1x0", "random", nfe, sc) for m, w, nfe, sc in rows])
    row = frontier.lead_columns(frontier.read_bench(path))
    assert row["lead_L16"] == 1.25 and row["lead_L32"] == 1.8 and row["lead_L64"] == 2.0
    assert row["best_window"] == 64 and row["best_lead"] == 2.0
    assert row["sjd_L64"] == 2.5 and row["scd_mc_L64"] == 5.0


def test_a_prior_given_on_the_command_line():
    frontier = train_frontier
    prior = frontier.parse_prior("small:20:--d-model 32 --layers 2")
    assert (prior.name, prior.steps, prior.args) == ("small", 20, "--d-model 32 --layers 2")
    for bad in ("small", "small:x:--d-model 32", ":5:--layers 2", "small:0:"):
        with pytest.raises(ValueError, match="NAME:STEPS"):
            frontier.parse_prior(bad)
    with pytest.raises(SystemExit, match="--prior"):
        frontier.main(["--prior", "small", "--list"])
    assert len({p.name for p in frontier.PRIORS}) == len(frontier.PRIORS)


def test_frontier_figure_draws_the_points_and_goals(tmp_path, capsys):
    figure = frontier_figure
    results = tmp_path / "results.csv"
    results.write_text("prior,best_lead,top10_train\nlocal,1.9,0.05\nfull,1.65,0.25\n")
    out = tmp_path / "frontier.png"
    figure.main([str(results), "--point", "tiny=1.30,0.20", "--reference", "Lumina-mGPT=1.82",
                 "--rate-goal", "0.2", "--out", str(out)])
    table = capsys.readouterr().out
    assert "| full | 1.65x | 25.0% | yes |" in table
    assert "| local | 1.90x | 5.0% | no |" in table and "| tiny | 1.30x | 20.0% | no |" in table
    from PIL import Image

    img = Image.open(out)
    assert img.size == (820, 460)
    assert len(img.convert("RGB").getcolors(1 << 16)) > 10          # points, lines and labels, not blank
    with pytest.raises(SystemExit):
        figure.main(["--point", "tiny=1.3", "--out", str(out)])      # a point needs LEAD,RATE
    with pytest.raises(SystemExit):
        figure.main([str(results), "--rate", "top1_heldout", "--out", str(out)])   # no such column


def test_snapshots_are_found_by_name_and_ordered_by_step(tmp_path):
    frontier = train_frontier
    campaign = frontier.Campaign(tmp_path, threads=1, max_minutes=0, py="python")
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name, step in (("deep_step800", 800), ("deep_step1200", 1200), ("deep_step400", 400),
                       ("deeper_step500", 500), ("deep", 1500)):
        (folder / f"{name}.json").write_text(json.dumps({"step": step}))
    prior = frontier.Prior("deep", 1500, "--layers 2", "a test")
    assert [p.name for p in campaign.snapshots_of(prior)] == ["deep_step400", "deep_step800", "deep_step1200"]
    assert campaign.step_of(folder / "deep") == 1500 and campaign.step_of(folder / "absent") == 0


def test_the_details_table_has_every_column(tmp_path):
    frontier, figure = train_frontier, frontier_figure
    path = tmp_path / "results.csv"
    row = {c: "0" for c in frontier.RESULT_COLUMNS}
    row.update(prior="deep", step="800", steps="1500", attention="local/local", d_model="128", layers="2",
               local_rows="1", local_cols="2", val_nll="2.5", lead_L16="1.2", lead_L32="1.5", lead_L64="1.75",
               top1_train="0.05", top1_heldout="0.01", top10_train="0.25", top10_heldout="0.075",
               command="-m scd_core.train.prior --layers 2")
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=frontier.RESULT_COLUMNS)
        writer.writeheader()
        writer.writerow(row)
    table = figure.details_table([path]).splitlines()
    assert len(table) == 3
    assert table[2] == ("| `deep` | local/local (1 row, 2 col) | 128 x 2 | 800 of 1500 | 2.500 | 1.20x / 1.50x / 1.75x | "
                        "5.0% / 1.0% | 25.0% / 7.5% | `python -m scd_core.train.prior --layers 2` |")
