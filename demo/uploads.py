"""The page's one way in for files: a clip the visitor uploaded, or a shipped example clip.

Gradio resolves a file-valued event input (a `gr.Video` payload's "path", or an http URL) and
copies it into its cache before any handler runs, so the decoding events never take a file
component: the browser copies the Video's upload path into a hidden text field, and
`clip_file` decides here, before anything opens the file, whether that path may be read.
It only looks at the name and the file's metadata (`os.stat`): nothing is read, hashed or
copied, and no message names a server path.
"""
from __future__ import annotations

import os
import re
import stat
from typing import Iterable

from gradio.utils import get_upload_folder

MAX_UPLOAD_BYTES = 50 * 1024 * 1024   # Gradio's upload limit (launch's max_file_size) and the clip's
MAX_PATH_CHARS = 4096
REFUSED = ("Prompt clip: only a video uploaded on this page or one of the example clips can be "
           "used; pick an example clip or upload the video again.")


def size_text(n: int) -> str:
    """Bytes the way a visitor reads them (50 MB, 12 kB)."""
    for unit, size in (("GB", 1024 ** 3), ("MB", 1024 ** 2), ("kB", 1024)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def upload_folder() -> str:
    """Where Gradio stores the files visitors upload (GRADIO_TEMP_DIR), symlinks resolved."""
    return os.path.realpath(get_upload_folder())


def clip_file(value, examples: Iterable[str] = (), limit: int | None = None) -> str | None:
    """The real path of the prompt clip `value` names, or None for no clip; ValueError (one
    line for the visitor) for anything else than a regular file inside Gradio's upload
    folder, at most `limit` bytes (MAX_UPLOAD_BYTES), or one of the `examples` exactly."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_PATH_CHARS or "\0" in value \
            or not os.path.isabs(value):
        raise ValueError(REFUSED)
    real = os.path.realpath(value)       # '..' and every symlink resolved before any check
    if real in {os.path.realpath(e) for e in examples}:
        return real
    root = upload_folder()
    if os.path.commonpath([real, root]) != root or real == root:
        raise ValueError(REFUSED)
    try:
        st = os.stat(real)
    except OSError:
        raise ValueError("Prompt clip: the uploaded file is gone (uploads are kept for an hour); "
                         "upload the video again.") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(REFUSED)
    limit = MAX_UPLOAD_BYTES if limit is None else limit
    if st.st_size > limit:
        raise ValueError(f"Prompt clip: the file is {size_text(st.st_size)}; the limit is "
                         f"{size_text(limit)}. Upload a shorter or smaller clip.")
    return real


_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s'\"/]+/)+([^\s'\"/]*)")


def without_paths(text: str) -> str:
    """A message for the visitor with every absolute server path cut to its last name (an
    error from a model load, say, may quote a cache file's path)."""
    return _PATH.sub(lambda m: m.group(1) or "…", str(text))
