"""The C++ workers' data, for Python training scripts: the synthetic planted-model generator.

    gen = osprey.data.Synthetic(client, stream=client.rank)   # the same stream a C++ worker reads
    dense, keys, labels, oracle = gen.next(256)

`keys` are the sparse table's u64 keys (feature f's id namespaced as (f << 48) ^ id, as the C++
worker keys them), [n x num_sparse]; `dense` is [n x num_dense] float32; `oracle` the true
click probability. Streams: worker r reads stream r; EVAL_STREAM is the held-out set.
"""
from . import _C

EVAL_STREAM = _C.EVAL_STREAM


class Synthetic:
    def __init__(self, config, stream=0, sets=None):
        """config: a Client (its job's config and overrides) or a config path."""
        if hasattr(config, "_config"):
            path, sets = config._config, config._sets if sets is None else sets
        else:
            path = str(config)
        self._gen = _C.SyntheticData(path, list(sets or []), int(stream))
        self.num_dense = self._gen.num_dense
        self.num_sparse = self._gen.num_sparse

    def next(self, n):
        return self._gen.next(int(n))


def auc(scores, labels):
    """Area under the ROC curve (the C++ workers' metric), for float32 1-D arrays."""
    import numpy as np
    return _C.auc(np.ascontiguousarray(scores, dtype=np.float32).reshape(-1),
                  np.ascontiguousarray(labels, dtype=np.float32).reshape(-1))
