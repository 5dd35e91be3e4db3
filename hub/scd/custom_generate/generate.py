"""Speculative Coupled Decoding (SCD) as a transformers `custom_generate` repository.

    model.generate(input_ids, custom_generate="<this repository>", trust_remote_code=True,
                   method="scd-mc", window=16, ...)

transformers calls `generate` below with the arguments of its own `generate`; it runs
transformers' preparation and then the engine's loop (AR, SJD, SCD with maximal coupling or
with Gumbel coupling, lossless), from the modules beside this file. They are the scd_core
library's, built by its `hub/vendor.py`: edit the library, then rebuild.
"""
from .hf import hub_generate

# transformers brings along the modules named by `from .module import` lines: all of them.
from .architecture import __name__ as _architecture  # noqa: F401
from .causal import __name__ as _causal  # noqa: F401
from .chain import __name__ as _chain  # noqa: F401
from .checkpoints import __name__ as _checkpoints  # noqa: F401
from .checks import __name__ as _checks  # noqa: F401
from .clocks import __name__ as _clocks  # noqa: F401
from .coupling import __name__ as _coupling  # noqa: F401
from .decoding import __name__ as _decoding  # noqa: F401
from .hub import __name__ as _hub  # noqa: F401
from .janus import __name__ as _janus  # noqa: F401
from .memory import __name__ as _memory  # noqa: F401
from .output import __name__ as _output  # noqa: F401
from .passes import __name__ as _passes  # noqa: F401
from .prompts import __name__ as _prompts  # noqa: F401
from .protocols import __name__ as _protocols  # noqa: F401
from .reading import __name__ as _reading  # noqa: F401
from .rows import __name__ as _rows  # noqa: F401
from .sampling import __name__ as _sampling  # noqa: F401
from .settings import __name__ as _settings  # noqa: F401
from .static import __name__ as _static  # noqa: F401
from .trace import __name__ as _trace  # noqa: F401
from .transformers_session import __name__ as _transformers_session  # noqa: F401
from .tree import __name__ as _tree  # noqa: F401
from .tree_pass import __name__ as _tree_pass  # noqa: F401


def generate(*args, model=None, **kwargs):
    """transformers' `generate` arguments (`method`, `window`, `init`, `seed` besides them), the
    model first or by keyword (as transformers passes it)."""
    return hub_generate(*args, model=model, **kwargs)
