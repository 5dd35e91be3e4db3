"""Gradio demo of lossless speculative decoding for AR image and video models: watch a sample
form pass by pass, race AR, SJD and SCD over several samples. `demo` is the Blocks app (the
Hugging Face Space entry point); `python app.py` serves it locally. The page lives in `demo/`:
`demo.page` wires its layout (`demo.layout`) to each tab's handlers (`demo/*_tab.py`), one
module per job (docs/layout.md)."""
from __future__ import annotations

if __name__ == "__main__":   # `python app.py` serves the page as `python -m demo` does (demo/__main__.py says why)
    import runpy
    runpy.run_module("demo", run_name="__main__", alter_sys=True)
    raise SystemExit(0)

from demo.page import demo  # noqa: E402,F401  (the Space's app)
