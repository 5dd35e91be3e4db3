"""The page's draft tree control: labels -> Settings.tree, AR runs the chain, refusals."""
import pytest

from demo import checks
from demo.labels import TREE_CHOICES, TREE_LABELS
from scd_core.settings import CHAIN

ARGS = dict(init="random", temperature=1.0, top_k=0, top_p=1.0, cfg_scale=1.0)


def test_every_label_maps_to_a_tree_and_the_first_is_the_chain():
    assert TREE_LABELS[TREE_CHOICES[0]] == CHAIN
    assert checks.check_tree("2 x 2") == (2, 2) and checks.check_tree(None) == CHAIN


@pytest.mark.parametrize("method", ["sjd", "scd-mc", "scd-gumbel"])
def test_tree_reaches_the_settings(method):
    s = checks.settings_of(method, 16, tree="2 x 2", **ARGS)
    assert s.tree == (2, 2) and s.uses_tree


def test_ar_with_a_tree_runs_the_chain():
    s = checks.settings_of("ar", 16, tree="4 x 1", **ARGS)
    assert s.tree == CHAIN


def test_a_tree_too_big_for_the_window_is_refused_with_the_library_message():
    with pytest.raises(ValueError, match=r"^tree .*window 4"):
        checks.settings_of("scd-mc", 4, tree="2 x 2", **ARGS)


@pytest.mark.parametrize("bad", ["5 x 5", "2x2", 3, ["2 x 2"]])
def test_an_unknown_tree_is_refused(bad):
    with pytest.raises(ValueError, match=r"^tree: unknown draft tree"):
        checks.settings_of("scd-mc", 16, tree=bad, **ARGS)


# ------------------------------------------------------------- the handlers, tree chosen

import app  # noqa: E402
import scd_core  # noqa: E402
from scd_core.settings import Settings  # noqa: E402

RUN = dict(init="random", temperature=1.0, top_k=0, top_p=1.0, cfg_scale=1.0, seed=0, pace=0.0,
           samples=2)


def page_args(model, prompt, method, window, tree):
    d = {**RUN}
    return [model, method, window, d["init"], d["temperature"], d["top_k"], d["top_p"], d["cfg_scale"],
            d["seed"], prompt, d["pace"], d["samples"], None, "", tree]


def last(updates, key):
    return next(u[key] for u in reversed(updates) if key in u)


@pytest.mark.parametrize("model,prompt", [("texture", "ocean waves"), ("tiny", "red heart")])
@pytest.mark.parametrize("method", ["sjd", "scd-mc", "scd-gumbel"])
def test_generate_with_a_tree_gives_the_library_tokens(model, prompt, method):
    updates = list(app.generate_stream(*page_args(model, prompt, method, 16, "2 x 2")))
    records = last(updates, app.last_run)["iterations"]
    settings = Settings(method=method, window=16, tree=(2, 2))
    run = scd_core.generate(app.MODELS.get(model), [prompt], seed=0, settings=settings)
    assert records[-1].tokens_after[0].tolist() == run.tokens[0].reshape(-1).tolist()


def test_generate_ar_with_a_tree_runs_the_chain():
    updates = list(app.generate_stream(*page_args("texture", "ocean waves", "ar", 16, "2 x 2")))
    assert last(updates, app.last_run) is not None


def test_a_too_big_tree_or_an_unknown_tree_is_refused_beside_the_field():
    found = app.problems(*page_args("texture", "ocean waves", "scd-mc", 4, "2 x 2"))
    assert set(found) == {"tree"} and "window 4" in found["tree"]
    found = app.problems(*page_args("texture", "ocean waves", "scd-mc", 16, "9 x 9"))
    assert set(found) == {"tree"} and "unknown draft tree" in found["tree"]


def test_the_race_with_a_tree_runs_its_ar_row_on_the_chain():
    updates = list(app.race_stream(*page_args("texture", "ocean waves", "scd-mc", 16, "2 x 1")))
    text = str(last(updates, app.race_status))
    assert "error" not in text.lower() and "not started" not in text.lower()
    assert last(updates, app.race_table) is not None
