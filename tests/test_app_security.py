"""Files enter the page only as uploads or as the shipped example clips.

The app is served on loopback and called as an outside API user would (gradio_client, and
raw HTTP for the forms the client would rewrite): every server path given to the clip input
is refused with the page's one-line message, nothing new appears in Gradio's cache, and the
next Generate runs at once. Then Gradio's own behaviour that the design relies on, on a
minimal app with one gr.Video input.
"""
from __future__ import annotations

import os
import time

import httpx
import pytest
from gradio_client import Client

from demo import inputs, layout, uploads
from demo.clips import example_clips

REQUEST = dict(model="texture", method="scd-mc", window=16, prompt="ocean waves", pace=0.0,
               samples=1)
TIMEOUT = 60                      # seconds any one request here may take


def cache_listing() -> set[str]:
    """Every file and folder under Gradio's cache (GRADIO_TEMP_DIR)."""
    root = uploads.upload_folder()
    return {os.path.relpath(os.path.join(d, n), root)
            for d, dirs, files in os.walk(root) for n in dirs + files}


def copied(before: set[str], paths) -> set[str]:
    """What appeared in the cache since `before` under the name of one of `paths` (the cache is
    shared with whatever else runs: other entries may come and go meanwhile)."""
    names = {os.path.basename(p.rstrip("/")) for p in paths} | {"passwd", "environ", "zero", "urandom"}
    return {p for p in cache_listing() - before if os.path.basename(p) in names}


def upload(url: str, path: str) -> str:
    """Upload a file as the page does (POST /gradio_api/upload); the server path it got."""
    with open(path, "rb") as f:
        r = httpx.post(f"{url}gradio_api/upload", files=[("files", (os.path.basename(path), f))],
                       timeout=TIMEOUT)
    r.raise_for_status()
    return r.json()[0]


def generate(client: Client, clip) -> tuple:
    return client.submit(clip=clip, **REQUEST, api_name="/generate").result(timeout=TIMEOUT)


def raw_generate(url: str, clip) -> tuple[bool, str]:
    """/generate over plain HTTP, inputs in the page's order: whether it completed, and the
    reply's text (a refusal before the queue is an HTTP error, one in the event an error event)."""
    data = ["texture", "scd-mc", 16, "random", 1.0, 0, 1.0, 1.0, 0, "ocean waves", 0.0, 1, clip, "",
            None, None]                                        # the history state, the ticket
    r = httpx.post(f"{url}gradio_api/call/generate", json={"data": data}, timeout=TIMEOUT)
    if r.status_code != 200:
        return False, r.text
    with httpx.stream("GET", f"{url}gradio_api/call/generate/{r.json()['event_id']}",
                      timeout=TIMEOUT) as s:
        text = "".join(s.iter_text())
    return "event: complete" in text and "event: error" not in text, text


@pytest.fixture(scope="module")
def client(url):
    return Client(url, verbose=False)


@pytest.fixture(scope="module")
def symlinks():
    """Symlinks planted inside Gradio's upload folder, pointing out of it."""
    folder = os.path.join(uploads.upload_folder(), "planted-links")
    os.makedirs(folder, exist_ok=True)
    links = []
    for target in ("/etc/passwd", "/dev/zero", "/proc/self/environ"):
        link = os.path.join(folder, os.path.basename(target) + ".mp4")
        if not os.path.lexists(link):
            os.symlink(target, link)
        links.append(link)
    return links


def server_paths(symlinks) -> list[str]:
    repo_file = os.path.abspath(layout.__file__)
    return ["/etc/passwd", repo_file, "/proc/self/environ", "/dev/zero", "/dev/urandom",
            os.path.join(uploads.upload_folder(), "..", "..", "etc", "passwd"),
            "../../etc/passwd", *symlinks]


def test_server_paths_are_refused_with_the_message_and_nothing_is_copied(client, url, symlinks):
    before = cache_listing()
    for path in server_paths(symlinks) + [uploads.upload_folder()]:
        start = time.monotonic()
        with pytest.raises(Exception) as refused:
            generate(client, path)
        assert uploads.REFUSED in str(refused.value), path
        assert time.monotonic() - start < TIMEOUT
    assert not copied(before, server_paths(symlinks))
    assert generate(client, None)[0] is not None          # the worker is free: a normal run


def test_server_paths_as_file_payloads_over_http_are_refused_and_not_copied(url, symlinks):
    """The FileData form an API user could send without uploading (gradio_client would upload
    the file from its own disk instead): refused, never copied, nothing hangs."""
    before = cache_listing()
    for path in server_paths(symlinks):
        done, text = raw_generate(url, {"path": path, "meta": {"_type": "gradio.FileData"}})
        assert not done and "root:" not in text, path                # refused, nothing read back
    assert not copied(before, server_paths(symlinks))
    assert raw_generate(url, "")[0]


