"""The batched forward's speed tricks, all switched off by `fast_paths=False`.

Each computes the rows of the plain tree forward (`model/batched.py`), up to rounding, and
each is chosen by one check:

* `forward.py`    which trick computes a batch (start here);
* `groups.py`     `length_groups`: items of very different lengths are computed apart;
* `chain.py`      `chain_shape`: a uniform chain (decode step, draft level) skips the tree masks;
                  its attention is `chain_attention.py` (`windows_pay`, `blocks_pay`);
* `chunks.py`     `long_prefills`: a long prefill goes chunk by chunk;
* `padded.py`     `reads_in_place`: one item reads its rows where they are; a batch's padded
                  rows are kept across calls under their `context_key`;
* `keys.py`       `in_place_keys`: the tree forward attends without concatenating keys;
* `halves.py`     `halves_pay`: a large attention runs its query rows in two halves, one on a
                  worker thread (NumPy releases the GIL in its products and `exp`);
* `buffers.py`    work buffers reused across calls instead of fresh arrays.
"""

from .buffers import WorkBuffers
from .forward import compute_rows
from .groups import length_groups
from .padded import batch_context

__all__ = ["WorkBuffers", "batch_context", "compute_rows", "length_groups"]
