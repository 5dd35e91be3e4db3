"""Downloads on first use, end to end: the real huggingface_hub client against a local fake Hub.

Each load runs in a fresh process with HF_ENDPOINT, HF_HOME and (where asked) HF_HUB_OFFLINE
in its environment, as a user sets them: huggingface_hub reads them when it is imported. The
fake Hub (tests/fakehub.py) serves tiny random checkpoints in the published layouts of
Janus-Pro (transformers) and LlamaGen c2i (FoundationVision/LlamaGen's .pt files), plus files
the adapters must not fetch.
"""
from __future__ import annotations

import argparse
import fractions
import hashlib
from pathlib import Path

import pytest
import torch

import scd_core
from fakehub import FakeHub, client_env, empty_hub_cache, run_client  # noqa: F401
from scd_core.models import gpu_seconds, hub, model_status
from scd_core.models.status import MIN_GPU_SECONDS
from scd_core.models import llamagen as lg
from test_models_janus import save_tiny_checkpoint
from test_models_llamagen import C2I, TINY_VQ

pytestmark = pytest.mark.served

JANUS_REPO = "deepseek-community/Janus-Pro-1B"
LLAMAGEN_REPO = "FoundationVision/LlamaGen"
JANUS = ("janus-pro-1b", {}, "w1 w2")
LLAMAGEN = ("llamagen-c2i", {"n_head": 4}, "3")
DECOYS = {"README.md": b"# a model card\n", ".gitattributes": b"*.safetensors filter=lfs\n",
          "pytorch_model.bin": b"the same weights again, not needed when safetensors exist"}


def llamagen_files(vq_extra: dict | None = None) -> dict[str, bytes]:
    """A tiny c2i GPT and VQ-16 saved as LlamaGen publishes them (torch.save of {'model': ...})."""
    import io

    torch.manual_seed(0)
    gpt, vq = lg.Transformer(C2I), lg.VQModel(**TINY_VQ)
    out = {}
    for name, payload in (("c2i_B_256.pt", {"model": gpt.state_dict(), "steps": 10,
                                            "args": argparse.Namespace(gpt_model="GPT-B")}),
                          ("vq_ds16_c2i.pt", {"model": vq.state_dict(), **(vq_extra or {})})):
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        out[name] = buffer.getvalue()
    return out


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """repo id -> files, as the fake Hub serves them."""
    folder = tmp_path_factory.mktemp("janus-pro-1b")
    save_tiny_checkpoint(folder)
    janus = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    return {JANUS_REPO: {**janus, **DECOYS},
            LLAMAGEN_REPO: {**llamagen_files(), "c2i_L_384.pt": b"another model", "README.md": b"# LlamaGen\n"}}


def serve(hub: FakeHub, published: dict, *repos: str) -> None:
    for repo in repos or published:
        hub.add_repo(repo, published[repo])


def cache_files(home: Path) -> list[Path]:
    return [p for p in (home / "hub").rglob("*") if p.is_file() or p.is_symlink()]


