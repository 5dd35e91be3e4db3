"""scd_core.measure.gpu_timing (`scd-gpu-timing`) on CPU: the --tiny plumbing end to end, and the full-size configs'
parameter counts (built on the meta device, no memory) against the published checkpoints."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import transformers  # noqa: F401  (the script builds transformers configs)
from scd_core.measure import gpu_timing as gt

pytestmark = pytest.mark.drill
MODELS = list(gt.MODELS)
# bf16 as on the GPU: the models are built under a bf16 default dtype there too.
FAST = ["--tiny", "--device", "cpu", "--dtype", "bfloat16", "--windows", "1,4,8", "--repeats", "2",
        "--warmup", "1", "--engine-tokens", "32", "--images", ""]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_timing") / "timing.json"
    import io
    from contextlib import redirect_stdout
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = gt.main(FAST + ["--models", ",".join(MODELS), "--out", str(out)])
    return rc, buf.getvalue(), json.loads(out.read_text())


def test_tiny_run_succeeds_for_every_model(tiny_run):
    rc, _, report = tiny_run
    assert rc == 0
    assert set(report["models"]) == set(MODELS)
    for name, info in report["models"].items():
        assert "error" not in info, (name, info)
        assert info["params"] > 0 and info["context_tokens"] > 0 and info["windows"] == [1, 4, 8]
    env = report["environment"]
    assert env["tiny"] is True and env["device"] == "cpu" and env["dtype"] == "bfloat16"
    assert torch.get_default_dtype() == torch.float32          # restored after building


def test_a_failing_model_is_recorded_and_the_rest_still_run(monkeypatch, tmp_path, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated build failure")
    monkeypatch.setitem(gt.BUILDERS, "janus-pro-7b", broken)
    out = tmp_path / "t.json"
    assert gt.main(FAST + ["--models", "janus-pro-7b,cosmos-1-ar-4b", "--out", str(out)]) == 1
    report = json.loads(out.read_text())
    assert "simulated build failure" in report["models"]["janus-pro-7b"]["error"]
    assert {r["model"] for r in report["rows"]} == {"cosmos-1-ar-4b"}
    assert "janus-pro-7b: FAILED" in capsys.readouterr().out


def test_rows_are_positive_and_ratios_follow_from_the_timings(tiny_run):
    _, _, report = tiny_run
    rows = report["rows"]
    assert {(r["model"], r["L"]) for r in rows} == {(m, L) for m in MODELS for L in (1, 4, 8)}
    for r in rows:
        assert len(r["forward_ms_runs"]) == 2 and all(t > 0 for t in r["forward_ms_runs"])
        assert r["forward_ms"] == pytest.approx(sorted(r["forward_ms_runs"])[0] / 2 + sorted(r["forward_ms_runs"])[1] / 2)
        one = next(x for x in rows if x["model"] == r["model"] and x["L"] == 1)
        assert r["forward_ratio"] == pytest.approx(r["forward_ms"] / one["forward_ms"])
        expected = {"ar"} if r["L"] == 1 else set(gt.METHODS)
        assert set(r["engine_ms"]) == expected and set(r["engine_share"]) == expected
        for m, ms in r["engine_ms"].items():
            assert ms > 0 and math.isfinite(ms)
            assert r["engine_share"][m] == pytest.approx(ms / r["forward_ms"])
        if r["L"] > 1:
            ar = one["forward_ms"] + one["engine_ms"]["ar"]
            for m, ms in r["engine_ms"].items():
                assert r["break_even"][m] == pytest.approx((r["forward_ms"] + ms) / ar)


def test_markdown_table_lists_every_row(tiny_run):
    _, stdout, _ = tiny_run
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header = lines[0]
    for column in ("model", "L", "forward ms", "fwd(L)/fwd(1)", "engine ms/iter scd-mc", "engine share sjd"):
        assert column in header
    assert len(lines) == 2 + 3 * len(MODELS)
    assert any(line.startswith("| cosmos-1-ar-4b | 8 |") for line in lines)


def test_needs_cuda_without_tiny(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gt.main(["--models", "janus-pro-7b"]) == 2
    err = capsys.readouterr().err
    assert "CUDA" in err and "--tiny" in err
    assert gt.main(["--device", "cpu"]) == 2
    assert "--tiny" in capsys.readouterr().err


def test_bad_arguments_are_refused(capsys):
    assert gt.main(FAST + ["--models", "emu3"]) == 2
    assert "--models" in capsys.readouterr().err
    assert gt.main(FAST + ["--windows", "1,x"]) == 2
    assert "--windows" in capsys.readouterr().err


def test_default_out_follows_OUT(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gt.default_out() == tmp_path / "gpu_timing.json"
    monkeypatch.delenv("OUT")
    assert gt.default_out() == Path("bench_out/gpu_timing.json")


@pytest.mark.parametrize("name", MODELS)
def test_full_size_configs_have_the_published_parameter_counts(name):
    count = gt.meta_param_count(name)
    assert count == pytest.approx(gt.PUBLISHED_PARAMS[name], rel=0.01)


def test_full_size_config_shapes():
    janus = gt.janus_config()
    text = janus.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads, text.intermediate_size,
            text.vocab_size) == (4096, 30, 32, 11008, 102400)
    assert janus.vq_config.num_embeddings == 16384 and janus.vision_config.num_image_tokens == 576
    lumina = gt.lumina_config()
    assert (lumina.hidden_size, lumina.num_hidden_layers, lumina.num_attention_heads, lumina.intermediate_size,
            lumina.vocab_size) == (4096, 32, 32, 11008, 65536)
    codes = [v for k, v in lumina.vocabulary_map.items() if k.startswith("IMGIMG")]
    assert sorted(codes) == list(range(4, 4 + 8192))
    cosmos = gt.cosmos_config()
    assert (cosmos.dim, cosmos.n_layers, cosmos.vocab_size, cosmos.grid) == (4096, 16, 64000, (3, 40, 64))


def test_engine_grid_keeps_rows_and_frames():
    assert gt.engine_grid((24, 24), 576) == (24, 24)
    assert gt.engine_grid((48, 48), 576) == (12, 48)
    assert gt.engine_grid((3, 40, 64), 576) == (2, 4, 64)


def test_one_image_per_method_eager_compiled_and_by_transformers(tmp_path, capsys):
    """The per-image timing on the tiny Janus-Pro: transformers' own generate, AR and SCD-MC
    eager, SCD-MC compiled (its compile timed apart), each a full grid, in the table."""
    out = tmp_path / "t.json"
    args = [a for a in FAST if a not in ("--images", "")]
    assert gt.main(args + ["--models", "janus-pro-7b", "--images", "ar,scd-mc", "--compile-methods", "scd-mc",
                           "--dtype", "float32", "--out", str(out)]) == 0
    images = json.loads(out.read_text())["models"]["janus-pro-7b"]["images"]
    assert [(im["how"], im["compiled"]) for im in images] == [("transformers", False), ("ar", False), ("scd-mc", False),
                                                              ("scd-mc", True)]
    grid = 16 * 16
    by = {(im["how"], im["compiled"]): im for im in images}
    assert by[("transformers", False)]["nfe"] == grid and by[("ar", False)]["nfe"] == grid
    assert by[("scd-mc", False)]["nfe"] == by[("scd-mc", True)]["nfe"] < grid      # compiled: the same run
    assert all(im["seconds"] > 0 and im["ms_per_pass"] > 0 for im in images)
    assert by[("scd-mc", True)]["compile_s"] is not None and by[("scd-mc", False)]["compile_s"] is None
    # compiled, the step runs inside the pass's graph: the engine's share is not measurable, said "-"
    assert by[("scd-mc", True)]["engine_share"] is None and 0 < by[("scd-mc", False)]["engine_share"] < 1
    printed = capsys.readouterr().out
    assert "| janus-pro-7b | scd-mc compiled |" in printed
    assert next(line for line in printed.splitlines() if "| scd-mc compiled |" in line).split("|")[7].strip() == "-"
