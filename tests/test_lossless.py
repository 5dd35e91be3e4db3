"""scd_core.lossless: the chi-square two-sample test (against scipy and by hand), that it
finds a changed distribution, that SCD and SJD pass it against AR on texture, greedy mode's
identical tokens, and demo.lossless's view of it."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import scd_core
from demo import lossless as view
from plots_util import figure
from scd_core import lossless


@pytest.fixture(scope="module")
def texture():
    return scd_core.load_model("texture")


def test_statistic_and_p_value_are_pearsons_on_the_2_by_k_table():
    a, b = [30, 20, 10, 40], [25, 30, 15, 30]
    test = lossless.chi_square_two_sample(a, b)
    chi2, p, dof, _ = stats.chi2_contingency([a, b], correction=False)
    assert test.statistic == pytest.approx(chi2) and test.p_value == pytest.approx(p) and test.dof == dof


def test_a_two_by_two_table_by_hand():
    # a: 20 of 40 in bin 0; b: 10 of 40. Expected 15 in each cell of bin 0, 25 in bin 1.
    test = lossless.chi_square_two_sample([20, 20], [10, 30])
    by_hand = 2 * (5 ** 2 / 15) + 2 * (5 ** 2 / 25)
    assert test.statistic == pytest.approx(by_hand) and test.dof == 1
    assert test.p_value == pytest.approx(math.erfc(math.sqrt(by_hand / 2)))     # chi2 with 1 dof


def test_equal_counts_give_p_one_and_rare_tokens_are_pooled():
    test = lossless.chi_square_two_sample([50, 50, 1, 1, 0], [50, 50, 1, 1, 0])
    assert test.statistic == 0 and test.p_value == pytest.approx(1.0)
    # tokens 2 and 3 are too rare even together (2 expected): they join the smallest kept bin
    assert test.bins == (0, -1) and test.counts_a == test.counts_b == (50, 52)
    wide = lossless.chi_square_two_sample([50, 50, 4, 4, 3], [50, 50, 4, 4, 3])
    assert wide.bins == (0, 1, -1) and wide.counts_a == (50, 50, 11)     # enough together: one bin
    assert lossless.chi_square_two_sample([7, 0], [9, 0]).dof == 0                    # one token only


def test_bad_counts_are_refused_naming_them():
    with pytest.raises(ValueError, match="a and b"):
        lossless.chi_square_two_sample([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="a and b"):
        lossless.chi_square_two_sample([0, 0], [1, 2])


def test_p_values_of_equal_distributions_are_spread_evenly():
    """Under equal distributions the p-value is uniform: 400 tests of two multinomial samples
    of the same law put about 5% below 0.05 and a half below 0.5 (seeds spaced)."""
    law = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05])
    ps = []
    for k in range(400):
        g = torch.Generator().manual_seed(1000 * k)
        a = torch.bincount(torch.multinomial(law, 300, True, generator=g), minlength=5)
        b = torch.bincount(torch.multinomial(law, 300, True, generator=g), minlength=5)
        ps.append(lossless.chi_square_two_sample(a, b).p_value)
    ps = torch.tensor(ps)
    assert 0.02 <= float((ps < 0.05).float().mean()) <= 0.09
    assert 0.42 <= float((ps < 0.5).float().mean()) <= 0.58


def test_a_changed_distribution_is_found(texture):
    """The biased variant: AR at temperature 0.7 against AR at 1 (the law a method would have
    drawn from had it sharpened p) is told apart at 256 samples."""
    settings = scd_core.Settings(window=16)
    a = lossless.sample_tokens(texture, "ocean waves", settings.replace(method="ar"), 256, 0)
    b = lossless.sample_tokens(texture, "ocean waves", settings.replace(method="ar", temperature=0.7),
                               256, lossless.SPACING)
    p = [lossless.chi_square_two_sample(lossless.counts_at(a, i, texture.vocab_size),
                                        lossless.counts_at(b, i, texture.vocab_size)).p_value
         for i in lossless.spread_positions(576)]
    assert min(p) < 1e-3


def test_scd_draws_ars_law_on_texture_and_greedy_gives_ars_tokens(texture):
    c = lossless.compare(texture, "ocean waves", scd_core.Settings(window=16), "scd-mc", samples=128)
    assert c.positions == tuple(lossless.informative_positions(c.ar_tokens, c.method_tokens)) and len(c.tests) == 4
    assert min(t.p_value for t in c.tests) > 1e-3                  # no position tells them apart
    assert c.greedy_equal == 576 and c.different_images == 128      # the same law, not the same images
    assert c.ar_tokens.shape == c.method_tokens.shape == (128, 576)
    first = scd_core.generate(texture, ["ocean waves"] * 2, seed=lossless.SPACING, method="scd-mc", window=16)
    assert torch.equal(c.method_tokens[:2], first.tokens)           # row k from seed + SPACING + k


def test_the_positions_tested_are_where_the_pooled_samples_vary_most():
    """Not a position nearly every sample fills alike, nor one whose tokens are each too rare to
    test alone (nothing to tell apart at either): the entropy of the pooled samples over the
    token groups the test compares picks them, the same whichever sample came from which method."""
    a = torch.zeros(40, 6, dtype=torch.long)
    b = torch.zeros(40, 6, dtype=torch.long)
    a[:, 2], b[:, 2] = torch.arange(40) % 5, torch.arange(40) % 4       # five values, then four
    a[:, 3], b[:, 3] = torch.arange(40), torch.arange(40, 80)           # 80 tokens, each once: one group
    a[:, 4], b[:, 4] = torch.arange(40) % 2, torch.arange(40) % 2       # two, half and half
    a[:10, 5], b[:10, 5] = 1, 1                                         # two, a quarter and the rest
    a[0, 1] = 1                                                        # one sample apart: one group
    assert lossless.informative_positions(a, b, count=3) == [2, 4, 5]
    assert lossless.informative_positions(b, a, count=3) == [2, 4, 5]
    mixed = torch.cat([a, b])[torch.randperm(80, generator=torch.Generator().manual_seed(3))]
    assert lossless.informative_positions(mixed[:40], mixed[40:], count=3) == [2, 4, 5]


def test_the_tests_power_is_the_noncentral_chi_squares():
    """How far a token's share must move to be caught 8 times in 10 at p < 0.05: scipy's
    noncentral chi-square gives the same, and so does drawing the samples (one token group, 256
    samples each: a 50% share moved to 38%, the test's 12 points)."""
    from scipy import optimize

    for dof, share, n in ((1, 0.5, 256), (5, 0.3, 256), (3, 0.8, 64)):
        critical = stats.chi2.isf(0.05, dof)
        lam = optimize.brentq(lambda x: stats.ncx2.sf(critical, dof, x) - 0.8, 1e-6, 200)
        assert lossless.detectable_shift(share, n, dof) == pytest.approx(math.sqrt(2 * lam * share * (1 - share) / n),
                                                                          rel=1e-4)
    shift = lossless.detectable_shift(0.5, 256, 1)
    g = torch.Generator().manual_seed(11)
    caught = 0
    for _ in range(400):
        a = int((torch.rand(256, generator=g) < 0.5).sum())
        b = int((torch.rand(256, generator=g) < 0.5 - shift).sum())
        caught += lossless.chi_square_two_sample([a, 256 - a], [b, 256 - b]).p_value < 0.05
    assert 0.74 <= caught / 400 <= 0.86


def test_samples_come_in_batches_as_one_batch_would(texture):
    settings = scd_core.Settings(window=16, method="sjd")
    chunked = lossless.sample_tokens(texture, "lava rings", settings, 5, 3, batch=2)
    whole = scd_core.generate(texture, ["lava rings"] * 5, seed=3, settings=settings).tokens
    assert torch.equal(chunked, whole)
    assert lossless.sample_tokens(texture, "lava rings", settings, 5, 3, stop=lambda: True) is None


def test_a_stop_ends_the_sampling_within_one_pass_of_a_batch(texture):
    """`stop` is asked before every forward pass, not only between batches: a comparison
    whose event was cancelled stops at once however large its batch."""
    asks, batches = [], []
    stop_at = 5                                                     # the 5th ask says stop
    out = lossless.sample_tokens(texture, "lava rings", scd_core.Settings(window=16, method="ar"), 64, 0,
                                 batch=64, stop=lambda: asks.append(1) or len(asks) >= stop_at,
                                 on_batch=lambda: batches.append(1))
    assert out is None and len(asks) == stop_at and len(batches) == 1   # AR needs 576 passes: stopped in the batch


def test_compare_refuses_bad_arguments(texture):
    with pytest.raises(ValueError, match="samples"):
        lossless.compare(texture, "ocean waves", scd_core.Settings(), "scd-mc", samples=1)
    with pytest.raises(ValueError, match="positions"):
        lossless.compare(texture, "ocean waves", scd_core.Settings(), "scd-mc", samples=4, positions=[576])


def test_the_view_says_it_in_plain_words(texture):
    c = lossless.compare(texture, "ocean waves", scd_core.Settings(window=16), "sjd", samples=32)
    text = view.summary_markdown(texture, c)
    assert "32 samples of AR and 32 of SJD" in text and "576/576 equal" in text and "p-value" in text
    assert "where the samples, pooled, vary most" in text
    for t in c.tests:                                                   # each position's power, said
        counts = [x + y for x, y in zip(t.counts_a, t.counts_b)]
        if t.dof:
            shift = lossless.detectable_shift(max(counts) / sum(counts), 32, t.dof)
            assert f"({max(counts) / sum(counts):.0%}) by {shift * 100:.0f} points" in text
    assert "total variation" not in text
    fig = figure(view.histogram_figure(texture, c))
    assert len(fig.data) == 8 and all(f"p = {t.p_value:.2f}" in str(fig.layout.annotations) for t in c.tests)
    assert view.samples_picture(texture, c.ar_tokens).shape[2] == 3
    assert view.greedy_picture(texture, c).shape[1] > view.greedy_picture(texture, c).shape[0]
    assert "- **Position" in text and "| position |" not in text        # a list: it reads on a phone
    diff = view.diff_picture(texture, c)
    shown = min(view.SHOWN_SAMPLES, c.samples)
    differ = (c.ar_tokens[:shown] != c.method_tokens[:shown]).float().mean()
    red = (diff == np.array(view.DIFFERENT, np.uint8)).all(-1).mean()
    assert abs(red / ((diff != 255).any(-1).mean()) - float(differ)) < 0.05   # red where the tokens differ
    assert f"({float(differ):.0%} of the tokens" in view.diff_title(c)
    with pytest.raises(ValueError, match="^Samples per method: a whole number from 16 to 1,024, got 8."):
        view.check_samples(8)
    with pytest.raises(ValueError, match="embedded"):
        view.check_model("janus-pro-1b")
    assert view.method_of("ar") == "scd-mc" and view.method_of("sjd") == "sjd"
