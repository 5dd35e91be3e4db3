"""Beyond one machine, on Ray: the benchmark's cells spread over an actor pool
(`scd_core.distributed.bench`, Ray Data) and the decode service on Ray Serve replicas
(`scd_core.distributed.service`: `RayClient`, `client_from_env`). See docs/scaling.md.

Ray is optional: `import scd_core` never imports it, and neither does this package's
`__init__`; `cells` (the cell grid, its rows and the resumable row file) needs no Ray either.
"""
