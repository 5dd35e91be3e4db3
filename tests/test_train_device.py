"""`--device` of the trainers, on the CPU: runs, resumes exactly, rejects bad values clearly.

Checkpoints hold CPU tensors and load onto whatever device the model is on; these tests
cannot exercise a GPU (there is none here), only the CPU path and the argument handling.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from scd_core.train import common

FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
EMOJI_TEST = Path("/usr/share/unicode/emoji/emoji-test.txt")
needs_font = pytest.mark.skipif(not (FONT.exists() and EMOJI_TEST.exists()),
                                reason="needs fonts-noto-color-emoji and unicode-data")

COMMON = ["--threads", "1", "--eval-every", "1", "--device", "cpu"]
PRIOR = ["--batch", "2", "--d-model", "32", "--layers", "1", "--heads", "2", "--dropout", "0"]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    """A rendered 8-emoji dataset (`d`), a one-step tokenizer (`vq`) and its tokens (`t`)."""
    from scd_core.train import data, tokenizer, tokens

    root = tmp_path_factory.mktemp("device")
    entries = data.read_emoji_test(str(EMOJI_TEST))
    picked = ([e for e in entries if data.is_held_out(e.name)][:2]
              + [e for e in entries if not data.is_held_out(e.name)][:6])
    images, bigs, kept = data.render_all(picked, 32, str(FONT))
    data.save_dataset(root / "d", images, bigs, kept)
    tokenizer.main(["--data", str(root / "d"), "--ckpt", str(root / "vq"), "--steps", "1", "--batch", "4"] + COMMON)
    tokens.main(["--data", str(root / "d"), "--vq", str(root / "vq"), "--out", str(root / "t"), "--frames", "6"])
    return root


def run_tokenizer(root: Path, ckpt: Path, steps: int) -> None:
    from scd_core.train import tokenizer

    tokenizer.main(["--data", str(root / "d"), "--ckpt", str(ckpt), "--steps", str(steps), "--batch", "4"] + COMMON)


def run_prior(root: Path, ckpt: Path, steps: int) -> None:
    from scd_core.train import prior

    prior.main(["--kind", "image", "--tokens", str(root / "t"), "--ckpt", str(ckpt), "--steps", str(steps)]
               + PRIOR + COMMON)


def assert_same_checkpoint(a: Path, b: Path) -> None:
    first, second = load_file(str(a) + ".safetensors"), load_file(str(b) + ".safetensors")
    assert first.keys() == second.keys()
    assert all(v.device.type == "cpu" for v in first.values())
    different = [k for k in first if not torch.equal(first[k], second[k])]
    assert not different, different


@needs_font
@pytest.mark.parametrize("run", [run_tokenizer, run_prior], ids=["tokenizer", "prior"])
def test_cpu_resume_equals_an_uninterrupted_run(tiny_data, tmp_path, capsys, run):
    run(tiny_data, tmp_path / "straight", 2)
    header = capsys.readouterr().out.splitlines()[0]
    assert "device cpu" in header
    run(tiny_data, tmp_path / "resumed", 1)
    run(tiny_data, tmp_path / "resumed", 2)
    assert "resumed from" in capsys.readouterr().out
    record = json.loads((tmp_path / "resumed.json").read_text())
    assert record["step"] == 2 and record["args"]["device"] == "cpu"
    assert_same_checkpoint(tmp_path / "straight", tmp_path / "resumed")


@needs_font
def test_a_resumed_prior_keeps_its_last_held_out_nll_until_the_next_evaluation(tiny_data, tmp_path):
    from scd_core.train import prior

    args = ["--kind", "image", "--tokens", str(tiny_data / "t"), "--ckpt", str(tmp_path / "p")] + PRIOR + COMMON
    args[args.index("--eval-every") + 1] = "100"
    prior.main(args + ["--steps", "1"])                              # evaluates at its last step
    first = json.loads((tmp_path / "p.json").read_text())
    assert first["val_step"] == 1 and first["val_nll"] > 0
    prior.main(args + ["--steps", "4", "--stop-at", "2"])              # resumes, saves at 2, no evaluation
    second = json.loads((tmp_path / "p.json").read_text())
    assert second["step"] == 2
    assert (second["val_nll"], second["val_step"]) == (first["val_nll"], 1)


def test_load_checkpoint_puts_optimizer_state_on_the_model_device(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    gen = torch.Generator().manual_seed(5)
    common.save_checkpoint(tmp_path / "c", model, opt, gen, 1, {})
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    fresh_gen = torch.Generator()
    assert common.load_checkpoint(tmp_path / "c", fresh, fresh_opt, fresh_gen)["step"] == 1
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh_gen.get_state(), gen.get_state())
    for param in fresh.parameters():
        state = fresh_opt.state[param]
        assert state["exp_avg"].device == param.device and state["exp_avg_sq"].device == param.device
        assert torch.is_tensor(state["step"]) and state["step"].item() == 1


def test_parse_device_accepts_cpu_and_rejects_nonsense():
    import argparse

    assert common.parse_device("cpu") == "cpu"
    assert common.default_device() in ("cpu", "cuda")
    for bad in ("gpu0", "cuda:x", "meta"):
        with pytest.raises(argparse.ArgumentTypeError):
            common.parse_device(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_parse_device_rejects_cuda_without_a_gpu():
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="CUDA is not available"):
        common.parse_device("cuda")


@pytest.mark.parametrize("trainer", ["tokenizer", "prior"])
@pytest.mark.parametrize("bad", ["gpu0", "npu"])
def test_bad_device_is_a_usage_error_naming_the_option(tmp_path, capsys, trainer, bad):
    import importlib

    main = importlib.import_module(f"scd_core.train.{trainer}").main
    with pytest.raises(SystemExit) as exit_info:
        main(["--ckpt", str(tmp_path / "never"), "--device", bad])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--device" in err and bad in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())
