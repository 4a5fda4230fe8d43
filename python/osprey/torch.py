"""PyTorch modules whose parameters live on the Osprey servers.

    import osprey, osprey.torch as ot
    client = osprey.connect()
    emb = ot.EmbeddingBag(client.table("embeddings"), mode="sum")
    opt = ot.DenseOptimizer(model.parameters(), client.table("mlp"))
    for batch in data:
        loss = model(emb(ids, offsets), ...)
        loss.backward()          # the row gradients go to the servers asynchronously
        opt.step()               # dense gradients out, fresh parameters in, clock + 1

The servers' optimizer (the table's `optimizer:` in the job config) updates the rows and the
dense parameters; the modules only move tensors. No libtorch is linked: tensors cross to the C++
client as numpy views of CPU tensors (zero-copy).
"""
try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("osprey.torch needs PyTorch (>= 1.13): `pip install torch`, or on Debian 12 "
                      "`apt-get install python3-torch` and a venv with --system-site-packages") from e

import numpy as np

from . import _C

__all__ = ["EmbeddingBag", "EmbeddingBagCollection", "DenseOptimizer"]


def _keys_numpy(t):
    """int64 / uint64 ids as a contiguous uint64 numpy view (no copy for a contiguous int64 tensor)."""
    if t.device.type != "cpu":
        raise NotImplementedError(f"osprey.torch: only CPU tensors in this build (got {t.device})")
    if t.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"osprey.torch: ids must be int64 or int32, got {t.dtype}")
    a = t.detach().contiguous().reshape(-1).numpy()
    return a.astype(np.int64, copy=False).view(np.uint64)


class _Lookup:
    """One forward's pull in flight: the distinct keys, their rows, and where each id went."""

    def __init__(self, bag, ids, offsets, per_sample_weights):
        self.bag = bag
        self.ids, self.offsets, self.psw = ids, offsets, per_sample_weights
        keys = _keys_numpy(ids)
        self.unique, self.inverse = _C.dedupe(keys)
        self.rows = np.empty((self.unique.shape[0], bag.table.dim), dtype=np.float32)
        self.clock = bag.table.client.clock
        self.handle = bag.table.pull(self.unique, self.rows, clock=self.clock)

    def finish(self):
        self.handle.wait()
        weight = torch.from_numpy(self.rows).requires_grad_(self.bag.training and torch.is_grad_enabled())
        if self.offsets is None:  # one id per bag (2-D input of one column): a row gather
            return _GatherRows.apply(weight, self)
        if weight.requires_grad:
            weight.register_hook(self._push)
        out = F.embedding_bag(torch.from_numpy(self.inverse), weight, self.offsets, mode=self.bag.mode,
                              per_sample_weights=self.psw, include_last_offset=self.bag.include_last_offset)
        return out

    def _push(self, grad):
        # The gradient of the leaf is [num distinct keys x dim]: each key's gradient summed over
        # its occurrences, as the servers expect. The push copies it before returning.
        g = grad.detach().contiguous().numpy()
        self.bag._pending.append(self.bag.table.push(self.unique, g, clock=self.bag.table.client.clock))
        return None


class _GatherRows(torch.autograd.Function):
    """rows[inverse] for bags of one id. Backward sums the gradient rows per distinct key
    (osprey._C.scatter_add_rows: torch 1.13's embedding_bag / index_add_ backward cost ~1 ms a
    step more on the default job) and pushes the sums; the leaf gets no .grad."""

    @staticmethod
    def forward(ctx, weight, lookup):
        ctx.lookup = lookup
        return weight.index_select(0, torch.from_numpy(lookup.inverse))

    @staticmethod
    def backward(ctx, grad):
        lookup = ctx.lookup
        sums = np.zeros(lookup.rows.shape, dtype=np.float32)
        _C.scatter_add_rows(lookup.inverse, grad.detach().contiguous().numpy(), sums)
        table = lookup.bag.table  # pushed at the step it was computed in (a prefetch pulled earlier)
        lookup.bag._pending.append(table.push(lookup.unique, sums, clock=table.client.clock))
        return None, None


