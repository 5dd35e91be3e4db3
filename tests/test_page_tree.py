"""The page's draft tree control: labels -> Settings.tree, AR runs the chain, refusals."""
import pytest

from demo import checks
from demo.labels import TREE_CHOICES, TREE_LABELS
from scd_core.settings import CHAIN

ARGS = dict(init="random", temperature=1.0, top_k=0, top_p=1.0, cfg=1.0)


def test_every_label_maps_to_a_tree_and_the_first_is_the_chain():
    assert TREE_LABELS[TREE_CHOICES[0]] == CHAIN
    assert checks.check_tree("2 x 2") == (2, 2) and checks.check_tree(None) == CHAIN


@pytest.mark.parametrize("method", ["sjd", "scd-mc", "scd-gumbel"])
def test_tree_reaches_the_settings(method):
    s = checks.settings_of(dict(method=method, window=16, tree="2 x 2", **ARGS))
    assert s.tree == (2, 2) and s.uses_tree


def test_ar_with_a_tree_runs_the_chain():
    s = checks.settings_of(dict(method="ar", window=16, tree="4 x 1", **ARGS))
    assert s.tree == CHAIN


def test_a_tree_too_big_for_the_window_is_refused_naming_both_fields():
    with pytest.raises(ValueError, match=r"^Draft tree: 2 x 2 feeds 7 tokens per pass .* more than Window L "
                                         r"\(4\); choose a smaller tree or a window of at least 7\.$"):
        checks.settings_of(dict(method="scd-mc", window=4, tree="2 x 2", **ARGS))
    from scd_core.settings import Settings
    with pytest.raises(ValueError, match="window 4"):               # the library draws the same line
        Settings(method="scd-mc", window=4, tree=(2, 2))
    Settings(method="scd-mc", window=7, tree=(2, 2))
    checks.settings_of(dict(method="scd-mc", window=7, tree="2 x 2", **ARGS))


@pytest.mark.parametrize("bad", ["5 x 5", "2x2", 3, ["2 x 2"]])
def test_an_unknown_tree_is_refused(bad):
    with pytest.raises(ValueError, match=r"^Draft tree: unknown draft tree"):
        checks.settings_of(dict(method="scd-mc", window=16, tree=bad, **ARGS))


# ------------------------------------------------------------- the handlers, tree chosen

from demo import config, generate_tab, inputs, layout, race_tab  # noqa: E402
import scd_core  # noqa: E402
from scd_core.settings import Settings  # noqa: E402

pytestmark = pytest.mark.served

RUN = dict(init="random", temperature=1.0, top_k=0, top_p=1.0, cfg=1.0, seed=0, pace=0.0, samples=2)


def page_args(model, prompt, method, window, tree) -> dict:
    """A decoding event's inputs by name."""
    return RUN | dict(model=model, prompt=prompt, method=method, window=window, tree=tree)


def last(updates, key):
    return next(u[key] for u in reversed(updates) if key in u)


@pytest.mark.parametrize("model,prompt", [("texture", "ocean waves"), ("tiny", "red heart")])
@pytest.mark.parametrize("method", ["sjd", "scd-mc", "scd-gumbel"])
def test_generate_with_a_tree_gives_the_library_tokens(model, prompt, method):
    updates = list(generate_tab.generate_stream(**page_args(model, prompt, method, 16, "2 x 2")))
    records = last(updates, layout.last_run)["iterations"]
    settings = Settings(method=method, window=16, tree=(2, 2))
    run = scd_core.generate(config.MODELS.get(model), [prompt], seed=0, settings=settings)
    assert records[-1].tokens_after[0].tolist() == run.tokens[0].reshape(-1).tolist()


def test_generate_ar_with_a_tree_runs_the_chain():
    updates = list(generate_tab.generate_stream(**page_args("texture", "ocean waves", "ar", 16, "2 x 2")))
    assert last(updates, layout.last_run) is not None


