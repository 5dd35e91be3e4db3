# Built by hub/vendor.py from scd_core/models/hub.py: edit the library, then rebuild.
"""Model files from the Hugging Face Hub: download on first use, the cache, offline rules,
and reading checkpoints without running pickled code.

One home for how every adapter gets its files:

- `HubFiles` names a repository, the files an adapter needs from it (`patterns`, passed to
  `snapshot_download` as `allow_patterns`), what must be there afterwards (`required`), and,
  for licence-bound repositories, what to accept and where.
- `cached(files)`: the snapshot folder when the cache already holds every required file.
  Never touches the network, so a second load makes no request at all.
- `fetch(files, local_files_only=..., progress=...)`: `cached(files)`, or a download of just
  those files with huggingface_hub's progress bars in the terminal (and `progress` called
  with the bytes done, for a GUI). Every failure is a `WeightsNotFoundError` naming the
  repository and what to do: prefetch command, licence page, `HF_HUB_OFFLINE`.
- `offline(local_files_only)`: downloads are off (`HF_HUB_OFFLINE=1`, read when called, or
  `local_files_only=True`).
- `read_checkpoint(path, trust_pickle=...)`: safetensors or `torch.load(weights_only=True)`; a
  file that needs unrestricted pickle is refused with the globals it holds, unless the caller
  trusts that one file by name (`trust_pickle=` or `SCD_TRUST_PICKLE`).

Where the cache is and which Hub is asked follow huggingface_hub's own variables
(`HF_HOME`, `HF_HUB_CACHE`, `HF_ENDPOINT`, `HF_TOKEN`), read by huggingface_hub when it is
first imported.
"""
from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

ProgressFn = Callable[[int, "int | None", str], None]
"""progress(bytes_done, bytes_total_or_None, repo_id): called while files download."""

TRUST_PICKLE_ENV = "SCD_TRUST_PICKLE"
OFFLINE_ENV = "HF_HUB_OFFLINE"
# What a transformers checkpoint folder needs: configs, safetensors weights, tokenizer and
# processor files, the chat template. PyTorch .bin weights only when a repo has no safetensors.
TRANSFORMERS_PATTERNS = ("*.json", "*.safetensors", "*.jinja", "*.model", "*.tiktoken", "*.txt")
TRANSFORMERS_REQUIRED = (("config.json",), ("*.safetensors",))
BIN_PATTERNS = ("pytorch_model*.bin",)
_TRUTHY = {"1", "true", "yes", "on"}


class WeightsNotFoundError(FileNotFoundError, ValueError):
    """The weights asked for are not on this machine and cannot be fetched (offline, a missing
    folder or repository, a refused licence, a failed download)."""


@dataclass(frozen=True)
class HubFiles:
    """The files an adapter needs from one Hub repository.

    `required` is a tuple of groups of globs: each group must match at least one file of the
    snapshot (e.g. `(("config.json",), ("*.safetensors",))`). `fallback` patterns are fetched
    only when the first download leaves a group unmatched (PyTorch .bin weights of a repo
    without safetensors). `licence` says what to accept and where, for gated repositories.
    """

    repo_id: str
    patterns: tuple[str, ...]
    required: tuple[tuple[str, ...], ...]
    fallback: tuple[str, ...] = ()
    licence: str | None = None
    approx_gb: float | None = None
    what: str = "weights"

    @classmethod
    def transformers(cls, repo_id: str, **kwargs) -> "HubFiles":
        """A transformers checkpoint repository (config, safetensors or .bin, tokenizer)."""
        required = kwargs.pop("required", (("config.json",), ("*.safetensors", "pytorch_model*.bin")))
        return cls(repo_id, TRANSFORMERS_PATTERNS, required, fallback=BIN_PATTERNS, **kwargs)

    def all_patterns(self) -> tuple[str, ...]:
        return self.patterns + self.fallback

    def missing(self, folder: str) -> list[str]:
        """The required groups (as 'a or b') with no matching file in `folder`."""
        return [" or ".join(group) for group in self.required
                if not any(glob.glob(os.path.join(folder, pattern)) for pattern in group)]

    def prefetch_command(self) -> str:
        """The shell command that fills the cache with these files on a machine with network."""
        return f"hf download {self.repo_id} " + " ".join(f"--include '{p}'" for p in self.patterns)

    def size_text(self) -> str:
        return f"about {self.approx_gb:g} GB" if self.approx_gb else "its files"


