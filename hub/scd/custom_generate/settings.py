# Built by hub/vendor.py from scd_core/settings.py: edit the library, then rebuild.
"""How a run decodes: one frozen `Settings`, validated once, passed wherever a run's
settings travel (`generate` / `stream`, the server's groups, the race, the bench, the page).

Everything a run needs besides its prompts and seeds is here: the method, its window L,
the draft init, the draft tree, the sampling (temperature, top-k, top-p), the guidance scale,
and whether the pass runs compiled. A model's
own `default_settings` (window included) become a `Settings` through `Settings.for_model`.
Each field is checked when the object is made: a `ValueError` names the field and what it
allows. `check_model` adds what depends on the model (a video grid for "repeat-frame").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .sampling import SamplingConfig, validate_sampling

METHODS = ("ar", "sjd", "scd-mc", "scd-gumbel")
INITS = ("random", "repeat-above", "repeat-frame")
MAX_WINDOW = 1024        # the largest window L accepted
MIN_WINDOW = 2           # the least window of a speculative method (AR feeds one token: 1 allowed)
MAX_CFG_SCALE = 100.0
# Temperatures the sampler honours exactly. p divides the float32 logits l by T, and l / T keeps
# float32's precision only while it is a normal number (at least 1.2e-38 in size): up to 1e30
# every logit of at least float32's step at 1 (2**-23) in size stays one; past it small logits
# lose their order (top-k and top-p then keep tokens the law does not), and from 3.4e38 T is
# infinite in float32 (every l / T is 0). Near 0, (l_max - l) / T must stay finite for logits up
# to 1e8 in size (any model's, guidance included): 2e8 / 1e-30 < 3.4e38. Temperature 0 is greedy.
MIN_TEMPERATURE = 1e-30
MAX_TEMPERATURE = 1e30
CHAIN = (1, 0)           # the draft "tree" of a plain chain: one candidate per position


def tree_nodes(tree: tuple[int, int]) -> int:
    """Tree nodes under the root of a full k-ary draft tree of `depth` levels: k + k^2 + ... + k^depth."""
    k, depth = tree
    return sum(k ** d for d in range(1, depth + 1))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Settings:
    """The decoding settings of a run (hashable: requests with equal settings can share passes)."""

    method: str = "scd-mc"
    window: int = 16                 # L: tokens fed per pass (AR feeds one whatever L is)
    init: str = "random"             # how fresh draft slots are filled
    temperature: float = 1.0         # 0: greedy
    top_k: int = 0                   # 0: off
    top_p: float = 1.0               # 1: off
    cfg_scale: float = 1.0           # classifier-free guidance scale (1: the conditional logits)
    tree: tuple[int, int] = CHAIN    # (k, depth): k candidates at each of the first depth draft positions
    compile: bool = False            # run the pass compiled (`scd_core.passes`): the same tokens, faster


    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int):
            raise ValueError(f"window must be an integer, got {self.window!r}")
        low = 1 if self.method == "ar" else MIN_WINDOW
        if not low <= self.window <= MAX_WINDOW:
            raise ValueError(f"window must be in [{low}, {MAX_WINDOW}] for method {self.method!r}, "
                             f"got {self.window}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")
        if not _number(self.cfg_scale) or not 0 <= self.cfg_scale <= MAX_CFG_SCALE:
            raise ValueError(f"cfg_scale must be a number in [0, {MAX_CFG_SCALE:g}], got {self.cfg_scale!r}")
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile must be True or False, got {self.compile!r}")
        object.__setattr__(self, "tree", self._checked_tree())
        s = validate_sampling(self.temperature, self.top_k, self.top_p)
        if s.temperature != 0 and not MIN_TEMPERATURE <= s.temperature <= MAX_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or from {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}: "
                             f"beyond, float32 cannot divide the logits by it exactly; got {self.temperature!r}")
        for name, value in (("temperature", s.temperature), ("top_k", s.top_k), ("top_p", s.top_p),
                            ("cfg_scale", float(self.cfg_scale))):
            object.__setattr__(self, name, value)          # one type per field: 3 and 3.0 are equal settings

    def _checked_tree(self) -> tuple[int, int]:
        """The tree as a (k, depth) tuple of ints (None: the chain); a ValueError names `tree`."""
        tree = CHAIN if self.tree is None else self.tree
        if (not isinstance(tree, (tuple, list)) or len(tree) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in tree)
                or tree[0] < 1 or tree[1] < 0):
            raise ValueError(f"tree must be (k, depth) with integers k >= 1 and depth >= 0 "
                             f"(k candidates at each of the first depth draft positions), got {self.tree!r}")
        k, depth = int(tree[0]), int(tree[1])
        if self.method == "ar" and k > 1:
            raise ValueError(f"tree: method 'ar' feeds no drafts, so it takes no draft tree (k must be 1), "
                             f"got {k}x{depth}")
        if self.method != "ar" and 1 + tree_nodes((k, depth)) > self.window:
            raise ValueError(f"tree {k}x{depth} needs {1 + tree_nodes((k, depth))} tokens per pass (the root and "
                             f"{tree_nodes((k, depth))} tree nodes), more than the window {self.window}")
        return (k, depth)

    @property
    def uses_tree(self) -> bool:
        """Whether a pass feeds a draft tree (depth > 0, on a speculative method)."""
        return self.method != "ar" and self.tree[1] > 0

    @property
    def line(self) -> int:
        """Tokens on a pass's main line: the root, branch 0 of each tree level, then the chain
        (L for a chain; the positions a pass can commit)."""
        return self.feeds - (tree_nodes(self.tree) - self.tree[1] if self.uses_tree else 0)

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_k, self.top_p)

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy

    @property
    def feeds(self) -> int:
        """Tokens fed per pass: L, or 1 for AR."""
        return 1 if self.method == "ar" else self.window

    def replace(self, **changes: Any) -> "Settings":
        """These settings with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    def check_model(self, model: Any) -> "Settings":
        """What depends on the model: "repeat-frame" copies the previous frame, so it needs a
        video grid (T, H, W). Returns self."""
        if self.init == "repeat-frame" and len(tuple(model.grid)) != 3:
            raise ValueError(f"init 'repeat-frame' needs a video grid (T, H, W); this model's grid is "
                             f"{tuple(model.grid)}")
        return self

    @classmethod
    def for_model(cls, model: Any, **given: Any) -> "Settings":
        """The model's `default_settings` (any of the fields, window included), then the
        library's defaults, under the fields given (a given None keeps the default)."""
        own = getattr(model, "default_settings", None) or {}
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - fields)
        if unknown:
            raise ValueError(f"{unknown[0]} is not a setting; the settings are {', '.join(sorted(fields))}")
        values = {k: v for k, v in own.items() if k in fields}
        values.update({k: v for k, v in given.items() if v is not None})
        return cls(**values).check_model(model)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
