"""How a run decodes: one frozen `Settings`, validated once, passed wherever a run's
settings travel (`generate` / `stream`, the server's groups, the race, the bench, the page).

Everything a run needs besides its prompts and seeds is here: the method, its window L,
the draft init, the sampling (temperature, top-k, top-p) and the guidance scale. A model's
own `default_settings` (window included) become a `Settings` through `Settings.for_model`.
Each field is checked when the object is made: a `ValueError` names the field and what it
allows. `check_model` adds what depends on the model (a video grid for "repeat-frame").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from scd_core.sampling import SamplingConfig, validate_sampling

METHODS = ("ar", "sjd", "scd-mc", "scd-gumbel")
INITS = ("random", "repeat-above", "repeat-frame")
MAX_WINDOW = 1024        # the largest window L accepted
MAX_CFG_SCALE = 100.0


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

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int):
            raise ValueError(f"window must be an integer, got {self.window!r}")
        low = 1 if self.method == "ar" else 2
        if not low <= self.window <= MAX_WINDOW:
            raise ValueError(f"window must be in [{low}, {MAX_WINDOW}] for method {self.method!r}, "
                             f"got {self.window}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")
        if not _number(self.cfg_scale) or not 0 <= self.cfg_scale <= MAX_CFG_SCALE:
            raise ValueError(f"cfg_scale must be a number in [0, {MAX_CFG_SCALE:g}], got {self.cfg_scale!r}")
        s = validate_sampling(self.temperature, self.top_k, self.top_p)
        for name, value in (("temperature", s.temperature), ("top_k", s.top_k), ("top_p", s.top_p),
                            ("cfg_scale", float(self.cfg_scale))):
            object.__setattr__(self, name, value)          # one type per field: 3 and 3.0 are equal settings

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
