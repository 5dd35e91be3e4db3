"""`python -m scd_core.measure.gpu_timing`: the command line (`cli.main`)."""
from .cli import main

raise SystemExit(main())
