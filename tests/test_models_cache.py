"""The model cache: one load per model and process, thread-safe, one large model resident.

Memory is measured as the bytes of the tensors alive in the process: loading a second large
model after a first must not hold both.
"""
from __future__ import annotations

import argparse
import gc
import threading
import time
import weakref

import pytest
import torch

import scd_core
from scd_core.client import DecodeError
from scd_core.models import cache as model_cache
from scd_core.models import llamagen as lg
from scd_core.models.cache import ModelCache

MB = 2 ** 20


def live_tensor_bytes() -> int:
    """Bytes of every tensor storage still alive in this process (found through the
    garbage collector): what the models hold, unlike the resident set, which the allocator
    may keep after memory is freed."""
    gc.collect()
    storages = {}
    for obj in gc.get_objects():
        if type(obj) in (torch.Tensor, torch.nn.Parameter) and obj.device.type == "cpu":   # not the fake
                                                                                        # tensors a compile leaves
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


class Weights(torch.nn.Module):
    def __init__(self, megabytes: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(megabytes * MB // 4))      # pages written: resident


@pytest.fixture
def synthetic():
    loads: list[str] = []

    def loader(name: str, megabytes: int = 64, **kwargs):
        loads.append(name)
        return Weights(megabytes)

    return ModelCache(loader, large=lambda name: name.startswith("big")), loads


def test_each_model_is_loaded_once_per_key(synthetic):
    cache, loads = synthetic
    a = cache.get("small", megabytes=1)
    assert cache.get("small", megabytes=1, progress=print) is a            # how progress is shown is no key
    assert cache.get("small", megabytes=2) is not a                        # other arguments: another entry
    assert loads == ["small", "small"] and cache.peek("small", megabytes=1) is a
    assert cache.peek("big") is None and loads == ["small", "small"]      # peek never loads
    with pytest.raises(ValueError, match="name"):
        cache.get("")


def test_a_large_model_replaces_the_previous_one_and_its_memory_is_freed(synthetic):
    cache, loads = synthetic
    small = cache.get("small", megabytes=1)
    base = live_tensor_bytes()
    first = cache.get("big-a", megabytes=96)
    gone = weakref.ref(first)
    with_first = live_tensor_bytes()
    del first
    second = cache.get("big-b", megabytes=96)
    with_second = live_tensor_bytes()
    assert gone() is None                                   # no reference left anywhere
    assert cache.names() == ["small", "big-b"] and cache.peek("small", megabytes=1) is small
    assert with_first - base > 90 * MB
    assert with_second - base < 1.05 * 96 * MB              # one large model held, not two
    assert second.w.numel() == 96 * MB // 4


def test_a_large_model_is_refused_while_the_one_it_replaces_is_still_alive(synthetic, monkeypatch):
    """A caller still holding the old model keeps it, and the newcomer is refused (after a gc
    retry) with a message for the visitor, until the old one is let go; asked for again
    meanwhile, the old model is the same object, not a second copy."""
    monkeypatch.setattr(model_cache, "GC_RETRY_S", 0.01)
    cache, loads = synthetic
    held = cache.get("big-a", megabytes=1)
    with pytest.raises(model_cache.StillHeldError, match="big-b could not be loaded: big-a is still held in memory"):
        cache.get("big-b", megabytes=1)
    assert issubclass(model_cache.StillHeldError, DecodeError)                       # said as a lost row is
    assert loads == ["big-a"] and held.w.numel() == MB // 4
    assert cache.get("big-a", megabytes=1) is held and loads == ["big-a"]            # adopted back
    with pytest.raises(model_cache.StillHeldError):
        cache.get("big-b", megabytes=1)
    gone = weakref.ref(held)
    del held
    assert cache.get("big-b", megabytes=1) is not None and gone() is None
    assert loads == ["big-a", "big-b"] and cache.names() == ["big-b"]


def test_a_model_collected_on_the_retry_lets_the_newcomer_load(synthetic, monkeypatch):
    """A model kept alive only by a reference cycle is freed by the retry's collection: no
    refusal."""
    cache, loads = synthetic
    old = cache.get("big-a", megabytes=1)
    old.__dict__["me"] = old                                 # a cycle: only a collection frees it
    gone = weakref.ref(old)
    del old
    cache.get("big-b", megabytes=1)
    assert gone() is None and loads == ["big-a", "big-b"]


def test_concurrent_callers_share_one_load(synthetic):
    cache, loads = synthetic
    slow = ModelCache(lambda name, **kw: (time.sleep(0.2), loads.append(name), Weights(1))[-1])
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(slow.get("big"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == ["big"] and len(got) == 8 and all(m is got[0] for m in got)


def test_put_places_a_ready_model_and_clear_empties(synthetic):
    cache, loads = synthetic
    ready = Weights(1)
    cache.put("big-x", ready)
    assert cache.get("big-x") is ready and loads == []
    del ready                                                # (held, big-x would keep big-y out)
    cache.get("big-y", megabytes=1)
    assert cache.peek("big-x") is None
    cache.clear()
    assert cache.names() == []


def write_llamagen(folder, dim: int) -> None:
    """A LlamaGen c2i checkpoint of a few tens of MB in the published layout."""
    folder.mkdir()
    cfg = lg.GPTConfig(dim=dim, n_layer=4, n_head=8, multiple_of=64, model_type="c2i", num_classes=10,
                       vocab_size=64, block_size=16)
    torch.manual_seed(0)
    args = argparse.Namespace(gpt_model="GPT-test")
    torch.save({"model": lg.Transformer(cfg).state_dict(), "args": args}, folder / "c2i_T_64.pt")


def test_switching_real_models_by_folder_frees_the_first(tmp_path):
    """The real loader through the cache: three local LlamaGen models (about 50 MB of weights
    each). Loading the second releases the first; as a control, a third loaded while the
    test itself still holds the second is refused until the test lets go of it."""
    for name in "abc":
        write_llamagen(tmp_path / name, 512)
    cache = ModelCache()
    load = lambda name: cache.get(str(tmp_path / name), image_size=64, n_head=8, device="cpu")  # noqa: E731
    base = live_tensor_bytes()
    a = load("a")
    gone = weakref.ref(a)
    size = sum(p.numel() * p.element_size() for p in a.gpt.parameters())
    with_a = live_tensor_bytes()
    del a
    b = load("b")
    with_b = live_tensor_bytes()
    assert gone() is None and b.grid == (4, 4) and size > 40 * MB
    assert with_a - base > 0.95 * size                      # the first model is held
    assert abs(with_b - with_a) < 0.05 * size               # the second took the first one's place
    with pytest.raises(model_cache.StillHeldError, match="is still held in memory"):
        load("c")                                           # the cache lets go of b; this test does not
    assert live_tensor_bytes() - with_b < 0.05 * size       # c was not loaded beside it
    del b
    c = load("c")
    assert abs(live_tensor_bytes() - with_a) < 0.05 * size and c.grid == (4, 4)
    cache.clear()


def test_the_process_cache_loads_embedded_models_once():
    model = model_cache.get("toy-grid", grid=(4, 6))
    assert model_cache.get("toy-grid", grid=(4, 6)) is model
    assert scd_core.generate(model, ["x"], method="ar", window=1, seed=0).tokens.shape == (1, 24)
    assert "toy-grid" in model_cache.names()


def test_unload_returns_the_memory_or_says_who_still_holds_the_model(synthetic):
    cache, _ = synthetic
    cache.get("small", megabytes=1)
    cache.get("big-a", megabytes=8)
    assert cache.room_for("small") == []                                   # a small model makes no room
    (key,) = cache.room_for("big-b")                                       # big-a would go for big-b
    held = cache.held(key)
    assert cache.unload(key, arriving="big-b") is False                   # this test still holds it
    assert cache.names() == ["small"] and cache.residency.why_not_resident("big-a").arriving == "big-b"
    gone = weakref.ref(held)
    del held
    assert gone() is None
    cache.get("big-a", megabytes=8)
    (key,) = cache.room_for("big-b")
    assert cache.unload(key) is True and cache.names() == ["small"]