def offline(local_files_only: bool = False) -> bool:
    """Whether downloads are off: `local_files_only=True`, or HF_HUB_OFFLINE set (now or when
    huggingface_hub was imported)."""
    from huggingface_hub import constants

    env = os.environ.get(OFFLINE_ENV, "").strip().lower() in _TRUTHY
    return bool(local_files_only) or bool(constants.HF_HUB_OFFLINE) or env


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def cached(files: HubFiles) -> str | None:
    """The cached snapshot folder of `files` when every required file is there; no network."""
    from huggingface_hub import snapshot_download

    try:   # the primary patterns: a repository with safetensors never needs its .bin duplicates
        folder = snapshot_download(files.repo_id, allow_patterns=list(files.patterns), local_files_only=True)
    except Exception:  # not cached, an incomplete snapshot, an unreadable cache: all "not cached"
        return None
    return folder if not files.missing(folder) else None


def fetch(files: HubFiles, *, local_files_only: bool = False, progress: ProgressFn | None = None,
          needed_by: str | None = None) -> str:
    """The local snapshot folder of `files`, downloading what the cache lacks.

    Raises `WeightsNotFoundError` saying why and what to do when the files are not cached and
    cannot be downloaded (offline, missing or gated repository, interrupted transfer).
    """
    folder = cached(files)
    if folder is not None:
        return folder
    who = f"{needed_by} needs" if needed_by else "needed:"
    if offline(local_files_only):
        why = "local_files_only=True" if local_files_only else f"{OFFLINE_ENV}=1"
        raise WeightsNotFoundError(
            f"model: {who} {files.what} from {files.repo_id}, which are not in the Hugging Face cache, "
            f"and downloads are off ({why}). Prefetch them on a machine with network access "
            f"(`{files.prefetch_command()}`) into the same cache (HF_HOME / HF_HUB_CACHE), "
            f"or unset {OFFLINE_ENV} to download {files.size_text()} on first use.")
    folder = _download(files, files.patterns, progress, who)
    if files.missing(folder) and files.fallback:
        folder = _download(files, files.all_patterns(), progress, who)
    gaps = files.missing(folder)
    if gaps:
        raise WeightsNotFoundError(
            f"model: {files.repo_id} on {endpoint()} has no {', '.join(gaps)} "
            f"({who} {files.what}: {', '.join(files.patterns)})")
    return folder


def _download(files: HubFiles, patterns: Sequence[str], progress: ProgressFn | None, who: str) -> str:
    """One `snapshot_download`, its failures turned into messages that say what to do."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    repo, hub = files.repo_id, endpoint()
    kwargs = {"tqdm_class": _reporting_tqdm(progress, repo)} if progress is not None else {}
    if progress is not None:
        progress(0, None, repo)
    try:
        folder = snapshot_download(repo, allow_patterns=list(patterns), **kwargs)
    except GatedRepoError:
        raise WeightsNotFoundError(
            f"model: {repo} is licence-gated ({who} {files.what}). "
            f"{files.licence or f'Accept its terms at {hub}/{repo}'} while logged in, then "
            "log in here (`hf auth login`, or set HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise WeightsNotFoundError(
            f"model: repository {repo} not found on {hub} ({who} {files.what}); if it is private or "
            "gated, log in with `hf auth login` (or set HF_TOKEN) with an account that may read it") from None
    except RevisionNotFoundError as exc:
        raise WeightsNotFoundError(f"model: {repo} has no such revision ({exc})") from None
    except LocalEntryNotFoundError as exc:   # the Hub could not be reached, nothing cached
        raise WeightsNotFoundError(
            f"model: could not reach {hub} to download {repo} ({who} {files.what}): "
            f"{_first_line(exc)}. Check the network, or prefetch on a machine with access "
            f"(`{files.prefetch_command()}`) and set {OFFLINE_ENV}=1 here") from exc
    except HfHubHTTPError as exc:
        raise WeightsNotFoundError(f"model: the Hub refused a file of {repo}: {_first_line(exc)}") from exc
    except Exception as exc:  # the transfer itself: connection dropped, short read, disk full
        raise WeightsNotFoundError(
            f"model: downloading {repo} was interrupted ({type(exc).__name__}: {_first_line(exc)}). "
            "Files already complete are kept in the cache and the partial one was discarded: "
            "run the same command again to resume") from exc
    if progress is not None:
        done = _snapshot_bytes(folder)
        progress(done, done, repo)
    return folder


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _snapshot_bytes(folder: str) -> int:
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def _reporting_tqdm(progress: ProgressFn, repo_id: str):
    """huggingface_hub's tqdm, also telling `progress` the bytes written of the snapshot.

    snapshot_download adds every file's size to the total of the bar it names
    'huggingface_hub.snapshot_download' and advances it as bytes reach the disk; that bar
    (drawn or not: no terminal on a server) is the one reported.
    """
    from huggingface_hub.utils import tqdm as hub_tqdm

    class ReportingTqdm(hub_tqdm):
        def __init__(self, *args, **kwargs):
            self._reports = kwargs.get("name") == "huggingface_hub.snapshot_download"
            self._done = 0
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            result = super().update(n)
            if self._reports and n:
                self._done += int(n)
                progress(self._done, int(self.total) if self.total else None, repo_id)
            return result

    return ReportingTqdm


# ---------------------------------------------------------------------------- checkpoints

def trusted_files(trust_pickle: str | Iterable[str] | None = None) -> list[str]:
    """The files the caller trusts to unpickle: `trust_pickle` plus $SCD_TRUST_PICKLE
    (os.pathsep-separated). Each is a path or a bare file name."""
    names: list[str] = []
    if isinstance(trust_pickle, (str, os.PathLike)):
        names.append(os.fspath(trust_pickle))
    elif trust_pickle is not None:
        try:
            names += [os.fspath(n) for n in trust_pickle]
        except TypeError:
            raise ValueError(f"trust_pickle: expected a file name, a path or a list of them, "
                             f"got {trust_pickle!r}") from None
    names += [n for n in os.environ.get(TRUST_PICKLE_ENV, "").split(os.pathsep) if n.strip()]
    return [n.strip() for n in names if n.strip()]


def is_trusted(path: str, trust_pickle: str | Iterable[str] | None = None) -> bool:
    """True when `path` is named by the caller: a bare name matches the file name, anything
    with a directory part matches the file itself (symlinks resolved)."""
    real = os.path.realpath(path)
    for name in trusted_files(trust_pickle):
        if os.sep in name or (os.altsep and os.altsep in name):
            candidate = os.path.expanduser(name)
            if os.path.realpath(candidate) == real or os.path.abspath(candidate) == os.path.abspath(path):
                return True
        elif name == os.path.basename(path):
            return True
    return False


def mappable(path: str) -> bool:
    """Whether `read_checkpoint(path, mmap=True)` maps the file rather than reading it:
    safetensors (always mapped) and `torch.save`'s zip format."""
    import zipfile

    return path.endswith(".safetensors") or zipfile.is_zipfile(path)