def test_first_load_downloads_what_the_adapter_needs_then_the_cache_answers(published, tmp_path, monkeypatch):
    home = tmp_path / "home"
    with FakeHub() as fake:
        serve(fake, published)
        env = client_env(fake, home)
        first, stderr = run_client(env, JANUS, LLAMAGEN)
        for name, size in (("janus-pro-1b", [8, 8]), ("llamagen-c2i", [32, 32])):
            r = first[name]
            assert r["ok"], r
            assert (r["before"], r["after"]) == ("downloadable", "cached")
            assert r["images"] == 1 and r["size"] == size
            done, total, repo = r["progress"][-1]
            assert done == total > 0 and repo in (JANUS_REPO, LLAMAGEN_REPO)
        needed = set(published[JANUS_REPO]) - set(DECOYS)
        assert fake.fetched(JANUS_REPO) == needed                    # no README, no duplicate .bin
        assert fake.fetched(LLAMAGEN_REPO) == {"c2i_B_256.pt", "vq_ds16_c2i.pt"}
        assert "Fetching" in stderr                                  # huggingface_hub's terminal bars

        asked = len(fake.requests)
        second, _ = run_client(env, JANUS, LLAMAGEN)
        assert len(fake.requests) == asked                           # not one request
        for name in ("janus-pro-1b", "llamagen-c2i"):
            assert second[name]["ok"] and second[name]["before"] == "cached"
            assert second[name]["tokens"] == first[name]["tokens"]   # the same weights decode the same

    # In this process too: the filled cache is "cached", and loads with downloads off.
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert model_status("llamagen-c2i").state == "cached" and scd_core.availability("llamagen-c2i") is None
    model = scd_core.load_model("llamagen-c2i", n_head=4, local_files_only=True)
    assert scd_core.generate(model, ["3"], method="sjd", window=4, seed=0, top_k=20).tokens[0].tolist() \
        == first["llamagen-c2i"]["tokens"]


def test_offline_with_an_empty_cache_says_what_to_do_and_asks_nothing(published, tmp_path):
    with FakeHub() as fake:
        serve(fake, published)
        result, _ = run_client(client_env(fake, tmp_path / "home", HF_HUB_OFFLINE="1"), JANUS)
        assert fake.requests == []
    r = result["janus-pro-1b"]
    assert not r["ok"] and r["is_value_error"] and r["error"] == "WeightsNotFoundError"
    for words in (JANUS_REPO, "HF_HUB_OFFLINE=1", f"hf download {JANUS_REPO}"):
        assert words in r["message"]
    assert r["before"] == r["after"] == "unavailable"


def test_missing_and_gated_repositories_are_named(published, tmp_path):
    with FakeHub() as fake:
        serve(fake, published, LLAMAGEN_REPO)                        # no Janus repository at all
        fake.gated.add(LLAMAGEN_REPO)
        result, _ = run_client(client_env(fake, tmp_path / "home"), JANUS, LLAMAGEN)
    missing, gated = result["janus-pro-1b"], result["llamagen-c2i"]
    assert not missing["ok"] and missing["is_value_error"]
    assert f"repository {JANUS_REPO} not found on http://127.0.0.1:" in missing["message"]
    assert not gated["ok"] and "licence-gated" in gated["message"] and "hf auth login" in gated["message"]
    assert f"/{LLAMAGEN_REPO}" in gated["message"]                  # where to accept the terms
    assert not list((tmp_path / "home" / "hub").rglob("*.safetensors"))


def test_an_interrupted_download_fails_clearly_and_the_next_try_completes(published, tmp_path):
    home = tmp_path / "home"
    with FakeHub() as fake:
        serve(fake, published, JANUS_REPO)
        fake.break_file("model.safetensors")                        # every transfer stops halfway
        env = client_env(fake, home)
        broken, _ = run_client(env, JANUS)
        r = broken["janus-pro-1b"]
        assert not r["ok"] and r["is_value_error"]
        assert "interrupted" in r["message"] and "run the same command again" in r["message"]
        assert r["after"] == "downloadable"                          # a partial snapshot is not "cached"
        assert not [p for p in cache_files(home) if p.name.endswith(".incomplete")]

        fake.repair("model.safetensors")
        healed, _ = run_client(env, JANUS)
        assert healed["janus-pro-1b"]["ok"] and healed["janus-pro-1b"]["after"] == "cached"
    weights = [p for p in cache_files(home) if p.name == "model.safetensors"]
    assert len(weights) == 1
    expected = hashlib.sha256(published[JANUS_REPO]["model.safetensors"]).hexdigest()
    assert hashlib.sha256(weights[0].read_bytes()).hexdigest() == expected


