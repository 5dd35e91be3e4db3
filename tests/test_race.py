"""scd_core.race: K samples per method, in this process or on a decode client, its per-sample
metrics the trace's and the bench's, their spread, one image's latency and the batch's
throughput, the lockstep replay, Stop, and the probe of why coupling helps."""
from __future__ import annotations

import pytest
import torch

import scd_core
from demo import race_view
from scd_core import race
from scd_core.local import LocalClient
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
    batch = scd_core.generate(toy_grid, ["fox"] * 4, seed=0, method="scd-mc", window=8)
    assert nfe == batch.row_nfe.tolist()
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


def test_a_lead_is_clear_only_over_measurements_enough_that_noise_seldom_gives_it():
    """Two sets of n measurements of one distribution fall apart (every one of one below every one
    of the other) 2 / C(2n, n) of the time: two rounds each one time in three, three one in ten;
    only from there is a lead called clear."""
    assert race.chance_apart(2, 2) == pytest.approx(1 / 3) and race.chance_apart(3, 3) == pytest.approx(0.1)
    g = torch.Generator().manual_seed(7)
    apart = [race.apart((float(a.min()), float(a.max())), (float(b.min()), float(b.max())))
             for a, b in (torch.rand(2, 2, generator=g) for _ in range(3000))]
    assert abs(sum(apart) / len(apart) - 1 / 3) < 0.03                        # as counted
    assert not race.clearly_apart((1, 2), (3, 4), 2, 2) and race.clearly_apart((1, 2), (3, 4), 3, 3)
    assert not race.clearly_apart((1, 3), (2, 4), 8, 8)                      # overlapping: never


def test_greedy_race_rows_all_equal_ar(toy_grid):
    settings = race.Race("fox", scd_core.Settings(window=8, temperature=0.0))
    runs = {m: decoded(toy_grid, settings, m, 2) for m in scd_core.METHODS}
    table = race.summarise(runs, greedy=True)
    assert [s.method for s in table] == list(scd_core.METHODS)
    assert all(s.same_as_ar for s in table)
    assert table[0].latency_speedup is None and table[0].timing is None      # not timed: no claim
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
    assert [it.index for it in run.at(1)] == [0, 0] and [it.index for it in run.at(3)] == [2, 2]
    assert all(a is b for a, b in zip(run.at(10_000), run.last()))
    assert [len(r) for r in run.row_records] == [s.nfe for s in run.samples()]   # each up to its end
    assert race.lockstep({"sjd": run}) == run.nfe


def test_per_sample_figures_are_the_benchmarks_for_the_same_settings(toy_grid):
    """Row b of a race batch draws from seed b, as the bench's run with seed b alone: the race's
    per-sample figures are the bench's per-run figures, value for value."""
    from scd_core import bench_rows

    settings = race.Race("fox", scd_core.Settings(window=8), seed=0)
    run = decoded(toy_grid, settings, "scd-mc", 3)
    runs = bench_rows.run_case(toy_grid, ["fox"], 3, 1, scd_core.Settings("scd-mc", 8))
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
    assert f"{ratio:.2f}x fewer passes" in text and f"{probe.tv_next:.0%}" in text
    assert f"{table[1].draft_stability.mean:.0%}" in text and "total variation" not in text
    assert race_view.explain_gap(table[:1], probe) == ""


def test_greedy_explanation_says_there_is_nothing_to_couple(texture):
    settings = race.Race("ocean waves").greedy()
    runs = {m: decoded(texture, settings, m, 2) for m in ("ar", "sjd", "scd-mc")}
    text = race_view.explain_gap(race.summarise(runs, greedy=True), None)
    assert "no randomness to couple" in text and "exactly AR's tokens" in text
    assert "fewer passes" not in text and "stay valid" not in text


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


# ------------------------------------------------------------------- on a decode client

@pytest.fixture(scope="module")
def client(texture, toy_grid):
    models = {"texture": texture, "toy-grid": toy_grid}
    c = LocalClient(load=models.__getitem__)
    yield c
    c.close()


