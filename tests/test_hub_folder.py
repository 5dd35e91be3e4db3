"""`hub/scd/`, the Hub folder, stands alone: its `custom_generate/` holds the library's modules
as `hub/vendor.py` builds them, imports only torch, transformers and the standard library (and
Pillow, for Janus-Pro's images), requires no unpublished package, and decodes, loaded by
transformers' own `custom_generate` loading, in a process where scd_core cannot be imported:
greedy gives transformers' tokens, and on a bfloat16 model with three tokens tied at the k-th
logit it samples transformers' law (chi-square, 2,000 rows), which a top-k keeping exactly k
tokens does not."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stats_util import chi_square_pvalue

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "hub" / "scd" / "custom_generate"
ALPHA = 1e-4 / 3
# what the folder's modules import: torch, transformers and what transformers installs with it;
# Pillow for the images of Janus-Pro's adapter (`janus._to_pil`)
PACKAGES = {"torch", "transformers", "huggingface_hub", "safetensors", "PIL"}


def vendor():
    spec = importlib.util.spec_from_file_location("hub_vendor", ROOT / "hub" / "vendor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_folder_holds_the_library_as_vendor_builds_it():
    built = vendor().files()
    assert sorted(p.name for p in FOLDER.iterdir() if p.is_file()) == sorted(built)
    for name, text in built.items():
        assert (FOLDER / name).read_text() == text, f"{name} differs from the library: run python hub/vendor.py"
    assert "hf.py" in built and "sampling.py" in built and "chain.py" in built


def test_the_folder_imports_no_unpublished_package():
    from transformers.dynamic_module_utils import get_imports

    imported = set().union(*(get_imports(str(path)) for path in FOLDER.glob("*.py")))
    assert imported - set(sys.stdlib_module_names) <= PACKAGES
    assert "scd_core" not in imported
    requirements = (FOLDER / "requirements.txt").read_text().split()
    assert [r.split(">")[0] for r in requirements] == ["transformers", "torch"]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """The folder run by `tests/hub_probe.py` where scd_core cannot be imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = str(tmp_path_factory.mktemp("modules"))
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "hub_probe.py"), str(FOLDER.parent)],
                          cwd=tmp_path_factory.mktemp("cwd"), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_folder_decodes_where_scd_core_cannot_be_imported(probe):
    assert probe["hidden"] and probe["loaded"] == []
    assert probe["greedy_equal"]


def test_the_folder_samples_transformers_law_where_three_tokens_tie_at_the_kth(probe):
    ties = probe["ties"]
    joint = torch.tensor(ties["joint"], dtype=torch.float64)
    assert ties["gap"] > 0.1                    # token 0 never within rounding of the tied three
    for method, seqs in ties["folder"].items():
        p = chi_square_pvalue(torch.tensor(seqs), joint)
        assert p > ALPHA, f"{method}: chi-square p = {p:.3g}"
    p = chi_square_pvalue(torch.tensor(ties["exactly_k"]), joint)
    assert p < ALPHA, f"top-k keeping exactly k tokens passed: chi-square p = {p:.3g}"
