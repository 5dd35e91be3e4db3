"""A model's long-lived buffers (`scd_core.models.static.Buffers`): lent to one session at a
time, reset and lent again to the next session of the same shapes, never shared by two live
sessions, and bounded: what a model keeps between runs is capped (`scd_core.memory.idle_cap`),
and a server whose rows join and leave borrows the buffers it had again instead of growing."""
from __future__ import annotations

import gc

import pytest
import torch

import scd_core
from scd_core import memory
from scd_core.models import static
from scd_core.serve import Scheduler


class Owner:
    """Something that borrows (a session stands in)."""


SPECS = [((2, 3), torch.float32), ((2,), torch.long)]
SET_BYTES = 2 * 3 * 4 + 2 * 8


def test_a_set_is_lent_to_one_owner_reset_and_lent_again_once_its_owner_is_gone():
    import torch._dynamo                                      # loaded: the CPU's tensors are marked too

    pool = static.Buffers()
    a, b = Owner(), Owner()
    mine = pool.zeros(a, SPECS, "cpu")
    mine[0].fill_(7.0)
    theirs = pool.zeros(b, SPECS, "cpu")                      # a still holds its set: another one
    assert theirs[0] is not mine[0] and pool.held_bytes() == 2 * SET_BYTES and pool.idle_bytes() == 0
    first = mine[0]
    del a, mine
    c = Owner()
    again = pool.zeros(c, SPECS, "cpu")                       # a is gone: its set, zeroed
    assert again[0] is first and float(again[0].abs().sum()) == 0.0
    assert torch._dynamo.utils.get_static_address_type(again[0]) is not None       # static (marked)
    pool.give_back(theirs)
    assert pool.idle_bytes() == SET_BYTES
    moved = pool.holding(b, [torch.ones(2, 3), torch.arange(2)], old=[])
    assert moved[0] is theirs[0] and torch.equal(moved[1], torch.arange(2))


def test_free_sets_past_the_idle_cap_are_dropped_the_least_recently_lent_first():
    pool = static.Buffers(idle_cap=SET_BYTES)
    owners = [Owner() for _ in range(3)]
    sets = [pool.zeros(o, SPECS, "cpu") for o in owners]
    assert pool.held_bytes() == 3 * SET_BYTES
    for s in sets:
        pool.give_back(s)
    assert pool.idle_bytes() == pool.held_bytes() == SET_BYTES               # one kept: the last lent
    assert pool.zeros(Owner(), SPECS, "cpu")[0] is sets[2][0]
    assert static.Buffers(idle_cap=0).zeros(Owner(), SPECS, "cpu") is not None


def test_a_finished_session_in_a_reference_cycle_gives_its_buffers_back():
    pool = static.Buffers()
    owner = Owner()
    owner.me = owner                                        # freed only by the collector
    first = pool.zeros(owner, SPECS, "cpu")[0]
    del owner
    gc.disable()
    try:
        assert pool.zeros(Owner(), SPECS, "cpu")[0] is first
    finally:
        gc.enable()


@pytest.fixture(scope="module")
def tiny():
    return scd_core.load_model("tiny")


def test_two_live_sessions_of_one_shape_never_share_buffers(tiny):
    """Interleaved sessions of the same prompts give what each gives alone."""
    tokens = torch.randint(0, 512, (2, 6), generator=torch.Generator().manual_seed(0))
    zero = torch.zeros(1, dtype=torch.long)
    alone = [tiny.start(["red heart"], 3.0).step(tokens[r: r + 1], zero) for r in range(2)]
    first, second = tiny.start(["red heart"], 3.0), tiny.start(["red heart"], 3.0)
    first.step(tokens[:1, :3], zero)
    second.step(tokens[1:, :3], zero)
    out = [first.step(tokens[:1], zero), second.step(tokens[1:], zero)]
    assert first.cache[0][0].data_ptr() != second.cache[0][0].data_ptr()
    for got, want in zip(out, alone):
        torch.testing.assert_close(got, want)