def test_rows_on_a_decode_client_are_the_batch_in_this_process(client, toy_grid):
    """Row b on the client (seed + b, sharing passes there) has the tokens and per-sample
    figures of row b of the in-process batch: where a race decodes changes no figure."""
    settings = race.Race("fox", scd_core.Settings(window=8), seed=4)
    here = decoded(toy_grid, settings, "scd-mc", 3)
    there = list(race.decode_rows(client, "toy-grid", settings, "scd-mc", [4, 5, 6]))[-1]
    assert torch.equal(here.tokens(), there.tokens()) and there.done and there.rows == 3
    assert here.samples() == pytest.approx(there.samples())
    assert there.seconds > 0 and there.largest_pass == 3        # all in one pass, nothing from outside
    assert torch.equal(here.committed_curves(), there.committed_curves())
    assert here.histogram() == pytest.approx(there.histogram())


def test_a_bad_seed_among_rows_submitted_together_queues_none(client):
    with pytest.raises(ValueError, match="seed"):
        client.submit_rows("toy-grid", "fox", [0, -1], scd_core.Settings(window=8))
    _, server = client.server("toy-grid")
    assert not any(s._waiting for s in server.schedulers.values()) and not client._rows.running()


def test_one_image_and_the_batch_have_the_benchs_nfe(client, texture):
    """The figures the race times, against the bench's for the same settings: one image alone
    is `--seeds 1`, its NFE exactly; the batch's per-sample NFE is `--seeds K`'s, and `--seeds 1
    --batch K` decodes the same K rows (same NFE). Only that the times exist is asserted here:
    how they compare is measured by `python -m bench race-timing`."""
    from scd_core import bench_rows

    settings = race.Race("ocean waves", scd_core.Settings(window=16))
    for method in ("ar", "scd-mc"):
        one = list(race.decode_rows(client, "texture", settings, method, [0]))[-1]
        batch = list(race.decode_rows(client, "texture", settings, method, range(3)))[-1]
        timing = race.timing_of(one, batch)
        alone = bench_rows.run_case(texture, ["ocean waves"], 1, 1, settings.of(method))
        seeds = bench_rows.run_case(texture, ["ocean waves"], 3, 1, settings.of(method))
        together = bench_rows.run_case(texture, ["ocean waves"], 1, 3, settings.of(method))
        assert timing.latency_nfe == one.samples()[0].nfe == alone[0].nfe
        assert [s.nfe for s in batch.samples()] == [r.nfe for r in seeds]
        assert max(s.nfe for s in batch.samples()) == together[0].nfe
        assert timing.latency > 0 and timing.batch == 3 and timing.throughput > 0 and timing.alone


def test_summary_gives_latency_and_throughput_against_ars():
    spread = race.Spread.of([10.0])
    runs = {m: race.MethodRun(m) for m in ("ar", "sjd")}
    timings = {"ar": race.Timing(0.5, 576, 8, 1.0), "sjd": race.Timing(0.25, 250, 8, 4.0)}
    assert timings["sjd"].throughput == 2.0 and timings["ar"].throughput == 8.0
    summary = race.MethodSummary("sjd", 1, spread, spread, spread, spread, spread, None, timings["sjd"],
                                 2.0, 0.25)
    html = race_view.race_table_html([summary], greedy=False)
    assert "0.25 s · 2.00x" in html and "2.0/s · 0.25x" in html
    assert "one image: seconds (vs AR)" in html and "batch of K: images/s (vs AR)" in html
    assert race.summarise(runs, False, timings) == []        # nothing decoded: no rows


def test_timings_of_several_rounds_give_medians_and_ranges():
    rounds = [race.Timing(t, 135, 8, b) for t, b in ((0.54, 2.0), (0.83, 4.0), (0.25, 1.0))]
    t = race.Timing.of_rounds(rounds)
    assert (t.latency, t.latency_range, t.rounds) == (0.54, (0.25, 0.83), 3)
    assert t.batch_seconds == 2.0 and t.throughput == 4.0 and t.throughput_range == (2.0, 8.0)
    assert race.apart((0.1, 0.2), (0.3, 0.4)) and race.apart((0.3, 0.4), (0.1, 0.2))
    assert not race.apart((0.1, 0.3), (0.25, 0.4))
    assert race.Timing(0.5, 1, 8, 1.0).latency_range == (0.5, 0.5)        # one round: no spread


