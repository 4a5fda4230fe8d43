"""Device (CUDA) tensors for the osprey client: pinned host staging, no libtorch.

The C++ client reads and writes host memory only. A CUDA tensor crosses through a pinned host
buffer from torch's caching host allocator:

  device -> host (keys, gradients): the copy runs on a side stream of the tensor's device that
    first waits for the current stream (so it copies the finished values, not whatever the GPU
    has not computed yet), and records an event. The request that reads the host buffer is issued
    only once that event completed (Client._stage: a FIFO of such requests, issued in order, the
    next client call issues them all, so requests reach the servers in the order they were made,
    as on the CPU). The source tensor is record_stream'ed on the side stream, so its memory is not
    reused before the copy ran.
  host -> device (pulled rows, dense parameters): once the pull's Wait() filled the host buffer
    the copy is enqueued, non_blocking, on the destination's current stream, so the kernels that
    use the result run after it. The caching host allocator does not hand the pinned block out
    again before that copy completed (it records an event for every non_blocking copy).

No call synchronizes the whole device; the only host waits are on the side stream's events, for
values the host itself needs (keys to dedupe, gradients to send).

HostStagingForTests is a test double for a GPU where none exists: CPU tensors through the same
queue, with events that complete only when waited on (stage_cpu_tensors_for_tests).
"""
import threading

_lock = threading.Lock()
_staging = {}  # torch.device -> Staging
_test_staging = None  # HostStagingForTests when the tests route CPU tensors through staging


def _torch():
    import torch
    return torch


def is_tensor(x):
    """A torch tensor (without importing torch): numpy arrays have no .numpy()."""
    return hasattr(x, "numpy") and hasattr(x, "device") and hasattr(x, "data_ptr")


def device_name(x):
    """'cpu' for numpy arrays, host tensors and other array-likes, else the tensor's device."""
    return str(x.device) if is_tensor(x) and x.device.type != "cpu" else "cpu"


def check_same_device(what, **tensors):
    """The one device of the named arguments (None ones skipped) as a string; ValueError naming
    each argument's device when they differ, TypeError for a device other than CPU or CUDA."""
    devices = {name: device_name(x) for name, x in tensors.items() if x is not None}
    for name, dev in devices.items():
        if dev != "cpu" and not dev.startswith("cuda"):
            raise TypeError(f"osprey: {what}: {name} is on {dev}; only CPU and CUDA tensors are supported")
    if len(set(devices.values())) > 1:
        where = ", ".join(f"{name} on {dev}" for name, dev in devices.items())
        raise ValueError(f"osprey: {what}: {where}: put them on one device")
    return next(iter(devices.values()), "cpu")


def staging_for(x):
    """The Staging of tensor x's device, or None when x is host memory the client can use as is."""
    if not is_tensor(x):
        return None
    if x.device.type == "cpu":
        return _test_staging
    return staging_of_device(x.device)


def staging_of_device(device):
    """The Staging of a torch.device (a module's), or None for the host."""
    if device.type == "cpu":
        return _test_staging
    if device.type != "cuda":
        raise TypeError(f"osprey: tensors on {device} are not supported (CPU or CUDA)")
    torch = _torch()
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    with _lock:
        s = _staging.get(device)
        if s is None:
            s = _staging[device] = Staging(device)
        return s


class Staging:
    """Copies between one CUDA device and pinned host buffers (see the module's docstring)."""

    def __init__(self, device):
        torch = _torch()
        self.device = device
        with torch.cuda.device(device):
            self._side = torch.cuda.Stream(device)

    def host_empty(self, shape, dtype):
        """A pinned host tensor (a fresh block of the caching host allocator)."""
        return _torch().empty(shape, dtype=dtype, pin_memory=True)

    def device_empty(self, shape, dtype):
        return _torch().empty(shape, dtype=dtype, device=self.device)

    def to_host(self, *tensors):
        """([host copies], event): the copies of the tensors (as their current stream will have
        them) are complete once event.synchronize() returned or event.query() is True."""
        torch = _torch()
        with torch.cuda.device(self.device):
            self._side.wait_stream(torch.cuda.current_stream(self.device))
            hosts = []
            with torch.cuda.stream(self._side):
                for t in tensors:
                    t = t.detach()
                    host = self.host_empty(t.shape, t.dtype)
                    host.copy_(t, non_blocking=True)
                    t.record_stream(self._side)
                    hosts.append(host)
                event = torch.cuda.Event()
                event.record(self._side)
        return hosts, event

    def to_device(self, host, out=None):
        """Enqueues host -> device on the current stream (into `out`, else a new tensor); returns
        it. A pageable `host` is first copied into pinned memory."""
        torch = _torch()
        if not host.is_pinned():  # a pageable source may make the driver wait for the stream
            host = host.pin_memory()
        with torch.cuda.device(self.device):
            if out is None:
                out = torch.empty(host.shape, dtype=host.dtype, device=self.device)
            out.copy_(host, non_blocking=True)
        return out


class _PendingEvent:
    """HostStagingForTests' event: not complete until synchronize() (so every staged request is
    deferred to the next client call, the order the CUDA path must keep)."""

    def __init__(self):
        self.done = False

    def query(self):
        return self.done

    def synchronize(self):
        self.done = True


class HostStagingForTests(Staging):
    """Test double for a CUDA device where none exists (this machine): CPU tensors go through the
    staging path -- copies into separate host buffers, requests deferred until their event is
    waited for -- so the CPU tests exercise the queue, the copies and their order."""

    def __init__(self):
        self.device = _torch().device("cpu")
        self.copies = 0  # staged copies made (the tests check the path was taken)

    def host_empty(self, shape, dtype):
        return _torch().empty(shape, dtype=dtype)

    def to_host(self, *tensors):
        hosts = []
        for t in tensors:
            hosts.append(t.detach().clone().contiguous())
            self.copies += 1
        return hosts, _PendingEvent()

    def to_device(self, host, out=None):
        self.copies += 1
        if out is None:
            return host.clone()
        with _torch().no_grad():
            out.copy_(host)
        return out


def stage_cpu_tensors_for_tests(on):
    """Routes CPU tensors through HostStagingForTests (on=True) or back to zero-copy (False);
    returns the double (or None)."""
    global _test_staging
    _test_staging = HostStagingForTests() if on else None
    return _test_staging
