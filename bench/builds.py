"""The models and engines a measurement builds: an adapter on the tests' tiny config (its
weights spread so that logits depend on the context), and an earlier commit's engine beside
this checkout's. (Checkpoints at their published sizes: `bench.published`.)"""
from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench import ROOT


class _Folders:
    """`tmp_path_factory.mktemp` for `models_util.build` outside pytest."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="scd_bench_models_"))

    def mktemp(self, name: str) -> Path:
        path = self.root / name
        path.mkdir()
        return path


def tiny_config(name: str, dtype=None):
    """(model, prompts, cfg_scale): `name` as the tests build it (`tests/models_util.py`: an
    embedded model as shipped, an adapter on a tiny random config of its classes)."""
    import torch

    import models_util

    model, prompts, cfg = models_util.build(name, dtype or torch.float32, _Folders())
    return model, list(prompts), cfg


def earlier_engine(rev: str):
    """`scd_core` of commit `rev`, importable as `scd_core_old` beside this checkout's `scd_core`
    (extracted with `git archive` into a temporary folder)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "scd_core"], check=True,
                             capture_output=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="scd_old_"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "scd_core").rename(folder / "scd_core_old")
    for path in (folder / "scd_core_old").rglob("*.py"):
        text = path.read_text()
        path.write_text(text.replace("from scd_core", "from scd_core_old")
                        .replace("import scd_core.", "import scd_core_old."))
    sys.path.insert(0, str(folder))
    import scd_core_old
    return scd_core_old
