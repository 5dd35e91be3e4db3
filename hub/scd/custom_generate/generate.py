"""Speculative Coupled Decoding (SCD) as a transformers `custom_generate` repository.

    model.generate(input_ids, custom_generate="<this repository>", trust_remote_code=True,
                   method="scd-mc", window=16, ...)

transformers calls `generate` below with the arguments of its own `generate`; the decoding is
`scd_core.hf` (pip install scd-core), which runs transformers' preparation and then the
engine's loop: AR, SJD, SCD with maximal coupling or with Gumbel coupling, lossless.
"""
from scd_core.hf import hub_generate


def generate(model, *args, **kwargs):
    """transformers' `generate` arguments as given (`method`, `window`, `init`, `seed` besides them)."""
    return hub_generate(model, *args, **kwargs)