def test_a_too_big_tree_or_an_unknown_tree_is_refused_beside_the_field():
    found = inputs.problems(page_args("texture", "ocean waves", "scd-mc", 4, "2 x 2"))
    assert set(found) == {"tree"} and "more than Window L (4)" in found["tree"]
    found = inputs.problems(page_args("texture", "ocean waves", "scd-mc", 16, "9 x 9"))
    assert set(found) == {"tree"} and "unknown draft tree" in found["tree"]


def test_the_race_with_a_tree_runs_its_ar_row_on_the_chain():
    updates = list(race_tab.race_stream(**page_args("texture", "ocean waves", "scd-mc", 16, "2 x 1")))
    text = str(last(updates, layout.race_status))
    assert "error" not in text.lower() and "not started" not in text.lower()
    assert last(updates, layout.race_table) is not None


# ------------------------------------------------------------- the live view draws the tree

from demo import run_view, tree_view  # noqa: E402
from scd_core import trace  # noqa: E402


@pytest.mark.parametrize("method,tree", [("sjd", (2, 1)), ("scd-mc", (2, 2)), ("scd-gumbel", (3, 1))])
def test_each_pass_tree_agrees_with_what_the_pass_committed(method, tree):
    """The candidates drawn at each level, read back against the pass's own verdict: the
    taken candidates are the committed tokens, a level with none taken ends the pass with its
    residual, and the passes shown taking a sibling are the ones the trace counts."""
    model = config.MODELS.get("texture")
    records = list(scd_core.stream(model, ["ocean waves"], method=method, window=16, tree=tree, seed=3))
    drawn = 0
    for it in records:
        levels = tree_view.tree_levels(it)
        if not levels:
            continue
        drawn += 1
        k, depth = tree
        committed = it.committed_tokens[0].tolist()
        assert len(levels) <= depth and all(len(lv.candidates) == k for lv in levels)
        for d, lv in enumerate(levels):
            assert lv.position == int(it.n_before[0]) + d
            taken = [t for t, v in lv.candidates if v == tree_view.TAKEN]
            if lv.residual is None:
                assert taken == [committed[d]]
            else:                                   # none accepted: the pass ends here
                assert d == len(levels) - 1 and not taken and bool(it.resampled[0])
                assert lv.residual == committed[d] and int(it.num_accepted[0]) == d
                assert {v for _, v in lv.candidates} == {tree_view.REJECTED}
        assert len({t for t, _ in levels[0].candidates}) == k          # candidates drawn without replacement
    siblings = sum(bool(it.took_sibling[0]) for it in records)
    assert drawn > 0.8 * len(records) and siblings == trace.DraftCounts.of(records, 0).siblings > 0


def test_a_chain_run_draws_no_tree():
    model = config.MODELS.get("texture")
    records = list(scd_core.stream(model, ["ocean waves"], method="scd-mc", window=16, seed=0))
    assert not any(tree_view.tree_levels(it) for it in records)
    assert tree_view.tree_html(records[3], (1, 0)) == ""
    assert run_view.tree_note((1, 0), trace.DraftCounts.of(records, 0)) == ""


def test_generate_with_a_tree_shows_it_and_says_what_it_did():
    updates = list(generate_tab.generate_stream(**page_args("texture", "ocean waves", "scd-mc", 16, "2 x 2")))
    shown, status = last(updates, layout.tree_now), last(updates, layout.status)
    records = last(updates, layout.last_run)["iterations"]
    counts = trace.DraftCounts.of(records, 0)
    assert "Draft tree 2 x 2" in shown and "a sibling was taken" in shown
    assert f"Pass {tree_view.last_sibling(records).index}, the run's last that took a sibling" in shown
    assert f"a sibling taken in {counts.siblings} of {counts.passes} passes" in status
    assert "| draft tree | tree 2 x 2: a sibling taken" in last(updates, layout.summary)
    chain = list(generate_tab.generate_stream(**page_args("texture", "ocean waves", "scd-mc", 16, "chain (no tree)")))
    assert last(chain, layout.tree_now) in ("", None) and "sibling" not in last(chain, layout.status)