def read_checkpoint(path: str, *, trust_pickle: str | Iterable[str] | None = None,
                    safe_globals: Sequence = (), mmap: bool = False, what: str = "checkpoint"):
    """Load a checkpoint file: safetensors, or `torch.load(weights_only=True)`.

    A file that `weights_only` refuses (pickled training objects: Lightning callbacks,
    optimiser classes, custom configs) is refused with the globals it holds and how to trust
    it; only when `path` is named in `trust_pickle` / $SCD_TRUST_PICKLE is it loaded with
    full pickle. `safe_globals` are extra classes known to be harmless (argparse.Namespace).
    With `mmap` (and always for safetensors) the tensors are views of the mapped file, read
    when first used; an old pickle-format file, which cannot be mapped, is read whole.
    """
    import torch

    if not os.path.isfile(path):
        raise WeightsNotFoundError(f"{what}: no file at {path!r}")
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file
        return load_file(path, device="cpu")
    mmap = mmap and mappable(path)
    try:
        with torch.serialization.safe_globals(list(safe_globals)):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:
        if not _is_unpickling_refusal(exc):
            raise ValueError(f"{what}: {path} is not a readable PyTorch checkpoint ({_first_line(exc)})") from exc
        if is_trusted(path, trust_pickle):
            return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
        held = _unsafe_globals(path) or [_first_line(exc)]
        raise ValueError(
            f"{what}: {path} holds pickled Python objects that torch.load(weights_only=True) refuses "
            f"({', '.join(held)}); loading it would run code from the file. If you trust this file, "
            f"pass trust_pickle={os.path.basename(path)!r} (or its full path) to load_model, or set "
            f"{TRUST_PICKLE_ENV}={path}") from None


def _is_unpickling_refusal(exc: BaseException) -> bool:
    import pickle

    return isinstance(exc, pickle.UnpicklingError) or "weights_only" in str(exc)


def _unsafe_globals(path: str) -> list[str]:
    """The globals a checkpoint needs beyond weights_only's allow-list, read without unpickling."""
    import torch

    finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if finder is None:
        return []
    try:
        return sorted(set(finder(path)))
    except Exception:
        return []


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_hub_id(text: str) -> bool:
    """'org/name' (and no such local path): a Hub repository id."""
    return bool(_HUB_ID.match(text)) and not os.path.exists(text)
