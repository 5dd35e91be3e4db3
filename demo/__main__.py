"""`python -m demo` (and `python app.py`, which runs this): serve the page until SIGTERM or
SIGINT, then stop cleanly (`demo.page.main`).

Why through here: the decode workers are processes started with multiprocessing's "spawn",
which runs the parent's main module again in each one unless that module is a package's
`__main__`. Served from `app.py` itself, every worker built the whole page and encoded the
example clips before loading its model; served from here, a worker imports the decode side
only (`scd_core.workers`, the loader in `demo.models`)."""
from demo import page

if __name__ == "__main__":
    page.main()