def test_time_method_times_the_same_rows_again(client):
    """A timing round decodes what the race decodes (NFE equal: passes are deterministic)."""
    settings = race.Race("ocean waves", scd_core.Settings(window=16))
    one = list(race.decode_rows(client, "texture", settings, "scd-mc", [0]))[-1]
    again = race.time_method(client, "texture", settings, "scd-mc", 2)
    assert again.latency_nfe == one.nfe and again.batch == 2 and again.latency > 0
    calls = iter(range(10_000))
    assert race.time_method(client, "texture", settings, "ar", 2, lambda: next(calls) >= 3) is None


@pytest.mark.served
def test_a_race_times_two_rounds_at_least_and_more_only_within_its_budget(client):
    """Passes are the same in every round; the third round runs only while the rounds after
    the first stay within the budget."""
    settings = race.Race("ocean waves", scd_core.Settings(window=16))
    for budget, rounds in ((0.0, 2), (1e9, 3)):
        steps = list(race.decode_race(client, "texture", settings, 2, rounds=3, budget=budget))
        timings = steps[-1].timings
        assert {m: len(t) for m, t in timings.items()} == dict.fromkeys(scd_core.METHODS, rounds), budget
        assert all(len({t.latency_nfe for t in ts}) == 1 for ts in timings.values())    # deterministic passes
        assert [s.method for s in steps if s.run is None][:4] == list(scd_core.METHODS)  # turns, in order


def test_summarise_divides_by_ars_times(toy_grid):
    settings = race.Race("fox", scd_core.Settings(window=8))
    runs = {m: decoded(toy_grid, settings, m, 2) for m in ("ar", "sjd")}
    timings = {"ar": race.Timing(0.6, 256, 2, 1.0), "sjd": race.Timing(0.3, 120, 2, 2.0)}
    ar, sjd = race.summarise(runs, False, timings)
    assert ar.latency_speedup == 1.0 and sjd.latency_speedup == pytest.approx(2.0)
    assert sjd.throughput_speedup == pytest.approx(0.5)
    assert race.summarise(runs, False)[1].latency_speedup is None        # not timed: no claim


def test_stop_cancels_a_clients_rows_after_the_current_pass(client):
    calls = iter(range(10_000))
    stop = lambda: next(calls) >= 5   # noqa: E731
    runs = list(race.decode_rows(client, "texture", race.Race("ocean waves"), "ar", [0, 1], stop))
    last = runs[-1]
    assert last.stopped and not last.done and last.nfe < 576 and last.seconds is not None


@pytest.mark.served
def test_rows_submitted_together_start_in_one_pass_in_a_worker_process():
    """`submit_rows` on the page's default client: the K rows' first pass is one batch of K
    (one by one, the first would start alone), and each row is the one its seed gives."""
    from scd_core.workers import ProcessClient

    client = ProcessClient(threads=1)
    try:
        settings = race.Race("fox", scd_core.Settings(window=8), seed=2)
        run = list(race.decode_rows(client, "toy-grid", settings, "sjd", [2, 3, 4]))[-1]
        assert run.done and run.largest_pass == 3
        alone = scd_core.generate(scd_core.load_model("toy-grid"), ["fox"], seed=3, method="sjd", window=8)
        assert torch.equal(run.tokens()[1], alone.tokens[0]) and run.samples()[1].nfe == alone.nfe
        rids = client.submit_rows("toy-grid", "fox", [0, 1], settings.of("ar"))
        assert [client.result(r, timeout=60).batch_sizes[0] for r in rids] == [2, 2]
        with pytest.raises(ValueError, match="seed"):
            client.submit_rows("toy-grid", "fox", [0, -1], settings.of("ar"))
    finally:
        client.close()