class EmbeddingBag(torch.nn.Module):
    """nn.EmbeddingBag whose weight is the rows of a sparse Osprey table.

    forward(input, offsets=None, per_sample_weights=None) as nn.EmbeddingBag: 1-D `input` with
    `offsets`, or 2-D `input` (bags of equal length). Ids are the table's u64 keys (int64
    tensors; negative ids are their two's complement). Forward dedupes the ids, pulls their rows
    (at the client's clock) into a leaf tensor and pools with F.embedding_bag; backward pushes
    each distinct key's gradient sum asynchronously (wait_pushes() or DenseOptimizer.step()
    collects them). mode "max", padding_idx, max_norm and scale_grad_by_freq raise
    NotImplementedError: the servers' optimizer sees gradient sums only."""

    def __init__(self, table, mode="mean", include_last_offset=False, padding_idx=None, max_norm=None,
                 scale_grad_by_freq=False, sparse=None):
        super().__init__()
        if not table.sparse:
            raise TypeError(f"osprey.torch.EmbeddingBag: table '{table.name}' is dense")
        if mode not in ("sum", "mean"):
            raise NotImplementedError(f"osprey.torch.EmbeddingBag: mode '{mode}' is not supported (sum or mean)")
        for name, value in (("padding_idx", padding_idx), ("max_norm", max_norm)):
            if value is not None:
                raise NotImplementedError(f"osprey.torch.EmbeddingBag: {name} is not supported")
        if scale_grad_by_freq:
            raise NotImplementedError("osprey.torch.EmbeddingBag: scale_grad_by_freq is not supported")
        self.table = table
        self.mode = mode
        self.include_last_offset = include_last_offset
        self.embedding_dim = table.dim
        self._pending = []
        self._prefetched = None
        self.prefetch_hits = 0  # forwards served by a prefetched pull
        self.last_staleness = None  # clocks between the last prefetched pull and its use
        table.client._bags.append(self)  # DenseOptimizer.step() waits for their pushes

    def _prepare(self, input, offsets, per_sample_weights):
        if input.dim() == 2:
            if offsets is not None:
                raise ValueError("osprey.torch.EmbeddingBag: offsets must be None for 2-D input")
            b, n = input.shape
            if n == 1 and per_sample_weights is None:
                return input.reshape(-1), None, None  # one id per bag: pooled = the row (sum or mean)
            offsets = torch.arange(0, b * n, n, dtype=torch.int64)
            if self.include_last_offset:
                offsets = torch.cat([offsets, torch.tensor([b * n], dtype=torch.int64)])
            input = input.reshape(-1)
            if per_sample_weights is not None:
                per_sample_weights = per_sample_weights.reshape(-1)
        elif input.dim() == 1:
            if offsets is None:
                raise ValueError("osprey.torch.EmbeddingBag: 1-D input needs offsets")
            offsets = offsets.to(torch.int64)
        else:
            raise ValueError(f"osprey.torch.EmbeddingBag: input must be 1-D or 2-D, got {input.dim()}-D")
        return input, offsets, per_sample_weights

    def start(self, input, offsets=None, per_sample_weights=None):
        """Issues the pull of this batch's rows now and returns a lookup; lookup.finish() is the
        forward's result (a prefetched pull of the same input is used)."""
        prepared = self._prepare(input, offsets, per_sample_weights)
        return self._take_prefetched(prepared) or _Lookup(self, *prepared)

    def prefetch(self, input, offsets=None, per_sample_weights=None, staleness=0):
        """Starts the pull of a later batch's rows now; the next forward() with equal input,
        offsets and weights uses it instead of pulling, provided the client's clock then is at
        most `staleness` clocks past the clock it was issued at (else it is dropped and the
        forward pulls afresh: the rows a forward computes with are never older than that).

        staleness=0: pass it as DenseOptimizer.step(overlap=...), so it is issued at the new
        clock, concurrently with the dense pull: under bsp bit-identical to no prefetch.
        staleness=k > 0 (async / ssp tables): issue it k steps ahead, e.g. right after the
        forward of step t for the batch of step t+1, and the pull overlaps step t's compute;
        the rows then miss at most k steps of updates."""
        if staleness < 0:
            raise ValueError(f"osprey.torch.EmbeddingBag.prefetch: staleness must be >= 0, got {staleness}")
        prepared = self._prepare(input, offsets, per_sample_weights)
        self._prefetched = (prepared, _Lookup(self, *prepared), int(staleness))

    def _take_prefetched(self, prepared):
        if self._prefetched is None:
            return None
        (ids, offs, psw), lookup, staleness = self._prefetched
        self._prefetched = None
        same = (ids.shape == prepared[0].shape and torch.equal(ids, prepared[0]) and
                (offs is None) == (prepared[1] is None) and
                (offs is None or (offs.shape == prepared[1].shape and torch.equal(offs, prepared[1]))) and
                (psw is None) == (prepared[2] is None) and (psw is None or torch.equal(psw, prepared[2])))
        age = self.table.client.clock - lookup.clock
        if not same or not 0 <= age <= staleness:
            lookup.handle.wait()  # not what this forward needs, or too old: drop it
            return None
        self.prefetch_hits += 1
        self.last_staleness = age
        return lookup

    def forward(self, input, offsets=None, per_sample_weights=None):
        prepared = self._prepare(input, offsets, per_sample_weights)
        lookup = self._take_prefetched(prepared)
        if lookup is None:
            lookup = _Lookup(self, *prepared)
        return lookup.finish()

    def wait_pushes(self, timeout=None):
        """Waits for every push backward started; raises the first error."""
        pending, self._pending = self._pending, []
        first = None
        for h in pending:
            try:
                h.wait(timeout)
            except Exception as e:  # keep waiting on the others: their arrays must be released
                first = first or e
        if first is not None:
            raise first

    def extra_repr(self):
        return f"table='{self.table.name}', dim={self.table.dim}, mode='{self.mode}'"


