"""A local stand-in for the Hugging Face Hub: the real huggingface_hub client downloads from it.

`FakeHub` serves repositories (file path -> bytes) over HTTP on 127.0.0.1 at a free port and
answers what huggingface_hub asks while it downloads a snapshot:

- GET  /api/models/{repo}/revision/{rev}     repo info: {"id", "sha", "siblings"}
- GET  /api/models/{repo}/tree/{rev}         the file list: type, path, size, oid, lfs
- HEAD /{repo}/resolve/{rev}/{path}          small files: 200 with ETag (the git blob id),
                                             X-Repo-Commit, Content-Length. LFS files
                                             (binaries): 302 to a "CDN" on another host name
                                             (localhost), with X-Linked-Etag (sha256),
                                             X-Linked-Size and X-Repo-Commit, as the Hub does
- GET  /{repo}/resolve/{rev}/{path}          small files' bytes
- GET  /cdn/{sha256}                         LFS bytes, with Range requests (206)

A repository not served answers 404 `X-Error-Code: RepoNotFound`, a gated one 401
`GatedRepo`, a missing file 404 `EntryNotFound`. `break_file(path)` makes every transfer of
that file stop halfway (the server closes the connection); `repair(path)` undoes it. Every
request is recorded in `requests` as (method, path). A file is bytes, or a `Path` read from
disk in pieces when served (`add_folder(..., on_disk=True)`: checkpoints of many gigabytes).

Run as a script (`python tests/fakehub.py load NAME ...`), it is the client side of the tests:
it loads registry models in a fresh process, so that HF_ENDPOINT / HF_HOME / HF_HUB_OFFLINE
are set before huggingface_hub is imported, as a user sets them, and prints one JSON line.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
LFS_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".jit")
PIECE = 8 * 2**20                                     # bytes read from disk at a time


def pieces(data: bytes | Path, start: int = 0, stop: int | None = None):
    """The bytes [start, stop) of a file, in pieces of at most PIECE bytes."""
    if isinstance(data, bytes):
        yield data[start:stop]
        return
    stop = data.stat().st_size if stop is None else stop
    with open(data, "rb") as f:
        f.seek(start)
        while start < stop:
            piece = f.read(min(PIECE, stop - start))
            if not piece:
                return
            start += len(piece)
            yield piece


class Blob:
    """A served file's size and digests (the git blob id and the LFS sha256), computed once."""

    def __init__(self, data: bytes | Path) -> None:
        self.data = data
        self.size = len(data) if isinstance(data, bytes) else data.stat().st_size
        sha1, sha256 = hashlib.sha1(b"blob %d\0" % self.size), hashlib.sha256()
        for piece in pieces(data):
            sha1.update(piece)
            sha256.update(piece)
        self.oid, self.sha256 = sha1.hexdigest(), sha256.hexdigest()


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes | Path]] = {}
        self._blobs: dict[tuple[str, str], Blob] = {}
        self.gated: set[str] = set()
        self.broken: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.cdn = f"http://localhost:{self.port}"       # another host name: not followed on HEAD
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- content ---------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, bytes | Path]) -> None:
        self.repos[repo_id] = dict(files)
        self._blobs.update({(repo_id, path): Blob(data) for path, data in files.items()})

    def add_folder(self, repo_id: str, folder: Path, extra: dict[str, bytes] | None = None,
                   on_disk: bool = False) -> None:
        """Serve the files under `folder` (read now, or from disk when asked with `on_disk`)."""
        files = {p.relative_to(folder).as_posix(): p if on_disk else p.read_bytes()
                 for p in sorted(folder.rglob("*")) if p.is_file()}
        self.add_repo(repo_id, {**files, **(extra or {})})

    def blob(self, repo_id: str, path: str) -> Blob:
        return self._blobs[(repo_id, path)]

    def commit(self, repo_id: str) -> str:
        digest = hashlib.sha1()
        for path in sorted(self.repos[repo_id]):
            digest.update(path.encode() + b"\0" + bytes.fromhex(self.blob(repo_id, path).sha256))
        return digest.hexdigest()

    def break_file(self, path: str) -> None:
        self.broken.add(path)

    def repair(self, path: str) -> None:
        self.broken.discard(path)

    def fetched(self, repo_id: str) -> set[str]:
        """The files of `repo_id` whose bytes were requested (resolve GETs and CDN GETs)."""
        by_sha = {self.blob(repo_id, p).sha256: p for p in self.repos.get(repo_id, {})}
        out = set()
        for method, path in self.requests:
            if method != "GET":
                continue
            m = re.match(rf"/{re.escape(repo_id)}/resolve/[^/]+/(.+)$", path)
            if m:
                out.add(unquote(m.group(1)))
            m = re.match(r"/cdn/([0-9a-f]{64})$", path)
            if m and m.group(1) in by_sha:
                out.add(by_sha[m.group(1)])
        return out

    @staticmethod
    def is_lfs(path: str) -> bool:
        return path.endswith(LFS_SUFFIXES)


