import os

import pytest
import torch

# The page's handlers are called directly and reach into its in-process servers and models:
# Generate decodes in the test's process (tests/test_app_serving.py runs the page on worker
# processes too).
os.environ["SCD_DECODE"] = "local"

# Two shared cores: torch with 2 threads can slow down many-fold under contention.
torch.set_num_threads(int(os.environ.get("SCD_TEST_THREADS", "1")))


# How scripts/test.sh shares the test files between its two processes (pytest-xdist, `--dist
# loadfile --no-loadscope-reorder`): a file is one unit of work (its module fixtures, a served
# page or a Ray cluster, made once), and all the browser files are one, so that one process
# drives chromium at a time. The longest units go first (seconds in one run of every lane,
# docs/testing.md), so that the two processes end together; the others follow as collected.
BROWSER = "tests/test_browser"
LONGEST_FIRST = (BROWSER, "tests/test_model_compile.py", "tests/test_tiny_model.py", "tests/test_distributed.py",
                 "tests/test_exactness_single_row.py", "tests/test_bfloat16.py", "tests/test_residency.py",
                 "tests/test_zerogpu.py", "tests/test_static_writes.py", "tests/test_exactness.py",
                 "tests/test_app_serving.py")


def work_unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return BROWSER if path.startswith(BROWSER) else path


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with the browser files as one unit (pytest-xdist's scheduling by scope,
    the scope being the unit of work above)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)
    return ByWorkUnit(config, log)


def pytest_collection_modifyitems(config, items):
    """The longest units of work first; tests marked `gpu` run where a CUDA GPU is present and
    are skipped, saying so, elsewhere."""
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))     # stable: the rest as collected
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu") is not None:      # the mark (a folder named gpu is a keyword too)
            item.add_marker(skip)


@pytest.fixture(scope="module")
def url():
    """The demo page served on loopback for the module's gradio_client tests."""
    from demo import config, page
    page.demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **config.LAUNCH)
    try:
        yield page.demo.local_url
    finally:
        page.demo.close()
