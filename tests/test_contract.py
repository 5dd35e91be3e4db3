"""The TokenModel contract (scd_core.protocols, docs/models.md), checked on every shipped model
and adapter with the checker users run on their own models (`scd_core.testing`): the
embedded models as shipped, the real-model adapters on tiny random configs of their classes
(tests/models_util.py). Then the checker itself: importable from the installed package
without pytest, and failing on broken models. And the engine's side of the contract: how
`generate` calls a session, as docs/models.md states it.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import scd_core
import models_util
from scd_core import testing
from scd_core.models import load_model, tree

ROOT = Path(__file__).resolve().parents[1]
# Its logits are fresh random numbers at every call (it times the engine alone): only the
# shapes of the contract apply.
RANDOM = {"random-logits"}


@pytest.mark.parametrize("name", models_util.NAMES)
def test_model_follows_the_token_model_contract(name, tmp_path_factory):
    model, prompts, cfg_scale = models_util.build(name, torch.float32, tmp_path_factory)
    testing.check_model(model, prompts, cfg_scale, deterministic=name not in RANDOM)


# ---------------------------------------------------------------- the checker, for users

class Broken:
    """A toy-grid model with one fault, for the checker to find."""

    def __init__(self, fault: str) -> None:
        self.inner, self.fault = load_model("toy-grid", grid=(4, 4), hidden=64), fault
        self.vocab_size, self.grid = self.inner.vocab_size, self.inner.grid

    def start(self, prompts, cfg_scale):
        return BrokenSession(self.inner.start(prompts, cfg_scale), self.fault)

    def decode(self, tokens):
        return self.inner.decode(tokens)


class BrokenSession:
    def __init__(self, session, fault: str) -> None:
        self.session, self.fault, self.first_logits = session, fault, session.first_logits
        self.fed = torch.zeros(session.first_logits.shape[0], dtype=torch.long)

    def step(self, tokens, start):
        if self.fault == "ignores start":            # feeds after what it was fed, whatever `start` says
            start = self.fed.clone()
        self.fed = start + tokens.shape[1]
        return self.session.step(tokens, start)

    def step_tree(self, tokens, parents, start):
        if self.fault == "tree as chain":             # every node sees the nodes before it
            parents = torch.arange(-1, tokens.shape[1] - 1).expand_as(parents)
        return self.session.step_tree(tokens, parents, start)

    def keep_path(self, nodes):
        if self.fault != "keeps nothing":
            self.session.keep_path(nodes)


def test_the_checker_passes_a_good_model_and_finds_each_fault():
    good = Broken("none")
    testing.check_model(good, ["a", "bb"], 2.0)
    testing.check_tree_session(good, ["a", "bb"], 2.0)
    with pytest.raises(AssertionError, match="forget"):
        testing.check_model(Broken("ignores start"), ["a", "bb"], 2.0)
    with pytest.raises(AssertionError, match="root-to-node path"):
        testing.check_tree_session(Broken("tree as chain"), ["a", "bb"], 2.0)
    with pytest.raises(AssertionError, match="kept"):
        testing.check_tree_session(Broken("keeps nothing"), ["a", "bb"], 2.0)


def test_the_checker_is_importable_from_the_installed_package_without_pytest(tmp_path):
    """The wheel `pip install .` installs holds scd_core.testing; imported from it (not from
    this checkout), it needs no pytest and finds a session whose step ignores `start`."""
    source, wheels = tmp_path / "source", tmp_path / "wheels"        # built from a copy: no build/ left here
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "bench_out",
                                                               "__pycache__", "runs", "data", "checkpoints"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(source)], check=True, capture_output=True, timeout=600)
    [wheel] = wheels.glob("scd_core-*.whl")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    code = """
import sys
import scd_core.testing as t
assert 'pytest' not in sys.modules, 'scd_core.testing imported pytest'
print(t.__file__)
import torch
from scd_core.models import load_model

class Stale:                                   # step ignores `start`: feeds after the last token fed
    def __init__(self, s): self.s, self.first_logits, self.n = s, s.first_logits, 0
    def step(self, tokens, start):
        out = self.s.step(tokens, torch.full_like(start, self.n)); self.n += tokens.shape[1]; return out

class Model:
    def __init__(self): self.m = load_model('toy-grid', grid=(4, 4), hidden=64)
    vocab_size, grid = 512, (4, 4)
    def start(self, prompts, cfg): return Stale(self.m.start(prompts, cfg))
    def decode(self, tokens): return self.m.decode(tokens)

