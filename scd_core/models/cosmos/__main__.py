"""`python -m scd_core.models.cosmos --time`: the GPU forward-timing recipe."""
from .timing import _main

_main()
