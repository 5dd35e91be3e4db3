"""scd_core.race: K samples per method, each method decoded alone, its per-sample metrics the
trace's, their spread, the lockstep replay, Stop, and the probe of why coupling helps."""
from __future__ import annotations

import pytest
import torch

import scd_core
from demo import race_view
from scd_core import race
from scd_core.trace import Run


@pytest.fixture(scope="module")
def texture():
    return scd_core.load_model("texture")


@pytest.fixture(scope="module")
def toy_grid():
    return scd_core.load_model("toy-grid")


def decoded(model, settings, method, k):
    return list(race.decode(model, settings, method, k))[-1]


def test_a_single_sample_has_the_runs_own_metrics(toy_grid):
    settings = race.Race("fox", scd_core.Settings(window=8), seed=3)
    run = decoded(toy_grid, settings, "sjd", 1)
    whole = Run.from_iterations(run.records)
    sample = run.samples()[0]
    assert sample.nfe == whole.nfe == run.nfe and sample.committed == 256
    assert sample.acceptance_rate == pytest.approx(whole.acceptance_rate)
    assert sample.mean_accepted_length == pytest.approx(whole.mean_accepted_length)
    assert sample.draft_stability == pytest.approx(whole.draft_stability)
    assert sample.step_compression == pytest.approx(whole.step_compression)


def test_each_row_of_a_batch_counts_its_own_passes(toy_grid):
    run = decoded(toy_grid, race.Race("fox", scd_core.Settings(window=8)), "scd-mc", 4)
    nfe = [s.nfe for s in run.samples()]
    assert nfe == Run.from_iterations(run.records).row_nfe.tolist()
    assert max(nfe) == run.nfe and run.done
    curves = run.committed_curves()
    assert curves.shape == (4, run.nfe) and (curves[:, -1] == 256).all()
    for b, n in enumerate(nfe):                      # a row stays at N once it is complete
        assert curves[b, n - 1] == 256 and (n == 1 or curves[b, n - 2] < 256)


def test_histogram_is_a_share_of_passes_that_sums_to_one(toy_grid):
    run = decoded(toy_grid, race.Race("fox", scd_core.Settings(window=8)), "sjd", 3)
    hist = run.histogram()
    assert sum(hist) == pytest.approx(1.0) and len(hist) <= 8
    passes = sum(s.nfe - 1 for s in run.samples())     # prefill excluded
    shares = torch.tensor(hist) * passes
    tokens = sum((j + 1) * float(c) for j, c in enumerate(shares))
    assert tokens == pytest.approx(3 * 255)              # every token after the prefill's


def test_spread_gives_mean_range_and_a_95_percent_interval():
    s = race.Spread.of([20, 22, 24])
    assert (s.mean, s.low, s.high, s.count) == (22, 20, 24, 3)
    assert s.half_width == pytest.approx(4.30 * 2 / 3 ** 0.5)
    assert race.Spread.of([5]).half_width == 0


def test_greedy_race_rows_all_equal_ar(toy_grid):
    settings = race.Race("fox", scd_core.Settings(window=8, temperature=0.0))
    runs = {m: decoded(toy_grid, settings, m, 2) for m in race.METHOD_ORDER}
    table = race.summarise(runs, greedy=True)
    assert [s.method for s in table] == list(race.METHOD_ORDER)
    assert all(s.same_as_ar for s in table)
    assert table[0].latency_speedup == pytest.approx(1.0)
    assert all(s.samples == 2 for s in table)


def test_sampling_race_gives_spread_and_no_losslessness_claim(texture):
    settings = race.Race("ocean waves")
    runs = {m: decoded(texture, settings, m, 3) for m in ("ar", "sjd", "scd-mc")}
    table = race.summarise(runs, greedy=False)
    assert all(s.same_as_ar is None for s in table)
    sjd, mc = table[1], table[2]
    assert sjd.nfe.low <= sjd.nfe.mean <= sjd.nfe.high and sjd.nfe.count == 3
    assert mc.nfe.mean < sjd.nfe.mean


def test_stop_ends_a_method_after_the_current_pass(toy_grid):
    calls = []

    def stop():
        calls.append(1)
        return len(calls) >= 3

    runs = list(race.decode(toy_grid, race.Race("fox", scd_core.Settings(window=8)), "ar", 2, stop))
    assert runs[-1].stopped and runs[-1].nfe == 3 and not runs[-1].done
    assert race.summarise({"ar": runs[-1]}, greedy=False)[0].latency_speedup is None


