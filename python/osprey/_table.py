"""osprey.Table and osprey.Handle: one table's asynchronous calls (osprey/__init__.py's docstring)."""
import numpy as np

from . import _device


def _as_keys(keys):
    """u64 keys as a contiguous 1-D numpy array (a view when they already are)."""
    if _device.is_tensor(keys):  # a host torch tensor, without importing torch
        keys = keys.detach().numpy()
    arr = np.ascontiguousarray(keys).reshape(-1)
    if arr.dtype != np.uint64:
        if arr.dtype.kind not in "iu":
            raise TypeError(f"osprey: keys must be integers, got {arr.dtype}")
        arr = arr.astype(np.uint64)
    return arr


def _as_floats(x, what):
    """float32 contiguous numpy view of a numpy array or torch CPU tensor (zero-copy when it is one)."""
    if _device.is_tensor(x):
        x = x.detach().numpy()
    arr = np.ascontiguousarray(x, dtype=np.float32)
    return arr

class Handle:
    """One asynchronous call. wait(timeout=None) returns its result (the pulled array, or None for
    a push) or raises OspreyError; TimeoutError when `timeout` seconds passed first (the call is
    still in flight: wait again). Every handle should be waited on once; one that is dropped
    unwaited is finished by its client later (its arrays stay alive until then).

    A staged call (device tensors in) has no ticket until its copy to the host completed and the
    client issued it (Client._stage); `then` runs after the wait (the copy of a pull's result to
    its device) and gives the result."""

    __slots__ = ("_client", "_ticket", "_keep", "_result", "_done", "_then", "_error")

    def __init__(self, client, ticket, keep, result=None, then=None):
        self._client = client
        self._ticket = ticket
        self._keep = keep
        self._result = result
        self._done = False
        self._then = then
        self._error = None

    def wait(self, timeout=None):
        if not self._done:
            if self._ticket is None:
                self._client._issue_staged(upto=self)
            if self._error is not None:  # issuing it failed (e.g. the client was closed)
                self._done, self._keep = True, None
                raise self._error
            self._client._c.wait(self._ticket, -1.0 if timeout is None else float(timeout))
            self._done = True
            self._keep = None
            if self._then is not None:
                then, self._then = self._then, None
                self._result = then()
        elif self._error is not None:
            raise self._error
        return self._result

    def done(self):
        """True when wait() would not block (on the servers; a device copy may still be queued)."""
        if self._done:
            return True
        if self._ticket is None:
            self._client._issue_staged(upto=None, block=False)
            if self._ticket is None:
                return self._error is not None
        return self._client._c.ready(self._ticket)

    def __del__(self):
        if (not getattr(self, "_done", True) and self._client is not None and
                getattr(self, "_ticket", None) is not None):
            self._client._abandon(self._ticket, self._keep)