def test_a_models_buffers_are_measured_and_bounded_by_its_idle_cap(monkeypatch):
    """One run holds its session's buffers (tiny: every layer's keys and values for the guided
    pair of rows, its position table and slot positions), borrowed again by the next run of
    that shape; runs of other batch sizes keep no more idle than the cap."""
    model = scd_core.load_model("tiny")
    one = static.buffers_of(model)
    scd_core.generate(model, ["red heart"], seed=0, window=8, cfg_scale=3.0)
    cfg, slots = model.gpt.cfg, model.gpt.cfg.n_tokens + 2                     # positions 0..N, a scratch slot
    cache = 2 * cfg.n_layers * 2 * slots * cfg.d_model * 4                      # k, v; layers; 2 rows; float32
    tables = (cfg.n_tokens + 1) * cfg.d_model * 4 + slots * 8
    assert one.held_bytes() == one.idle_bytes() == cache + tables == 1_148_432
    held = one.held_bytes()
    scd_core.generate(model, ["cat face"], seed=1, window=8, cfg_scale=3.0)
    assert one.held_bytes() == held                                            # borrowed again, nothing new

    monkeypatch.setenv(memory.IDLE_ENV, str(held))
    capped = scd_core.load_model("tiny")
    pool = static.buffers_of(capped)
    assert pool.idle_cap == held
    for rows in (1, 2, 3, 1):
        scd_core.generate(capped, ["red heart"] * rows, seed=0, window=8)
        assert pool.idle_bytes() <= held
    monkeypatch.setenv(memory.IDLE_ENV, "-1")
    with pytest.raises(ValueError, match="SCD_IDLE_BYTES"):
        memory.idle_cap(capped)


def test_a_server_borrows_its_buffers_again_as_rows_join_and_leave(tiny):
    """The same pattern of joins and leaves twice: the second allocates nothing."""
    scheduler = Scheduler(tiny, method="scd-mc", window=6, cfg_scale=3.0, max_batch=4)
    pool = static.buffers_of(tiny)

    def serve() -> None:
        requests = []
        for joining in (2, 0, 1, 0, 2, 0, 0, 1):
            requests += [scheduler.submit("red heart", seed=len(requests)) for _ in range(joining)]
            scheduler.step()
        while scheduler.busy:
            scheduler.step()
        assert all(r.result().tokens.shape == (1, 64) for r in requests)

    serve()
    held = pool.held_bytes()
    serve()
    assert pool.held_bytes() == held


def test_a_models_buffers_go_with_the_model():
    """Nothing but the model keeps its buffers: dropped, the model takes them along (a page
    that unloads a model gets their memory back)."""
    import weakref

    model = scd_core.load_model("texture", grid=(6, 6))
    scd_core.generate(model, ["ocean waves"], seed=0)
    held = weakref.ref(static.buffers_of(model))
    assert held().held_bytes() > 0
    del model
    gc.collect()
    assert held() is None


def test_drop_idle_gives_back_every_free_set_and_keeps_the_lent_ones():
    pool = static.Buffers()
    kept, gone = Owner(), Owner()
    mine = pool.zeros(kept, SPECS, "cpu")
    pool.zeros(gone, SPECS, "cpu")
    del gone
    assert pool.idle_bytes() == SET_BYTES
    assert pool.drop_idle() == SET_BYTES
    assert pool.idle_bytes() == 0 and pool.held_bytes() == SET_BYTES
    other = Owner()
    assert pool.zeros(other, SPECS, "cpu")[0] is not mine[0]          # dropped: a new set, not the lent one
    assert pool.drop_idle() == 0 and pool.held_bytes() == 2 * SET_BYTES


EAGER_THEN_COMPILER = """
import sys, scd_core
from scd_core.testing import check_static_writes
model = scd_core.load_model("tiny")
scd_core.generate(model, ["a red ball"], method="scd-mc", window=6, seed=0)   # its buffers are kept for the next run
loaded = "torch._dynamo" in sys.modules
print(loaded, check_static_writes(model, ["a red ball"], 1.0))     # the next run, compiled, gets them
"""


def test_an_eager_run_on_the_cpu_leaves_the_compiler_unloaded_and_a_compiled_run_marks_its_buffers():
    """Loading torch's compiler costs a process about 67 MB: an eager run on the CPU (the page's
    Lossless comparison) does not load it (`static.mark`), and a compiled run's buffers are
    static all the same, those made before it was loaded and lent again included."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", EAGER_THEN_COMPILER], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded, graphs = out.stdout.split()[-2:]
    assert loaded == "False" and int(graphs) >= 1
