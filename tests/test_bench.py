"""The benchmark command: its table, its CSV, and its errors (toy-grid, a few passes)."""
from __future__ import annotations

import csv

import pytest

import scd_core
from scd_core import bench, bench_rows

SMALL = ["--model", "toy-grid", "--model-arg", "grid=4,6", "--windows", "4,8", "--seeds", "2",
         "--top-k", "20", "--threads", "1"]


def test_table_and_csv_have_a_row_per_method_window_and_init(tmp_path, capsys):
    out = tmp_path / "b.csv"
    assert bench.main(SMALL + ["--inits", "random,repeat-above", "--max-prompts", "2", "--csv", str(out)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| method | L | tree | init | NFE |") and "engine/wall" in table
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
            for p in bench_rows.DEFAULT_PROMPTS[:2] for s in range(2)]
    mc = [r for r in rows if r.method == "scd-mc"]
    assert len(mc) == 1 and mc[0].nfe == pytest.approx(sum(nfes) / len(nfes))
    assert mc[0].step_compression == pytest.approx(sum(24 / n for n in nfes) / len(nfes))


def test_prompts_file_is_read_one_per_line(tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("red apple\n\n  blue circle  \n")
    args = bench.parse_args(SMALL + ["--prompts", str(prompts)])
    assert bench_rows.load_prompts(scd_core.load_model("toy-grid"), args) == ["red apple", "blue circle"]


@pytest.mark.parametrize("bad, says", [
    (["--methods", "sjd", "--windows", "1"], "window"),
    (["--inits", "sideways"], "init"),
    (["--prompts", "/nonexistent/prompts.txt"], "--prompts"),
    (["--model-arg", "grid"], "--model-arg"),
])
def test_bad_arguments_exit_2_with_a_message(bad, says, capsys):
    assert bench.main(SMALL + bad) == 2
    assert says in capsys.readouterr().err


# ---------------------------------------------------------------- prompts: PartiPrompts and files

def test_parti_prompts_are_shipped_with_their_licence():
    from scd_core import prompts as P
    records = P.parti_prompts()
    assert len(records) == 1632 and len(P.categories()) == 12
    assert records[0] == P.Prompt("bond", "Abstract", "Basic")
    assert any(r.text.startswith('"G I G G L E" painted') for r in records)      # quotes kept as written
    licence = P.PARTI_PATH.with_name("PartiPrompts.LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0" in licence
    assert "google-research/parti" in P.PARTI_PATH.with_name("README.md").read_text()


def test_parti_samples_are_fixed_and_categories_filter():
    from scd_core.prompts import load_prompt_records, load_prompts
    eight = load_prompts("parti:8")
    assert load_prompts("parti:8") == eight and len(set(eight)) == 8
    assert load_prompts("parti:3") == ["a sword slicing through a loaf of bread",
                                       "The trophy doesn't fit into the brown suitcase because it's too small",
                                       "Two cups of coffee, one with latte art of a map of United States. "
                                       "The other has latte art of a map of Africa."]
    assert len(load_prompts("parti")) == 1632 and set(eight) <= set(load_prompts("parti"))
    food = load_prompt_records("parti", ["food & beverage"])
    assert len(food) == 74 and {r.category for r in food} == {"Food & Beverage"}
    both = load_prompt_records("parti:5", ["Animals", "Vehicles"])
    assert len(both) == 5 and {r.category for r in both} <= {"Animals", "Vehicles"}
    assert load_prompts(None, default=["a", "b"]) == ["a", "b"]


@pytest.mark.parametrize("spec, categories, says", [
    ("parti:0", None, "--prompts"), ("parti:x", None, "--prompts"), ("parti:2000", None, "--prompts"),
    ("parti:80", ["Abstract"], "--prompts"), ("parti", ["Dinosaurs"], "--category"),
    (None, ["Animals"], "--category"),
])
def test_bad_prompt_specs_name_the_option(spec, categories, says):
    from scd_core.prompts import load_prompts
    with pytest.raises(ValueError, match=says):
        load_prompts(spec, categories)


def test_bench_on_parti_prompts_writes_a_row_per_prompt(tmp_path, capsys):
    out = tmp_path / "b.csv"
    assert bench.main(SMALL + ["--prompts", "parti:3", "--methods", "ar,sjd", "--windows", "4", "--csv", str(out)]) == 0
    assert "per prompt" in capsys.readouterr().err
    table = list(csv.DictReader(out.open()))
    rows = list(csv.DictReader((tmp_path / "b-prompts.csv").open(encoding="utf-8")))
    assert list(rows[0]) == bench_rows.PROMPT_COLUMNS
    assert [(r["method"], r["window"]) for r in rows] == [("ar", "1")] * 3 + [("sjd", "4")] * 3
    assert [r["prompt"] for r in rows[:3]] == [r["prompt"] for r in rows[3:]]
    assert rows[0]["category"] == "Artifacts" and all(r["seeds"] == "2" for r in rows)
    for method in ("ar", "sjd"):                              # the table's row is the mean of its prompts
        mine = [float(r["nfe"]) for r in rows if r["method"] == method]
        row = next(r for r in table if r["method"] == method)
        assert float(row["nfe"]) == pytest.approx(sum(mine) / len(mine))


def test_bench_runs_the_embedded_model_on_eight_parti_prompts(tmp_path):
    out = tmp_path / "tiny.csv"
    assert bench.main(["--model", "tiny", "--prompts", "parti:8", "--methods", "sjd", "--seeds", "1",
                       "--threads", "1", "--csv", str(out), "--prompts-csv", str(tmp_path / "p.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "p.csv").open(encoding="utf-8")))
    assert len(rows) == 8 and len({r["prompt"] for r in rows}) == 8 and {r["method"] for r in rows} == {"sjd"}
    assert all(1 <= float(r["nfe"]) <= 64 for r in rows)