class Table:
    """A table of the job by name: sparse (rows of `dim` floats by u64 key) or dense (`size`
    floats). `clock` defaults to the client's clock (the step the worker is at)."""

    def __init__(self, client, name, tid, sparse, dim, size):
        self.client = client
        self.name = name
        self.id = tid
        self.sparse = sparse
        self.dim = dim
        self.size = size

    def __repr__(self):
        kind = f"sparse, dim {self.dim}" if self.sparse else f"dense, {self.size} floats"
        return f"osprey.Table('{self.name}', {kind})"

    def _clock(self, clock):
        return self.client.clock if clock is None else int(clock)

    def pull(self, keys, out=None, clock=None):
        """Rows of `keys` (duplicates allowed) into `out` ([n, dim] float32). Without `out` the
        result is a numpy array for numpy keys, a tensor on the keys' device for tensor keys."""
        self._need(True, "pull")
        _device.check_same_device(f"pull on table '{self.name}'", keys=keys, out=out)
        staging = _device.staging_for(keys if out is None else out)
        if staging is not None:
            return self._pull_staged(staging, keys, out, self._clock(clock))
        self.client._issue_staged()
        k = _as_keys(keys)
        if out is None:
            out = np.empty((k.shape[0], self.dim), dtype=np.float32)
            if _device.is_tensor(keys):
                out = __import__("torch").from_numpy(out)
        o = _as_writable(out)
        t = self.client._c.pull(self.id, k, o, self._clock(clock))
        return Handle(self.client, t, (k, o), out)

    def push(self, keys, grads, clock=None):
        """Gradient rows ([n, dim]) of `keys`; the servers' optimizer applies them."""
        self._need(True, "push")
        _device.check_same_device(f"push on table '{self.name}'", keys=keys, grads=grads)
        staging = _device.staging_for(grads)
        if staging is not None:
            return self._push_staged(staging, keys, grads, self._clock(clock))
        self.client._issue_staged()
        k = _as_keys(keys)
        g = _as_floats(grads, "grads")
        t = self.client._c.push(self.id, k, g, self._clock(clock))
        return Handle(self.client, t, (k, g))

    def pull_dense(self, out=None, clock=None):
        """The dense table's values into `out` (a float32 array or tensor of `size` floats,
        numpy when None)."""
        self._need(False, "pull_dense")
        _device.check_same_device(f"pull_dense on table '{self.name}'", out=out)
        staging = _device.staging_for(out)
        if staging is not None:
            self._check_floats(out, self.size, "pull_dense", "out")
            host = staging.host_empty(tuple(out.shape), out.dtype)
            self.client._issue_staged()
            ticket = self.client._c.pull_dense(self.id, _host_floats(host), self._clock(clock))
            return Handle(self.client, ticket, host, then=lambda: staging.to_device(host, out))
        if out is None:
            out = np.empty(self.size, dtype=np.float32)
        o = _as_writable(out)
        self.client._issue_staged()
        t = self.client._c.pull_dense(self.id, o, self._clock(clock))
        return Handle(self.client, t, o, out)

    def push_dense(self, grads, clock=None):
        self._need(False, "push_dense")
        staging = _device.staging_for(grads)
        if staging is not None:
            self._check_floats(grads, self.size, "push_dense", "grads")
            clock = self._clock(clock)
            (host,), ready = staging.to_host(grads.reshape(-1))
            return self.client._stage(ready, lambda: self.client._c.push_dense(
                self.id, _host_floats(host), clock), keep=host)
        self.client._issue_staged()
        g = _as_floats(grads, "grads")
        t = self.client._c.push_dense(self.id, g, self._clock(clock))
        return Handle(self.client, t, g)

    def init_dense(self, values):
        """Initial values of a dense table unless another worker already gave them (first wins)."""
        self._need(False, "init_dense")
        staging = _device.staging_for(values)
        if staging is not None:
            self._check_floats(values, self.size, "init_dense", "values")
            (host,), ready = staging.to_host(values.reshape(-1))
            return self.client._stage(ready, lambda: self.client._c.init_dense(self.id, _host_floats(host)), keep=host)
        self.client._issue_staged()
        v = _as_floats(values, "values")
        return Handle(self.client, self.client._c.init_dense(self.id, v), v)

    def _pull_staged(self, staging, keys, out, clock):
        """pull with device tensors: the keys to the host (staged when on the device), the rows
        into a pinned buffer, copied to `out` (or a new tensor on the keys' device) after wait()."""
        import torch  # a staged call has tensors: torch is there
        kdev = _device.staging_for(keys)
        if kdev is not None:
            (khost,), ready = kdev.to_host(_int64_keys(keys))
            n = khost.numel()
        else:  # host keys (the test double: CPU keys through staging only when `out` is given)
            khost, ready = _as_keys(keys), None
            n = khost.shape[0]
        if out is None:
            out = staging.device_empty((n, self.dim), torch.float32)
        else:
            self._check_floats(out, n * self.dim, "pull", "out", f" ({n} keys of dim {self.dim})")
        host = staging.host_empty(tuple(out.shape), out.dtype)
        def issue():
            k = khost if isinstance(khost, np.ndarray) else khost.numpy().view(np.uint64)
            return self.client._c.pull(self.id, k, host.numpy().reshape(n, self.dim), clock)
        then = lambda: staging.to_device(host, out)  # noqa: E731
        if ready is None:
            self.client._issue_staged()
            return Handle(self.client, issue(), (khost, host), then=then)
        return self.client._stage(ready, issue, keep=(khost, host), then=then)

    def _push_staged(self, staging, keys, grads, clock):
        """push of device gradients (and keys): issued once their copy to the host completed."""
        n = keys.numel() if _device.is_tensor(keys) else np.asarray(keys).size
        self._check_floats(grads, n * self.dim, "push", "grads", f" ({n} keys of dim {self.dim})")
        if _device.is_tensor(keys):
            (khost, host), ready = staging.to_host(_int64_keys(keys), grads)
            kview = lambda: khost.numpy().view(np.uint64)  # noqa: E731
        else:
            khost = _as_keys(keys)
            (host,), ready = staging.to_host(grads)
            kview = lambda: khost  # noqa: E731
        return self.client._stage(ready, lambda: self.client._c.push(
            self.id, kview(), _host_floats(host), clock), keep=(khost, host))

    def _check_floats(self, t, n, what, name, detail=""):
        if str(t.dtype) != "torch.float32":
            raise TypeError(f"osprey: {what} on table '{self.name}': {name} must be float32, got {t.dtype}")
        if t.numel() != n:
            raise ValueError(f"osprey: {what} on table '{self.name}': {name} has {t.numel()} floats, "
                             f"needs {n}{detail}")

    def _need(self, sparse, what):
        if self.sparse != sparse:
            kind = "sparse" if self.sparse else "dense"
            raise TypeError(f"osprey: {what} on {kind} table '{self.name}'")


def _int64_keys(keys):
    """A key tensor (any device) as 1-D int64, the u64 keys' bits; TypeError for non-integers."""
    import torch
    k = keys.detach().reshape(-1)
    if k.dtype.is_floating_point or k.dtype.is_complex or k.dtype == torch.bool:
        raise TypeError(f"osprey: keys must be integers, got {k.dtype}")
    return k if k.dtype == torch.int64 else k.long()


def _host_floats(host):
    """The float32 numpy view of a staged host tensor (contiguous: staging made it)."""
    return host.numpy().reshape(-1)


def _as_writable(out):
    if _device.is_tensor(out):
        out = out.detach().numpy()
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise TypeError("osprey: `out` must be a C-contiguous float32 array or CPU tensor")
    return out
