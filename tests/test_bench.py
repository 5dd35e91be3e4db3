"""The benchmark command: its table, its CSV, and its errors (toy-grid, a few passes)."""
from __future__ import annotations

import csv

import pytest

import scd_core
from scd_core import bench

SMALL = ["--model", "toy-grid", "--model-arg", "grid=4,6", "--windows", "4,8", "--seeds", "2",
         "--top-k", "20", "--threads", "1"]


def test_table_and_csv_have_a_row_per_method_window_and_init(tmp_path, capsys):
    out = tmp_path / "b.csv"
    assert bench.main(SMALL + ["--inits", "random,repeat-above", "--max-prompts", "2", "--csv", str(out)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| method | L | init | NFE |") and "engine/wall" in table
    rows = list(csv.DictReader(out.open()))
    assert [(r["method"], r["window"], r["init"]) for r in rows] == [("ar", "1", "-")] + [
        (m, w, i) for m in ("sjd", "scd-mc", "scd-gumbel") for w in ("4", "8") for i in ("random", "repeat-above")]
    for r in rows:
        assert 0 < float(r["engine_wall_share"]) < 1 and float(r["wall_s"]) > 0
        assert float(r["nfe"]) <= 24 + 1e-9 and float(r["step_compression"]) >= 1 - 1e-9
    ar = rows[0]
    assert float(ar["nfe"]) == 24 and float(ar["step_compression"]) == 1 and float(ar["latency_speedup"]) == 1


def test_rows_average_what_generate_reports(tmp_path):
    """NFE and step compression are deterministic per seed: the table's mean is the runs' mean."""
    rows = bench.benchmark(bench.parse_args(SMALL + ["--methods", "scd-mc", "--windows", "8", "--max-prompts", "2"]))
    model = scd_core.load_model("toy-grid", grid=(4, 6))
    nfes = [scd_core.generate(model, [p], method="scd-mc", window=8, seed=s, top_k=20).nfe
            for p in bench.DEFAULT_PROMPTS[:2] for s in range(2)]
    mc = [r for r in rows if r.method == "scd-mc"]
    assert len(mc) == 1 and mc[0].nfe == pytest.approx(sum(nfes) / len(nfes))
    assert mc[0].step_compression == pytest.approx(sum(24 / n for n in nfes) / len(nfes))


def test_prompts_file_is_read_one_per_line(tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("red apple\n\n  blue circle  \n")
    args = bench.parse_args(SMALL + ["--prompts", str(prompts)])
    assert bench.load_prompts(scd_core.load_model("toy-grid"), args) == ["red apple", "blue circle"]


@pytest.mark.parametrize("bad, says", [
    (["--methods", "sjd", "--windows", "1"], "window"),
    (["--inits", "sideways"], "init"),
    (["--prompts", "/nonexistent/prompts.txt"], "--prompts"),
    (["--model-arg", "grid"], "--model-arg"),
])
def test_bad_arguments_exit_2_with_a_message(bad, says, capsys):
    assert bench.main(SMALL + bad) == 2
    assert says in capsys.readouterr().err
