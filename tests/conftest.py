import os

import pytest
import torch

# The page's handlers are called directly and reach into its in-process servers and models:
# Generate decodes in the test's process (tests/test_app_serving.py runs the page on worker
# processes too).
os.environ["SCD_DECODE"] = "local"

# Two shared cores: torch with 2 threads can slow down many-fold under contention.
torch.set_num_threads(int(os.environ.get("SCD_TEST_THREADS", "1")))


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run where a CUDA GPU is present and are skipped, saying so, elsewhere."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def url():
    """The demo page served on loopback for the module's gradio_client tests."""
    import app
    app.demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **app.LAUNCH)
    try:
        yield app.demo.local_url
    finally:
        app.demo.close()
