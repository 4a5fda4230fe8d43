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
client as numpy views of CPU tensors (zero-copy), CUDA tensors through pinned host staging
(osprey/_device.py). The same code runs on both: move the modules and the model with .to(device)
(an EmbeddingBag's output is on its device; its ids may be on that device or on the CPU, which
is cheaper: the ids are deduped on the host).
"""
try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("osprey.torch needs PyTorch (>= 1.13): `pip install torch`, or on Debian 12 "
                      "`apt-get install python3-torch` and a venv with --system-site-packages") from e

import numpy as np

from . import _C
from . import _device
from ._torch_dense import DenseOptimizer  # noqa: E402,F401  (osprey.torch.DenseOptimizer)

__all__ = ["EmbeddingBag", "EmbeddingBagCollection", "DenseOptimizer"]


def _keys_numpy(t):
    """int64 / int32 ids as a contiguous uint64 numpy array (a view of a contiguous int64 CPU
    tensor; CUDA ids are copied to the host, waiting for that copy only)."""
    if t.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"osprey.torch: ids must be int64 or int32, got {t.dtype}")
    if t.device.type == "cuda":
        (t,), ready = _device.staging_for(t).to_host(t.reshape(-1))
        ready.synchronize()  # the host dedupes them now
    a = t.detach().contiguous().reshape(-1).numpy()
    return a.astype(np.int64, copy=False).view(np.uint64)


class _Lookup:
    """One forward's pull in flight: the distinct keys, their rows, and where each id went."""

    def __init__(self, bag, ids, offsets, per_sample_weights):
        self.bag = bag
        self.ids, self.offsets, self.psw = ids, offsets, per_sample_weights
        self.staging = _device.staging_of_device(bag.device)  # None: rows stay in host memory
        keys = _keys_numpy(ids)
        self.unique, self.inverse = _C.dedupe(keys)
        shape = (self.unique.shape[0], bag.table.dim)
        if self.staging is None:
            self.rows_t = None
            self.rows = np.empty(shape, dtype=np.float32)
        else:  # pulled into pinned memory, copied to the device in finish()
            self.rows_t = self.staging.host_empty(shape, torch.float32)
            self.rows = self.rows_t.numpy()
        self.clock = bag.table.client.clock
        self.handle = bag.table.pull(self.unique, self.rows, clock=self.clock)

    def finish(self):
        self.handle.wait()
        grad = self.bag.training and torch.is_grad_enabled()
        if self.staging is not None:
            return self._finish_on_device(grad)
        weight = torch.from_numpy(self.rows).requires_grad_(grad)
        if self.offsets is None:  # one id per bag (2-D input of one column): a row gather
            return _GatherRows.apply(weight, self)
        if weight.requires_grad:
            weight.register_hook(self._push)
        out = F.embedding_bag(torch.from_numpy(self.inverse), weight, self.offsets, mode=self.bag.mode,
                              per_sample_weights=self.psw, include_last_offset=self.bag.include_last_offset)
        return out

    def _finish_on_device(self, grad):
        # Everything to the module's device on its current stream (host sources: the pinned rows,
        # the deduped inverse, CPU offsets); the leaf's hook pushes its gradient from there.
        dev = self.bag.device
        weight = self.staging.to_device(self.rows_t).requires_grad_(grad)
        inverse = self.staging.to_device(torch.from_numpy(self.inverse))
        if weight.requires_grad:
            weight.register_hook(self._push)
        if self.offsets is None:
            return weight.index_select(0, inverse)
        offsets = self.offsets if self.offsets.device == dev else self.staging.to_device(self.offsets)
        psw = self.psw
        if psw is not None and psw.device != dev:
            psw = self.staging.to_device(psw)
        return F.embedding_bag(inverse, weight, offsets, mode=self.bag.mode, per_sample_weights=psw,
                               include_last_offset=self.bag.include_last_offset)

    def _push(self, grad):
        # The gradient of the leaf is [num distinct keys x dim]: each key's gradient summed over
        # its occurrences, as the servers expect. The push copies it before returning; a device
        # gradient is copied to the host on a side stream and pushed once that copy is done.
        table = self.bag.table
        if self.staging is not None:
            h = table._push_staged(self.staging, self.unique, grad.detach(), table.client.clock)
        else:
            h = table.push(self.unique, grad.detach().contiguous().numpy(), clock=table.client.clock)
        self.bag._pending.append(h)
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
                 scale_grad_by_freq=False, sparse=None, device=None):
        super().__init__()
        # No parameters, but a device: .to() / .cuda() move this empty buffer, and the output,
        # the pulled rows and their gradients live where it is.
        self.register_buffer("_device_anchor", torch.empty(0, device=device), persistent=False)
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

    @property
    def device(self):
        return self._device_anchor.device

    def _prepare(self, input, offsets, per_sample_weights):
        dev = _device.check_same_device(f"EmbeddingBag on table '{self.table.name}'", input=input, offsets=offsets,
                                        per_sample_weights=per_sample_weights)
        if dev != "cpu" and torch.device(dev) != self.device:
            raise ValueError(f"osprey.torch.EmbeddingBag on table '{self.table.name}': the input is on {dev} but the "
                             f"module on {self.device}: move the module with .to('{dev}') (ids may also stay on "
                             "the CPU: the output is on the module's device)")
        if input.dim() == 2:
            if offsets is not None:
                raise ValueError("osprey.torch.EmbeddingBag: offsets must be None for 2-D input")
            b, n = input.shape
            if n == 1 and per_sample_weights is None:
                return input.reshape(-1), None, None  # one id per bag: pooled = the row (sum or mean)
            offsets = torch.arange(0, b * n, n, dtype=torch.int64, device=input.device)
            if self.include_last_offset:
                offsets = torch.cat([offsets, torch.tensor([b * n], dtype=torch.int64, device=input.device)])
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
        return self._take_prefetched((input, offsets, per_sample_weights)) or _Lookup(self, *prepared)

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
        # Matched on the arguments as given (the offsets a 2-D input implies are made anew each time).
        self._prefetched = ((input, offsets, per_sample_weights), _Lookup(self, *prepared), int(staleness))

    def _take_prefetched(self, args):
        if self._prefetched is None:
            return None
        (ids, offs, psw), lookup, staleness = self._prefetched
        self._prefetched = None
        same = all(_same_tensor(a, b) for a, b in zip((ids, offs, psw), args))
        age = self.table.client.clock - lookup.clock
        if not same or not 0 <= age <= staleness:
            lookup.handle.wait()  # not what this forward needs, or too old: drop it
            return None
        self.prefetch_hits += 1
        self.last_staleness = age
        return lookup

    def forward(self, input, offsets=None, per_sample_weights=None):
        prepared = self._prepare(input, offsets, per_sample_weights)
        lookup = self._take_prefetched((input, offsets, per_sample_weights))
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


def _same_tensor(a, b):
    """Equal values (None equals None). CUDA tensors compare by identity of their memory (the
    same data pointer, shape and strides) rather than by value, which would wait for the device:
    do not change the ids in place between prefetch() and forward()."""
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.device != b.device:
        return False
    if a.device.type == "cuda":
        return a.data_ptr() == b.data_ptr() and a.stride() == b.stride() and a.dtype == b.dtype
    return torch.equal(a, b)


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
