"""The library is the library: importing scd_core (and its race, serving and bench modules)
loads no page code, no Gradio and no plotly; the page lives in demo/."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": ROOT})
    return {name.split(".")[0] for name in out.stdout.split()}


def test_import_scd_core_loads_no_gradio_plotly_or_page():
    for statement in ("import scd_core", "import scd_core.race, scd_core.serve, scd_core.bench"):
        assert not loaded_after(statement) & {"gradio", "plotly", "demo"}, statement


def test_the_page_does_load_them():          # the check above can see a module loaded
    assert {"gradio", "demo"} <= loaded_after("import demo.uploads")
