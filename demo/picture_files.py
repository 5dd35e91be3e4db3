"""Pictures handed to Gradio as PNG files written once, not as arrays.

A streamed update repeats the picture it showed last (`streaming.in_full`). Given an array,
Gradio encodes it again at every update and rewrites the same cache file in place, while the
browser may be reading it: the browser then gets a file shorter than its announced length
("Response content shorter than Content-Length") and a broken picture. Given a path, Gradio
copies the file into its cache once, under a temporary name renamed into place, and hands
out that copy again for every repeat. So each distinct picture is encoded once, here, and
written atomically under the hash of its bytes; the newest `KEEP` files stay (a repeat names
a recent one), older ones are removed.
"""
from __future__ import annotations

import hashlib
import io
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
from PIL import Image

KEEP = 2048                   # files kept: far more than the pictures of the runs in flight


class PictureFiles:
    """PNG files of pictures under one folder (made on first use)."""

    def __init__(self, folder: Path | None = None, keep: int = KEEP) -> None:
        self._folder, self._keep = folder, keep
        self._paths: OrderedDict[str, Path] = OrderedDict()    # digest -> file, oldest first
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
            path = self._paths.get(digest)
            if path is not None and path.exists():
                self._paths.move_to_end(digest)
                return str(path)
            path = self.folder / f"{digest}.png"
            fd, staging = tempfile.mkstemp(dir=self.folder, prefix=".picture-")
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(staging, path)                            # whole, or not there at all
            self._paths[digest] = path
            while len(self._paths) > self._keep:
                _, old = self._paths.popitem(last=False)
                old.unlink(missing_ok=True)
            return str(path)


FILES = PictureFiles()


def as_file(value):
    """A picture array as the path of its PNG file; anything else (None, a path) as it is."""
    if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim in (2, 3):
        return FILES.path_of(value)
    return value