def _handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:   # quiet
            pass

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        # -- routing -----------------------------------------------------------
        def _route(self, head: bool) -> None:
            path = urlparse(self.path).path
            with hub._lock:
                hub.requests.append((self.command, path))
            m = re.match(r"^/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)$", path)
            if m:
                return self._api(m.group(1), m.group(2))
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                return self._resolve(m.group(1), unquote(m.group(3)), head)
            m = re.match(r"^/cdn/([0-9a-f]{64})$", path)
            if m:
                return self._cdn(m.group(1), head)
            self._send(404, b"not found")

        def _repo(self, repo_id: str) -> dict[str, bytes | Path] | None:
            if repo_id not in hub.repos:
                self._send(404, b"Repository not found", {"X-Error-Code": "RepoNotFound",
                                                          "X-Error-Message": "Repository not found"})
                return None
            if repo_id in hub.gated:
                self._send(401, b"Access to this model is restricted", {"X-Error-Code": "GatedRepo",
                                                                       "X-Error-Message": "gated"})
                return None
            return hub.repos[repo_id]

        def _api(self, repo_id: str, what: str) -> None:
            files = self._repo(repo_id)
            if files is None:
                return
            sha = hub.commit(repo_id)
            if what == "revision":
                body = {"id": repo_id, "sha": sha, "private": False, "gated": False,
                        "siblings": [{"rfilename": p} for p in sorted(files)]}
            else:
                body = []
                for p in sorted(files):
                    blob = hub.blob(repo_id, p)
                    entry = {"type": "file", "path": p, "size": blob.size, "oid": blob.oid}
                    if hub.is_lfs(p):
                        entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": 134}
                    body.append(entry)
            self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

        def _resolve(self, repo_id: str, path: str, head: bool) -> None:
            files = self._repo(repo_id)
            if files is None:
                return
            commit = {"X-Repo-Commit": hub.commit(repo_id)}
            if path not in files:
                self._send(404, b"Entry not found", {**commit, "X-Error-Code": "EntryNotFound"})
                return
            blob = hub.blob(repo_id, path)
            if hub.is_lfs(path):
                self._send(302, b"", {**commit, "Location": f"{hub.cdn}/cdn/{blob.sha256}",
                                      "X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size),
                                      "ETag": f'"{blob.oid}"'})
                return
            self._send(200, b"" if head else blob.data, {**commit, "ETag": f'"{blob.oid}"'}, length=blob.size)

        def _cdn(self, sha: str, head: bool) -> None:
            found = [(p, blob) for (_, p), blob in hub._blobs.items() if blob.sha256 == sha]
            if not found:
                self._send(404, b"no such object")
                return
            path, blob = found[0]
            start = 0
            m = re.match(r"bytes=(\d+)-", self.headers.get("Range", ""))
            if m:
                start = int(m.group(1))
            status = 206 if start else 200
            headers = {"Content-Range": f"bytes {start}-{blob.size - 1}/{blob.size}"} if start else {}
            length = blob.size - start
            if head:
                self._send(status, b"", headers, length=length)
                return
            if path in hub.broken:                  # stop halfway: the client sees a short body
                half = blob.size // 2
                self._send(status, blob.data, headers, length=length, cut=True, span=(start, max(start, half)))
                return
            self._send(status, blob.data, headers, length=length, span=(start, blob.size))

        def _send(self, status: int, body: bytes | Path, headers: dict | None = None, length: int | None = None,
                  cut: bool = False, span: tuple[int, int] | None = None) -> None:
            """Send `body` (bytes [span) of it when given), announcing `length` bytes."""
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            if cut:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                for piece in pieces(body, *(span or (0, None))):
                    self.wfile.write(piece)
            if cut:
                self.wfile.flush()
                self.close_connection = True

    return Handler


# ------------------------------------------------------------------ the client side

def client_env(hub: FakeHub | None, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a fresh process downloading from `hub` into the cache under `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "SCD_"))}
    env.update(HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_UPDATE_CHECK="1",
               PYTHONPATH=str(REPO_ROOT), SCD_TEST_THREADS="1", OMP_NUM_THREADS="1",
               TQDM_POSITION="-1")                     # progress bars on, even without a terminal
    if hub is not None:
        env["HF_ENDPOINT"] = hub.url
    env.update(extra)
    return env


def run_client(env: dict[str, str], *loads: tuple[str, dict, str], timeout: float = 240) -> tuple[dict, str]:
    """Load and decode each (name, load kwargs, prompt) in a new process: (results, stderr)."""
    spec = json.dumps([list(x) for x in loads])
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), spec], env=env, cwd=str(REPO_ROOT),
                          capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"client failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):]), proc.stderr


def _client_main(spec: str) -> None:
    import torch

    torch.set_num_threads(1)
    import scd_core
    from scd_core.models import model_status

    results = {}
    for name, kwargs, prompt in json.loads(spec):
        calls: list[tuple] = []
        out = {"before": model_status(name).state}
        try:
            model = scd_core.load_model(name, device="cpu", progress=lambda *a: calls.append(a), **kwargs)
            run = scd_core.generate(model, [prompt], method="sjd", window=4, seed=0, top_k=20)
            out.update(ok=True, tokens=run.tokens[0].tolist(), images=len(run.images),
                       size=list(run.images[0].size))
        except Exception as exc:
            out.update(ok=False, error=type(exc).__name__, message=str(exc),
                       is_value_error=isinstance(exc, ValueError))
        out.update(after=model_status(name).state, progress=[list(c) for c in calls])
        results[name] = out
    print("RESULT " + json.dumps(results), flush=True)


# ------------------------------------------------------------------ in-process fixture

@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    """Downloads off (HF_HUB_OFFLINE=1, read when each load starts) and an empty Hugging Face
    cache (huggingface_hub reads `constants.HF_HUB_CACHE` at every call)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return tmp_path / "hf-cache"


if __name__ == "__main__":
    _client_main(sys.argv[1])
