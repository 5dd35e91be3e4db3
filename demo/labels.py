"""How the page names the decoding methods and draft inits (keys: scd_core.METHODS, INITS)."""
from scd_core.settings import INITS, METHODS

METHOD_LABELS = {"ar": "AR", "sjd": "SJD", "scd-mc": "SCD maximal coupling",
                 "scd-gumbel": "SCD Gumbel coupling"}
INIT_LABELS = {"random": "random (uniform)", "repeat-above": "the token above",
               "repeat-frame": "previous frame (video)"}
if set(METHOD_LABELS) != set(METHODS) or set(INIT_LABELS) != set(INITS):
    raise RuntimeError("demo.labels: a method or init of scd_core has no label (or a label no method)")

# The draft trees the page offers, (k, depth) by label: k candidates at each of the first depth
# draft positions (scd_core.Settings.tree); the first is the chain.
TREE_LABELS = {"chain (no tree)": (1, 0), "2 x 1": (2, 1), "2 x 2": (2, 2), "3 x 1": (3, 1),
               "4 x 1": (4, 1)}
TREE_CHOICES = list(TREE_LABELS)
TREE_INFO = "k candidates at each of the first d draft positions (AR has no drafts: it runs the chain)"
