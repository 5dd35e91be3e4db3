"""Pictures handed to Gradio as PNG files written once, not as arrays.

A streamed update repeats the picture it showed last (`streaming.in_full`). Given an array,
Gradio encodes it again at every update and rewrites the same cache file in place, while the
browser may be reading it: the browser then gets a file shorter than its announced length
("Response content shorter than Content-Length") and a broken picture. Given a path, Gradio
copies the file into its cache once, under a temporary name renamed into place, and hands
out that copy again for every repeat. So each distinct picture is encoded once, here, and
written atomically under the hash of its bytes; the newest `KEEP` files stay (a repeat names
a recent one), none unused for `RUN_AGE_S`; older ones are removed.

The files of a run (a video's clip, an exported decoding: MP4 and GIF) go to a folder of
their own under one root (`RUN_FILES.new_folder()`), swept by age and count as new ones come.
Both roots are removed when the page's process exits.

Gradio serves both roots in place (`roots`, given to `gr.set_static_paths`): a run's files are
never copied into Gradio's cache, so they are bounded by the sweeps here alone. Gradio's own
sweep of its cache (`delete_cache`) ends for good the first time a file joins a component's
set while it walks that set ("Set changed size during iteration", from two visitors' runs at
once); what is left in that cache (visitors' uploads) is swept by `CacheSweeper`, which runs
the same sweep again on the next round after such a pass.
"""
from __future__ import annotations

import atexit
import hashlib
import io
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from demo.backend import env_count

KEEP = 2048                   # picture files kept: far more than the pictures of the runs in flight ...
KEEP_RUNS = 256               # run folders kept (each a clip or an export: 100-300 KB) ...
RUN_AGE_S = env_count("SCD_FILES_S", 1800)   # ... none older than this (s; Gradio sweeps its copies as soon, demo.config.CACHE_SWEEP)


class PictureFiles:
    """PNG files of pictures under one folder (made on first use): the newest `keep`, none
    unused for `max_age_s` (older ones go as new ones are written)."""

    def __init__(self, folder: Path | None = None, keep: int = KEEP, max_age_s: float = RUN_AGE_S,
                 clock=time.monotonic) -> None:
        self._folder, self._keep, self.max_age_s, self.clock = folder, keep, max_age_s, clock
        self._paths: OrderedDict[str, tuple[Path, float]] = OrderedDict()   # digest -> (file, last used), oldest first
        self._lock = threading.Lock()

    @property
    def folder(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="scd-pictures-"))
        return self._folder

    def path_of(self, picture: np.ndarray) -> str:
        """The path of a PNG file holding `picture` (H x W or H x W x 3/4, uint8)."""
        buffer = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(picture)).save(buffer, format="PNG", compress_level=1)
        data = buffer.getvalue()
        digest = hashlib.sha256(data).hexdigest()[:32]
        with self._lock:
            now = self.clock()
            path, _ = self._paths.get(digest, (None, 0.0))
            if path is not None and path.exists():
                self._paths[digest] = (path, now)
                self._paths.move_to_end(digest)
                return str(path)
            path = self.folder / f"{digest}.png"
            fd, staging = tempfile.mkstemp(dir=self.folder, prefix=".picture-")
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(staging, path)                            # whole, or not there at all
            self._paths[digest] = (path, now)
            while len(self._paths) > self._keep or now - next(iter(self._paths.values()))[1] > self.max_age_s:
                _, (old, _) = self._paths.popitem(last=False)
                old.unlink(missing_ok=True)
            return str(path)

    def remove(self) -> None:
        """Remove the folder and every file in it (the page's process exits)."""
        with self._lock:
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
            self._paths.clear()


class RunFolders:
    """A folder per run's files under one root (made on first use): the newest `keep`, none
    older than `max_age_s`; older ones go as new ones are made."""

    def __init__(self, root: Path | None = None, keep: int = KEEP_RUNS, max_age_s: float = RUN_AGE_S,
                 clock=time.time) -> None:
        self._root, self.keep, self.max_age_s, self.clock = root, keep, max_age_s, clock
        self._lock = threading.Lock()
        self._made: list[tuple[float, Path]] = []          # (when, folder), oldest first

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="scd-runs-"))
        return self._root

    def new_folder(self) -> str:
        with self._lock:
            now = self.clock()
            while self._made and (len(self._made) >= self.keep or now - self._made[0][0] > self.max_age_s):
                shutil.rmtree(self._made.pop(0)[1], ignore_errors=True)
            folder = Path(tempfile.mkdtemp(dir=self.root, prefix="run-"))
            self._made.append((now, folder))
            return str(folder)

    def folders(self) -> int:
        with self._lock:
            return len(self._made)

    def remove(self) -> None:
        with self._lock:
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
            self._made.clear()


class CacheSweeper:
    """Every `every_s`, `sweep(age_s)` (Gradio's sweep of the files it made for the page, older
    than `age_s`) in a daemon thread; a pass that fails is logged and the next round runs."""

    def __init__(self, sweep: Callable[[float], None], every_s: float, age_s: float, log=None) -> None:
        self.sweep, self.every_s, self.age_s, self.log = sweep, every_s, age_s, log
        self.passes = self.failed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="cache-sweeper", daemon=True)

    def start(self) -> "CacheSweeper":
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.sweep(self.age_s)
                self.passes += 1
            except Exception as exc:                         # noqa: BLE001: the next round sweeps again
                self.failed += 1
                if self.log is not None:
                    self.log(f"Gradio's cache sweep failed this round ({type(exc).__name__}: {exc}); next round in {self.every_s:g} s")


FILES = PictureFiles()
RUN_FILES = RunFolders()


def roots() -> list[Path]:
    """The folders of the pictures and the runs' files, made now: Gradio serves them in place."""
    return [FILES.folder, RUN_FILES.root]


@atexit.register
def _remove_folders() -> None:
    FILES.remove()
    RUN_FILES.remove()


def as_file(value):
    """A picture array as the path of its PNG file; anything else (None, a path) as it is."""
    if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim in (2, 3):
        return FILES.path_of(value)
    return value
