"""osprey.torch.DenseOptimizer: a model's dense parameters on a dense Osprey table (CPU or CUDA)."""
import numpy as np
import torch

from . import _device


class DenseOptimizer:
    """The dense parameters of a model, kept on a dense Osprey table (its `size` must equal the
    parameters' total count; the flat layout is the parameters in order, each flattened).

    The constructor offers the current values as the table's initial values (the first worker's
    win) and loads the table's values into the parameters. step() pushes the dense gradients,
    waits for every push of the client's EmbeddingBags, advances the client's clock and pulls the
    fresh parameters at the new clock -- so under bsp it returns once every worker's step was
    applied, under ssp once the slowest is within the bound, under async at once: the same
    meaning as for the C++ worker. The servers' optimizer (the table's config) does the update.

    The parameters are all on one device (CPU or CUDA; else ValueError) and become views of one
    flat buffer there. On CUDA the gradients are gathered into a flat device buffer, copied to the
    host on a side stream and pushed once that copy is done; the pulled values are copied back
    on the current stream (osprey/_device.py). Pass `loss` to step() as a float (a CUDA tensor's
    float() would wait for the device)."""

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
        dev = _device.check_same_device(f"DenseOptimizer on table '{table.name}'",
                                        **{f"parameter {i}": p for i, p in enumerate(self.params)})
        self.device = torch.device(dev)
        self._staging = _device.staging_of_device(self.device)
        if self._staging is None:  # host: the C++ client reads and writes these arrays in place
            self._flat = np.empty(total, dtype=np.float32)
            self._grad = np.zeros(total, dtype=np.float32)
            self._flat_t = torch.from_numpy(self._flat)
            self._grad_t = torch.from_numpy(self._grad)
        else:  # device: pushes and pulls go through pinned staging buffers of the table calls
            self._flat_t = torch.empty(total, dtype=torch.float32, device=self.device)
            self._grad_t = torch.zeros(total, dtype=torch.float32, device=self.device)
            self._flat, self._grad = self._flat_t, self._grad_t
        with torch.no_grad():
            torch.cat([p.detach().reshape(-1).to(torch.float32) for p in self.params], out=self._flat_t)
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
                if p.dtype == torch.float32 and p.device == self._flat_t.device:
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
        # On a device the push copies _grad_t to the host on a side stream; the push is waited
        # for below, after its copy completed, so the next step's writes into _grad_t are safe.
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
