"""The model: TinyModel and its two forwards.

Reading order: `tinymodel.py` (the model, `full_forward`, the oracle's rows), `batched.py`
(the engine's forward: new rows of a batch against stored rows, tree-masked, plain), then
`fastpaths/` (the speed tricks; `fast_paths=False` switches them all off).
"""

from .checks import check_fits_in_memory, is_integer, is_number, physical_memory, positive_int
from .fastpaths import length_groups
from .layers import feed_forward, rms_norm
from .tinymodel import POSITION_SCALE, RECOVERY_MODES, TinyModel, make_draft
from .weights import LAYER_DECAY, State, Weights

__all__ = [
    "LAYER_DECAY",
    "POSITION_SCALE",
    "RECOVERY_MODES",
    "State",
    "TinyModel",
    "Weights",
    "check_fits_in_memory",
    "feed_forward",
    "is_integer",
    "is_number",
    "length_groups",
    "make_draft",
    "physical_memory",
    "positive_int",
    "rms_norm",
]
