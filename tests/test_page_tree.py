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


def test_ar_with_a_tree_runs_the_chain_and_says_so():
    s = checks.settings_of("ar", 16, tree="4 x 1", **ARGS)
    assert s.tree == CHAIN
    assert checks.tree_note("sjd", "4 x 1") == ""
    assert "AR" in checks.tree_note("ar", "4 x 1") and checks.tree_note("ar", TREE_CHOICES[0]) == ""


def test_a_tree_too_big_for_the_window_is_refused_with_the_library_message():
    with pytest.raises(ValueError, match=r"^tree .*window 4"):
        checks.settings_of("scd-mc", 4, tree="2 x 2", **ARGS)


@pytest.mark.parametrize("bad", ["5 x 5", "2x2", 3, ["2 x 2"]])
def test_an_unknown_tree_is_refused(bad):
    with pytest.raises(ValueError, match=r"^tree: unknown draft tree"):
        checks.settings_of("scd-mc", 16, tree=bad, **ARGS)