try:
    t.check_model(Model(), ['a', 'bb'], 1.0)
except AssertionError as exc:
    print('caught:', str(exc).splitlines()[0])
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert Path(lines[0]).resolve().is_relative_to(site.resolve()), lines[0]        # the installed copy
    assert lines[-1].startswith("caught: row 0 re-fed at start 1"), out.stdout


# ---------------------------------------------------------------- the engine's side

class Recording:
    """A toy-grid model whose sessions check and record how the engine calls them."""

    def __init__(self) -> None:
        self.inner = load_model("toy-grid", grid=(4, 5), hidden=64)
        self.vocab_size, self.grid, self.N = self.inner.vocab_size, self.inner.grid, math.prod(self.inner.grid)
        self.sessions: list[RecordingSession] = []

    def start(self, prompts, cfg_scale):
        self.sessions.append(RecordingSession(self, self.inner.start(prompts, cfg_scale), len(prompts)))
        return self.sessions[-1]

    def decode(self, tokens):
        return self.inner.decode(tokens)


class RecordingSession:
    def __init__(self, model: Recording, session, rows: int) -> None:
        self.model, self.session, self.first_logits = model, session, session.first_logits
        self.held = torch.zeros(rows, dtype=torch.long)      # positions fed and kept, per row
        self.calls: list[str] = []
        self.tree = None                                     # the last step_tree's (start, depths, tokens)
        self.repeated = 0                                    # siblings fed the same token

    def _start(self, start: torch.LongTensor, last: torch.LongTensor) -> None:
        assert bool((start <= self.held).all()), f"start {start.tolist()} past what the rows hold {self.held.tolist()}"
        assert int(last.max()) < self.model.N, "a token fed past the grid"

    def step(self, tokens, start):
        self.calls.append("step")
        self._start(start, start + tokens.shape[1] - 1)
        self.held = start + tokens.shape[1]
        return self.session.step(tokens, start)

    def step_tree(self, tokens, parents, start):
        assert self.tree is None, "step_tree twice without keep_path"
        self.calls.append("step_tree")
        depth = tree.positions(torch.zeros_like(start), parents)
        self._start(start, start + depth.max(1).values)
        line = (depth == torch.arange(tokens.shape[1])).long().cumprod(1).sum(1)     # nodes 0.. at depth 0, 1, ...
        assert bool((line > depth.max(1).values).all()), "the main line comes first and is the deepest path"
        for b in range(tokens.shape[0]):
            siblings = [(p, t) for p, t in zip(parents[b, 1:].tolist(), tokens[b, 1:].tolist())]
            self.repeated += len(siblings) - len(set(siblings))
        self.tree = (start, depth, tokens, parents)
        return self.session.step_tree(tokens, parents, start)

    def keep_path(self, nodes):
        assert self.tree is not None, "keep_path without step_tree"
        self.calls.append("keep_path")
        start, depth, tokens, parents = self.tree
        self.held = start + (nodes >= 0).sum(1)
        self.tree = None
        self.session.keep_path(nodes)


@pytest.mark.parametrize("method", ["sjd", "scd-mc", "scd-gumbel"])
@pytest.mark.parametrize("tree_shape", [(1, 0), (2, 2), (3, 1)])
def test_generate_calls_a_session_as_documented(method, tree_shape):
    """docs/models.md "What the engine guarantees": with `tree=`, every pass is `step_tree` then
    `keep_path` (the last pass and finished rows included), never `step`; without it, `step`
    only; `start` never passes what a row holds, no token is fed past the grid, the main line
    comes first; siblings may repeat a token (placeholders)."""
    model = Recording()
    run = scd_core.generate(model, ["a", "bb", "ccc"], method=method, window=8, tree=tree_shape, seed=1,
                            cfg_scale=2.0)
    session = model.sessions[-1]
    calls = session.calls
    assert run.nfe == 1 + len([c for c in calls if c.startswith("step")])
    if tree_shape == (1, 0):
        assert set(calls) == {"step"}
    else:
        assert calls == ["step_tree", "keep_path"] * (len(calls) // 2) and len(calls) == 2 * (run.nfe - 1)
        assert session.repeated > 0            # rows near the end of the grid: placeholders repeat the line
