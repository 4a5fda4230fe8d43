"""The C++ workers' data, for Python training scripts: the synthetic planted-model generator and
the Criteo TSV reader.

    gen = osprey.data.Synthetic(client, stream=client.rank)   # the same stream a C++ worker reads
    dense, keys, labels, oracle = gen.next(256)

`keys` are the sparse table's u64 keys (feature f's id namespaced as (f << 48) ^ id, as the C++
worker keys them), [n x num_sparse]; `dense` is [n x num_dense] float32; `oracle` the true
click probability. Streams: worker r reads stream r; EVAL_STREAM is the held-out set.

    reader = osprey.data.Criteo(path, shard=client.rank, num_shards=client.world_size, wrap=True)
    dense, keys, labels, _ = reader.next(256)                # the C++ worker's preprocessing

Criteo (worker/data/criteo.h): line i of the file belongs to shard i % num_shards; dense values are
log(1 + max(x, 0)), categorical ids their hex value (empty: a reserved id); a malformed line raises
OspreyError naming the file, line and column. At the end of the file next() returns 0 rows, or
with wrap=True starts the next epoch (as the C++ worker's training does).
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


class Criteo:
    def __init__(self, path, shard=0, num_shards=1, wrap=False):
        self.path, self.shard, self.num_shards, self.wrap = str(path), int(shard), int(num_shards), wrap
        self.num_dense, self.num_sparse = 13, 26
        self._reader = _C.CriteoData(self.path, self.shard, self.num_shards)

    def next(self, n):
        """(dense [m, 13] float32, keys [m, 26] uint64, labels [m], None), m <= n."""
        dense, keys, labels = self._reader.next(int(n))
        if len(labels) == 0 and self.wrap:
            self._reader = _C.CriteoData(self.path, self.shard, self.num_shards)
            dense, keys, labels = self._reader.next(int(n))  # still 0 rows: the shard is empty
        return dense, keys, labels, None
