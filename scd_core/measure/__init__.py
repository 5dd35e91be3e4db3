"""Measurements of the real models at their published sizes: `gpu_timing` (`scd-gpu-timing`:
forward, engine and per-image times of random-weight full-size models on a GPU; `--tiny` runs
the same code on tiny configs on the CPU, as the tests do)."""