def test_replay_reads_each_method_at_an_nfe(toy_grid):
    run = decoded(toy_grid, race.Race("fox", scd_core.Settings(window=8)), "sjd", 2)
    assert run.at(1).index == 0 and run.at(3).index == 2
    assert run.at(10_000) is run.records[-1]
    assert race.lockstep({"sjd": run}) == run.nfe


def test_per_sample_figures_are_the_benchmarks_for_the_same_settings(toy_grid):
    """Row b of a race batch draws from seed b, as the bench's run with seed b alone: the race's
    per-sample figures are the bench's per-run figures, value for value."""
    from scd_core import bench

    settings = race.Race("fox", scd_core.Settings(window=8), seed=0)
    run = decoded(toy_grid, settings, "scd-mc", 3)
    runs = bench.run_case(toy_grid, ["fox"], 3, 1, scd_core.Settings("scd-mc", 8))
    for sample, metrics in zip(run.samples(), runs):
        assert (sample.nfe, sample.step_compression) == (metrics.nfe, metrics.step_compression)
        assert (sample.acceptance_rate, sample.mean_accepted_length, sample.draft_stability) == \
            pytest.approx((metrics.acceptance_rate, metrics.mean_accepted_length, metrics.draft_stability))
    command = race_view.bench_command("toy-grid", settings, 3)
    assert "--seeds 3" in command and "--windows 8" in command and "--model toy-grid" in command


def test_a_races_first_sample_is_a_single_generate_with_its_seed(texture):
    run = decoded(texture, race.Race("sunset rings", seed=5), "sjd", 3)
    alone = scd_core.generate(texture, ["sunset rings"], method="sjd", window=16, seed=5)
    assert torch.equal(run.tokens()[0], alone.tokens[0]) and run.samples()[0].nfe == alone.nfe


def test_probe_sees_that_texture_p_depends_on_neighbours_only(texture):
    probe = race.context_sensitivity(texture, race.Race("ocean waves"))
    assert probe.tv_next > 0.2 and probe.tv_further == 0.0 and 0 < probe.collision < 1


def test_probe_sees_the_transformer_move_p_further_along():
    tiny = scd_core.load_model("tiny")
    probe = race.context_sensitivity(tiny, race.Race("red apple", scd_core.Settings(top_k=100, cfg_scale=3.0)))
    assert probe.tv_further > 0.02


def test_explanation_quotes_only_measured_figures(texture):
    settings = race.Race("ocean waves")
    runs = {m: decoded(texture, settings, m, 2) for m in ("sjd", "scd-mc")}
    table = race.summarise(runs, greedy=False)
    probe = race.context_sensitivity(texture, settings)
    text = race_view.explain_gap(table, probe)
    ratio = table[0].nfe.mean / table[1].nfe.mean
    assert f"{ratio:.2f}x fewer passes" in text and f"{probe.tv_next:.2f}" in text
    assert f"{table[1].draft_stability.mean:.0%}" in text
    assert race_view.explain_gap(table[:1], probe) == ""


def test_batch_rows_see_the_same_prompt(texture):
    run = decoded(texture, race.Race("lava rings", scd_core.Settings(window=16)), "scd-mc", 2)
    tokens = run.tokens()
    assert tokens.shape == (2, 576) and not torch.equal(tokens[0], tokens[1])
    palette = tokens // texture.shades
    assert (palette == palette[0, 0]).all()                # one palette: the prompt's


def test_the_gap_is_probed_on_the_races_ar_sample_and_only_for_embedded_models(texture):
    settings = race.Race("ocean waves")
    runs = {"ar": decoded(texture, settings, "ar", 1)}
    assert race.gap_probe(texture, "texture", settings, runs) == \
        race.context_sensitivity(texture, settings, sample=runs["ar"].tokens()[0])
    assert race.gap_probe(None, "janus-pro-1b", settings, {}) is None      # nothing decoded


def test_each_yielded_run_is_a_snapshot_that_later_passes_do_not_change(toy_grid):
    """`race.decode` yields a new, frozen MethodRun after every pass: a consumer that keeps
    one still sees exactly the passes it had."""
    runs = list(race.decode(toy_grid, race.Race("fox", scd_core.Settings(window=8)), "sjd", 2))
    assert [r.nfe for r in runs] == list(range(1, len(runs) + 1))
    early = runs[2]
    assert early.records[-1] is runs[-1].records[2] and len(early.records[:]) == 3
    assert not early.done and runs[-1].done
    with pytest.raises(AttributeError):
        early.stopped = True