def test_an_upload_is_accepted_and_one_over_the_limit_is_refused_with_the_limit(
        client, url, tmp_path, monkeypatch):
    clip = tmp_path / "big.mp4"
    clip.write_bytes(b"\0" * 20_000)
    path = upload(url, str(clip))
    assert generate(client, path)[0] is not None          # texture ignores the clip
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 10_000)
    with pytest.raises(Exception, match="the limit is 9.77 kB"):
        generate(client, path)


def test_the_example_clips_are_the_only_files_outside_the_upload_folder_accepted():
    examples = example_clips()
    assert uploads.clip_file(examples[0], examples) == os.path.realpath(examples[0])
    outside = os.path.join(os.path.dirname(examples[0]), "other.mp4")
    for value in (outside, 3, {"path": examples[0]}, "x\0y"):
        with pytest.raises(ValueError, match="only a video uploaded"):
            uploads.clip_file(value, examples)
    assert uploads.clip_file("", examples) is None and uploads.clip_file(None) is None


# ---------------------------------------------------------- Gradio's behaviour, minimal app

@pytest.fixture(scope="module")
def minimal():
    """A gr.Blocks app with one gr.Video input, served on loopback."""
    import gradio as gr

    with gr.Blocks() as blocks:
        video, out = gr.Video(sources=["upload"]), gr.Textbox()
        gr.Button().click(lambda v: v, video, out, api_name="go")
    blocks.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        yield blocks.local_url
    finally:
        blocks.close()


def test_gradio_copies_a_path_only_as_the_clients_own_upload(minimal):
    """What Gradio does with a server path on a Video input. gradio_client uploads a FileData
    path from the caller's disk (on loopback, the server's /etc/passwd lands in the cache as a
    plain upload); a raw request naming the path is refused by Gradio's upload-folder check.
    The day either changes, revisit demo/uploads.py: the page's own check is what keeps the
    decoding events from reading any file but an upload or an example clip."""
    from gradio_client import handle_file

    got = Client(minimal, verbose=False).predict(handle_file("/etc/passwd"), api_name="/go")
    root = uploads.upload_folder()
    assert os.path.commonpath([os.path.realpath(got), root]) == root and \
        open(got, "rb").read() == open("/etc/passwd", "rb").read(), \
        "gradio_client no longer uploads the caller's file: revisit demo/uploads.py"
    r = httpx.post(f"{minimal}gradio_api/call/go",
                   json={"data": [{"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}]})
    with httpx.stream("GET", f"{minimal}gradio_api/call/go/{r.json()['event_id']}",
                      timeout=TIMEOUT) as s:
        text = "".join(s.iter_text())
    assert "event: error" in text and "root:" not in text, \
        "Gradio now reads server paths given to a Video: the page's check (demo/uploads.py) " \
        "is the only guard left"


def test_messages_to_the_visitor_carry_no_server_path():
    text = "could not load model 'x': No such file: '/root/.cache/huggingface/hub/m/b.safetensors'"
    assert uploads.without_paths(text) == "could not load model 'x': No such file: 'b.safetensors'"
    kept = "see https://huggingface.co/nvidia/Cosmos, top-k 3/4, tokenizer/vqgan.ckpt"
    assert uploads.without_paths(kept) == kept
    refused = inputs.problems(dict(model="texture", method="scd-mc", window=16, init="random", temperature=1.0,
                                top_k=0, top_p=1.0, cfg=1.0, seed=0, prompt="x", clip="/etc/passwd"))
    assert refused == {"clip": uploads.REFUSED}


def test_a_runs_pictures_are_served_from_the_pages_folder_and_not_copied_into_the_cache(url):
    """The pictures a run shows are served in place from the page's own folder, swept there
    (demo.picture_files); none is copied into Gradio's cache, whose sweep can stop."""
    from demo import picture_files

    before = cache_listing()
    plain = Client(url, verbose=False, download_files=False)
    picture = plain.submit(clip=None, **REQUEST, api_name="/generate").result(timeout=TIMEOUT)[0]
    path = os.path.realpath(picture["path"])
    assert os.path.dirname(path) == os.path.realpath(picture_files.FILES.folder), path
    assert httpx.get(picture["url"], timeout=TIMEOUT).content == open(path, "rb").read()
    assert not copied(before, [str(p) for p in picture_files.FILES.folder.iterdir()])   # nor any picture shown before it
