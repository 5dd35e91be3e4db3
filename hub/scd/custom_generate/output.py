# Built by hub/vendor.py from scd_core/hf/output.py: edit the library, then rebuild.
"""`generate`'s result with `return_dict_in_generate=True`: a transformers `ModelOutput`, so
`out.sequences`, `out["sequences"]` and `out[0]` all work as on transformers' own outputs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers.utils import ModelOutput


@dataclass
class GenerateOutput(ModelOutput):
    """The prompts and generated tokens, with what the run cost."""
    sequences: torch.LongTensor | None = None   # [B, P + T]: the prompts, then the generated tokens (padded after EOS)
    nfe: int | None = None                      # forward passes of the run, the prefill included
    acceptance_rate: float | None = None        # accepted drafts / verified drafts
    step_compression: float | None = None       # AR's forward passes for these T tokens / nfe
    run: Any = None                             # the engine's `Run`: its trace, one record per pass
