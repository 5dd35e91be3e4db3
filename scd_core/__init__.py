"""scd_core: lossless speculative decoding (AR, SJD, SCD-maximal, SCD-Gumbel) for
autoregressive image and video token models."""
from scd_core.decoding import generate, stream, validate
from scd_core.models import availability, available_models, load_model
from scd_core.protocols import Session, TokenModel
from scd_core.settings import INITS, METHODS, Settings
from scd_core.trace import Iteration, Run

__all__ = ["load_model", "generate", "stream", "validate", "Settings", "TokenModel", "Session", "Run", "Iteration",
           "METHODS", "INITS", "available_models", "availability"]
