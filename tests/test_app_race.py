"""The race, the lossless view and the texture/tiny ratios through the served page
(gradio_client): the race's two times are present and labelled per method, and its NFE are
the benchmark's for the same settings. Whether SCD-MC's one image beats AR's is a timing
claim, measured by `python -m bench race-timing`, not asserted here."""
from __future__ import annotations

import re
import statistics

import pytest
from gradio_client import Client

import scd_core
from demo import checks, race_view
from scd_core import bench_rows, race
from test_app import args

pytestmark = pytest.mark.served

HEADS = ("one image: seconds (vs AR)", "batch of K: images/s (vs AR)")


@pytest.fixture(scope="module")
def client(url):
    return Client(url, verbose=False)


def cells(html: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", re.sub(r"</?span[^>]*>", "", html))    # a range's box: its words
    return [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r) for r in rows]


def test_the_race_on_texture_gives_both_times_labelled_and_the_benchs_nfe(client):
    job = client.submit(**args(samples=3), api_name="/race")
    job.result(timeout=600)
    outputs = job.outputs()
    final = outputs[-1]
    table = next(v for v in final if isinstance(v, str) and "race-table" in v)
    rows = cells(table)
    head, body = rows[0], {r[0]: r for r in rows[1:]}
    assert all(h in head for h in HEADS)
    one, batch = head.index(HEADS[0]), head.index(HEADS[1])
    assert set(body) == {"AR", "SJD", "SCD maximal coupling", "SCD Gumbel coupling"}
    for row in body.values():                       # the median over the rounds, its range, vs AR
        assert re.fullmatch(r"\d+\.\d\d s( \(\d+\.\d\d–\d+\.\d\d\))? · \d+\.\d\dx", row[one]), row[one]
        assert re.fullmatch(r"\d+\.\d/s( \(\d+\.\d–\d+\.\d\))? · \d+\.\d\dx", row[batch]), row[batch]
    note = next(v for v in final if isinstance(v, str) and "**One image**" in v)
    assert "on CPU" in note and f"median of {race.TIMING_ROUNDS} rounds" in note
    assert any("--seeds 1 --batch 3" in str(v) for v in final)        # the benchmark's commands apart
    assert any("**Done** on **texture**." in str(v) for v in final)   # the table comes with Done.
    texture = scd_core.load_model("texture")                         # the bench, same settings
    for label, method in (("AR", "ar"), ("SJD", "sjd"), ("SCD maximal coupling", "scd-mc")):
        runs = bench_rows.run_case(texture, ["ocean waves"], 3, 1, scd_core.Settings(method, 16))
        shown = body[label][head.index("NFE: mean (min–max)")]
        assert float(shown.split()[0]) == pytest.approx(statistics.fmean(r.nfe for r in runs), abs=0.05)


def test_the_race_shows_pictures_while_a_method_decodes(client):
    job = client.submit(**args(samples=2), api_name="/race")
    job.result(timeout=600)
    updates = job.outputs()
    done_at = next(i for i, u in enumerate(updates) if any("**Done** on" in str(v) for v in u))
    decoding = [u for u in updates[:done_at] if any("Decoding **" in str(v) for v in u)]
    assert decoding and any(u[0] is not None for u in decoding)      # AR's panel before Done.


def test_the_lossless_view_through_the_page(client):
    core = {k: v for k, v in args().items() if k in checks.CORE_INPUTS}      # by name, as the page's
    out = client.predict(**core, lossless_samples=32, api_name="/lossless")
    status, summary = out[0], out[1]
    assert "Done" in status and "32 samples of AR and 32 of SCD maximal coupling" in summary
    assert "576/576 equal" in summary and "p-value" in summary
    from demo import config
    from scd_core.models import static

    pool = static.buffers_of(config.MODELS.loaded("texture"))      # the comparison ran in this process
    assert pool.held_bytes() == pool.idle_bytes() == 0             # and its buffers were not kept


def test_one_click_gives_texture_and_tinys_ratios(client):
    text = client.predict(api_name="/ratios")
    assert "`texture`" in text and "`tiny`" in text and "SJD / SCD-MC" in text
    for model in ("texture", "tiny"):
        p = race_view.shipped_passes(model)
        assert f"**{p['sjd'] / p['scd-mc']:.2f}x**" in text


def test_ratios_come_from_the_shipped_tables():
    p = race_view.shipped_passes("texture")
    assert p["ar"] == 576 and 100 < p["scd-mc"] < p["sjd"] < 576
