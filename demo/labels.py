"""How the page names the decoding methods and draft inits (keys: scd_core.METHODS, INITS)."""
from scd_core.decoding import INITS, METHODS

METHOD_LABELS = {"ar": "AR", "sjd": "SJD", "scd-mc": "SCD maximal coupling",
                 "scd-gumbel": "SCD Gumbel coupling"}
INIT_LABELS = {"random": "random (uniform)", "repeat-above": "repeat the token above",
               "repeat-frame": "repeat the previous frame (video)"}
if set(METHOD_LABELS) != set(METHODS) or set(INIT_LABELS) != set(INITS):
    raise RuntimeError("demo.labels: a method or init of scd_core has no label (or a label no method)")