def test_the_prefetch_command_in_messages_fills_the_cache_for_offline_use(published, tmp_path):
    """What an offline machine is told to run (on one with network) is enough to load there."""
    import shlex
    import subprocess
    import sys
    home = tmp_path / "home"
    with FakeHub() as fake:
        serve(fake, published, JANUS_REPO)
        command = scd_core.models.janus.HUB_FILES["janus-pro-1b"].prefetch_command()
        hf = [sys.executable, "-c", "from huggingface_hub.cli.hf import main; main()"]
        done = subprocess.run(hf + shlex.split(command)[1:], env=client_env(fake, home), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert fake.fetched(JANUS_REPO) == set(published[JANUS_REPO]) - set(DECOYS)
        result, _ = run_client(client_env(None, home, HF_HUB_OFFLINE="1"), JANUS)
    assert result["janus-pro-1b"]["ok"] and result["janus-pro-1b"]["before"] == "cached"


# ------------------------------------------------------------ in this process, no server

def test_local_files_only_and_offline_never_download(empty_hub_cache):
    with pytest.raises(scd_core.models.hub.WeightsNotFoundError, match="local_files_only=True") as err:
        scd_core.load_model("llamagen-c2i", local_files_only=True)
    assert ("hf download FoundationVision/LlamaGen --include 'c2i_B_256.pt' --include 'vq_ds16_c2i.pt'"
            in str(err.value))
    status = model_status("janus-pro-1b")
    assert status.state == "unavailable" and "HF_HUB_OFFLINE=1" in status.reason
    assert status.label.startswith("unavailable: ") and status.repos == (JANUS_REPO,)
    assert scd_core.availability("janus-pro-1b") == status.reason
    assert scd_core.load_model("tiny", local_files_only=True, progress=print).grid == (8, 8)   # nothing to fetch
    with pytest.raises(ValueError, match="trust_pickle"):
        scd_core.load_model("janus-pro-1b", trust_pickle="model.safetensors")


def test_status_of_each_kind_of_model(empty_hub_cache, monkeypatch):
    from huggingface_hub import constants
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    tiny = model_status("tiny")
    assert (tiny.state, tiny.usable, tiny.needs_gpu) == ("embedded", True, False)
    janus = model_status("janus-pro-1b")
    assert janus.state == "downloadable" and "about 4.1 GB from deepseek-community/Janus-Pro-1B" in janus.reason
    t2i = model_status("llamagen-t2i")
    assert t2i.repos == ("peizesun/llamagen_t2i", "google/flan-t5-xl")
    cosmos = model_status("cosmos-1-ar-4b")
    assert cosmos.needs_gpu and "nvidia/Cosmos-1.0-Tokenizer-DV8x16x16" in cosmos.repos
    if not torch.cuda.is_available():
        assert (cosmos.state, t2i.state) == ("needs GPU", "needs GPU")
        assert cosmos.label.startswith("needs GPU: ") and not cosmos.usable
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")                    # a ZeroGPU Space attaches a GPU per call
    cosmos = model_status("cosmos-1-ar-4b")
    assert cosmos.state == "downloadable" and "NVIDIA Open Model License" in cosmos.reason
    assert "https://huggingface.co/nvidia/Cosmos-1.0-Autoregressive-4B" in cosmos.reason
    lumina = model_status("lumina-mgpt-7b-512")                      # Meta's VQGAN is not on the Hub
    assert lumina.state == "unavailable" and "chameleon-downloads" in lumina.reason
    assert "SCD_LUMINA_VQGAN" in lumina.reason
    unknown = model_status("no-such-model")
    assert unknown.state == "unavailable" and "unknown model" in unknown.reason


def test_gpu_seconds_grow_with_the_work_and_stay_in_zerogpu_bounds():
    base = gpu_seconds("janus-pro-7b", window=32, samples=1)
    assert gpu_seconds("janus-pro-7b", window=32, samples=4) > base
    assert gpu_seconds("janus-pro-7b", window=32, samples=1, pace=0.05) > base
    assert gpu_seconds("janus-pro-7b", window=1, method="ar") > gpu_seconds("janus-pro-1b", window=1, method="ar")
    assert gpu_seconds("lumina-mgpt-7b-1024", 64, 1) > gpu_seconds("lumina-mgpt-7b-512", 64, 1)
    assert gpu_seconds("cosmos-1-ar-4b", 128, 4) == 300 < gpu_seconds("cosmos-1-ar-4b", 128, 4, clamp=False)
    assert MIN_GPU_SECONDS <= gpu_seconds("tiny", 16, 1) < gpu_seconds("janus-pro-1b", 16, 1)
    for kwargs, says in ((dict(model_name="nope"), "model_name"), (dict(model_name="tiny", window=0), "window"),
                         (dict(model_name="tiny", samples=1.5), "samples"),
                         (dict(model_name="tiny", method=None), "method"),
                         (dict(model_name="tiny", pace=-1.0), "pace")):
        with pytest.raises(ValueError, match=says):
            gpu_seconds(**kwargs)


def test_a_pickled_checkpoint_loads_only_when_that_file_is_trusted(tmp_path, monkeypatch):
    """A checkpoint holding a Python object that weights_only refuses names it, and loads
    only when the caller trusts that one file (argument or SCD_TRUST_PICKLE)."""
    monkeypatch.delenv(hub.TRUST_PICKLE_ENV, raising=False)
    folder = tmp_path / "llamagen"
    folder.mkdir()
    for name, data in llamagen_files({"epoch_fraction": fractions.Fraction(1, 3)}).items():
        (folder / name).write_bytes(data)
    with pytest.raises(ValueError) as err:
        scd_core.load_model(str(folder), n_head=4)
    message = str(err.value)
    assert "fractions.Fraction" in message and "trust_pickle='vq_ds16_c2i.pt'" in message
    assert hub.TRUST_PICKLE_ENV in message
    with pytest.raises(ValueError, match="fractions.Fraction"):
        scd_core.load_model(str(folder), n_head=4, trust_pickle="c2i_B_256.pt")    # another file
    assert scd_core.load_model(str(folder), n_head=4, trust_pickle="vq_ds16_c2i.pt").grid == (16, 16)
    monkeypatch.setenv(hub.TRUST_PICKLE_ENV, str(folder / "vq_ds16_c2i.pt"))
    assert scd_core.load_model(str(folder), n_head=4).grid == (16, 16)
    with pytest.raises(ValueError, match="trust_pickle"):
        hub.trusted_files(42)


def test_hub_files_say_where_each_model_really_lives():
    from scd_core.models import cosmos, emu3, janus, lumina
    assert lg.HUB_FILES["llamagen-t2i"].repo_id == "peizesun/llamagen_t2i"
    assert lg.HUB_FILES["llamagen-c2i"].repo_id == LLAMAGEN_REPO
    assert lg.T5_FILES.repo_id == "google/flan-t5-xl"
    assert janus.HUB_FILES["janus-pro-7b"].repo_id == "deepseek-community/Janus-Pro-7B"
    assert emu3.HUB_FILES["emu3-gen"].repo_id == "BAAI/Emu3-Gen-hf"
    assert lumina.HUB_FILES["lumina-mgpt-7b-768"].repo_id == "Alpha-VLLM/Lumina-mGPT-7B-768"
    assert cosmos.TOKENIZER_FILES.patterns == ("encoder.jit", "decoder.jit")
    assert cosmos.HUB_FILES["cosmos-1-ar-4b"].licence and cosmos.T5_FILES.repo_id == "google-t5/t5-11b"
    files = hub.HubFiles.transformers("org/model")
    assert "*.safetensors" in files.patterns and "pytorch_model*.bin" not in files.patterns
    assert files.fallback == ("pytorch_model*.bin",)