class EmbeddingBagCollection(torch.nn.Module):
    """Several features, each an EmbeddingBag: tables is {feature: osprey Table} (several
    features may share a table when their keys are namespaced). forward(features) takes
    {feature: (values, offsets)} -- or anything with to_dict() of jagged tensors with values()
    and offsets(), such as TorchRec's KeyedJaggedTensor -- issues every feature's pull before
    waiting on any, and returns {feature: pooled [bags x dim]}."""

    def __init__(self, tables, mode="sum"):
        super().__init__()
        self.bags = torch.nn.ModuleDict({f: EmbeddingBag(t, mode=mode) for f, t in tables.items()})

    def forward(self, features):
        if hasattr(features, "to_dict"):
            features = {k: (jt.values(), jt.offsets()[:-1]) for k, jt in features.to_dict().items()}
        unknown = set(features) - set(self.bags.keys())
        if unknown:
            raise KeyError(f"osprey.torch.EmbeddingBagCollection: unknown features {sorted(unknown)}; "
                           f"it has {sorted(self.bags.keys())}")
        lookups = {f: self.bags[f].start(*v) for f, v in features.items()}
        return {f: lk.finish() for f, lk in lookups.items()}

    def wait_pushes(self, timeout=None):
        for bag in self.bags.values():
            bag.wait_pushes(timeout)


class DenseOptimizer:
    """The dense parameters of a model, kept on a dense Osprey table (its `size` must equal the
    parameters' total count; the flat layout is the parameters in order, each flattened).

    The constructor offers the current values as the table's initial values (the first worker's
    win) and loads the table's values into the parameters. step() pushes the dense gradients,
    waits for every push of the client's EmbeddingBags, advances the client's clock and pulls the
    fresh parameters at the new clock -- so under bsp it returns once every worker's step was
    applied, under ssp once the slowest is within the bound, under async at once: the same
    meaning as for the C++ worker. The servers' optimizer (the table's config) does the update."""

    def __init__(self, params, table):
        if table.sparse:
            raise TypeError(f"osprey.torch.DenseOptimizer: table '{table.name}' is sparse")
        self.params = [p for p in params]
        self.table = table
        self.client = table.client
        total = sum(p.numel() for p in self.params)
        if total != table.size:
            raise ValueError(f"osprey.torch.DenseOptimizer: the parameters have {total} floats but dense table "
                             f"'{table.name}' has {table.size}")
        self._flat = np.empty(total, dtype=np.float32)
        self._grad = np.zeros(total, dtype=np.float32)
        self._flat_t = torch.from_numpy(self._flat)
        self._grad_t = torch.from_numpy(self._grad)
        with torch.no_grad():
            torch.cat([p.detach().reshape(-1) for p in self.params], out=self._flat_t)
        table.init_dense(self._flat).wait()
        self._pull()

    def refresh(self):
        """Loads the table's current values into the parameters (e.g. before an evaluation)."""
        self._pull()

    def _pull(self):
        self.table.pull_dense(self._flat, clock=self.client.clock).wait()
        self._load()

    def _load(self):
        # The first time the parameters become views of the flat buffer the pulls write into, so
        # later pulls need no copy (their values change only inside step() and refresh()).
        if getattr(self, "_viewed", False):
            return
        with torch.no_grad():
            at = 0
            for p in self.params:
                n = p.numel()
                if p.dtype == torch.float32 and p.device.type == "cpu":
                    p.data = self._flat_t[at:at + n].view_as(p)
                else:
                    p.copy_(self._flat_t[at:at + n].view_as(p))
                    self._copies = True
                at += n
        self._viewed = not getattr(self, "_copies", False)

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self, samples=0, loss=0.0, overlap=None):
        """One step (see the class). `overlap`: called once the dense pull for the new clock is in
        flight, before waiting for it -- e.g. lambda: emb.prefetch(next_ids), so that the next
        batch's rows and the dense parameters come in one round trip."""
        at = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                if p.grad is None:
                    self._grad_t[at:at + n].zero_()
                else:
                    self._grad_t[at:at + n].copy_(p.grad.reshape(-1))
                at += n
        push = self.table.push_dense(self._grad, clock=self.client.clock)
        self.client.step(samples=samples, loss=float(loss))
        # As osprey-worker does: the next step's pulls go out before this step's pushes are
        # waited for (a server answers a pull after the pushes it received before it; under bsp
        # it holds the pull until every worker's pushes for the step arrived).
        pull = self.table.pull_dense(self._flat, clock=self.client.clock)
        first = None
        try:
            if overlap is not None:
                overlap()
        finally:
            for bag in self.client._bags:
                try:
                    bag.wait_pushes()
                except Exception as e:
                    first = first or e
            try:
                push.wait()
            except Exception as e:
                first = first or e
        pull.wait()
        if first is not None:
            raise first
        self._load()
