"""Osprey from Python: a worker's client of a running Osprey job.

    import osprey
    client = osprey.connect()                # the job `osprey launch` runs this script in
    emb = client.table("embeddings")
    h = emb.pull(keys)                       # asynchronous; numpy arrays, torch CPU or CUDA tensors
    rows = h.wait()

Every call that talks to the servers is asynchronous and returns a Handle; Handle.wait() blocks
(GIL released, Ctrl-C interrupts it) until the servers replied, and raises OspreyError carrying
the Status code, the table and the server when something failed. Every wait is bounded by the
job's client.timeout_ms (and by wait's own timeout when given).

CUDA tensors go through pinned host staging (osprey/_device.py): the result of a pull with CUDA
keys or `out` is a CUDA tensor, copied on the current stream; a push of CUDA gradients is issued
once their copy to the host completed. All tensors of one call must be on one device.

numpy is the only dependency; osprey.torch (the server-side EmbeddingBag and the dense
optimizer) imports torch when it is imported.
"""
import os
import re
import threading


from . import _C
from . import data  # noqa: F401  (osprey.data)
from ._table import Handle, Table

__all__ = ["connect", "Client", "Table", "Handle", "OspreyError"]


class OspreyError(RuntimeError):
    """A failed Osprey call. Attributes: code (int, osprey::StatusCode), code_name (e.g.
    "DeadlineExceeded"), message, table (name or None), server (rank or None)."""

    def __init__(self, code, code_name, message):
        super().__init__(f"{code_name}: {message}")
        self.code = code
        self.code_name = code_name
        self.message = message
        m = re.search(r"table '([^']*)'", message)
        self.table = m.group(1) if m else None
        m = re.search(r"servers? (\d+)", message)
        self.server = int(m.group(1)) if m else None


_C._set_error_class(OspreyError)

_ENV_CONFIG = "OSPREY_CONFIG"
_ENV_SETS = "OSPREY_SETS"
_ENV_COORDINATOR = "OSPREY_COORDINATOR"
_ENV_RANK = "OSPREY_RANK"

class _CheckpointHandle:
    """A checkpoint in flight on a thread of its own (the C++ call releases the GIL)."""

    def __init__(self, c, dir, timeout_ms):
        import threading
        self._dir = dir
        self._rc = None
        self._error = None

        def run():
            try:
                self._rc = c.checkpoint(dir, timeout_ms)
            except BaseException as e:  # noqa: B902 - handed to wait()
                self._error = e

        self._thread = threading.Thread(target=run, name="osprey-checkpoint", daemon=True)
        self._thread.start()

    def done(self):
        return not self._thread.is_alive()

    def wait(self, timeout=None):
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"osprey: checkpoint not complete after {timeout} s (still running; wait() again)")
        if self._error is not None:
            raise self._error
        if self._rc != 0:
            raise OspreyError(12, "Internal", "checkpoint failed on some server (`osprey checkpoint`'s "
                              "messages above, on stderr, name it)")
        return self._dir or None

class Client:
    """A worker's membership of a running job (see connect()). Not picklable and not usable in a
    forked child: each process calls osprey.connect() itself."""

    def __init__(self, c):
        self._c = c
        self._pid = os.getpid()
        self._abandoned = []
        self._staged = []  # [ready event, issue(), Handle]: calls waiting for their device copies
        self._staged_mu = threading.RLock()  # backward hooks of CUDA tensors run on autograd's threads
        self._bags = []  # osprey.torch.EmbeddingBags on this client (their pushes are waited in step())
        self.clock = 0  # the worker's step: pulls wait for it under bsp / ssp
        self.rank = c.rank
        self.world_size = c.num_workers
        self.info = c.info()
        self._tables = {}
        for name, tid, sparse, dim, size in c.tables():
            self._tables[name] = Table(self, name, tid, sparse, dim, size)

    def table(self, name):
        """The table called `name`; KeyError listing the job's tables when there is none."""
        try:
            return self._tables[name]
        except KeyError:
            raise KeyError(f"osprey: no table '{name}' in this job; its tables: {', '.join(sorted(self._tables))}") from None

    __getitem__ = table

    @property
    def tables(self):
        return dict(self._tables)

    @property
    def servers(self):
        return self._c.servers()

    def barrier(self, name="barrier", timeout=None):
        """Blocks until every live worker of the job reached barrier `name`."""
        ms = int((timeout if timeout is not None else 10 * self.info["timeout_ms"] / 1000.0) * 1000)
        self._issue_staged()
        self._c.barrier(name, ms)

    def step(self, samples=0, loss=0.0):
        """Advances the clock (one training step done); the heartbeats carry it, with `samples` and `loss`,
        to the launcher's progress line."""
        self.clock += 1
        self._samples = getattr(self, "_samples", 0) + int(samples)
        self._c.set_progress(self.clock, self._samples, float(loss))

    def report(self, steps=None, samples=None, train_seconds=0.0, loss=0.0, auc=None, logloss=0.0,
               oracle_auc=0.0, eval_samples=0):
        """This worker's final report (what `osprey launch` prints); the job is done once every worker sent one."""
        steps = self.clock if steps is None else steps
        samples = getattr(self, "_samples", 0) if samples is None else samples
        self._c.report(int(steps), int(samples), float(train_seconds), float(loss),
                       -1.0 if auc is None else float(auc), float(logloss), float(oracle_auc), int(eval_samples))

    def stats(self):
        return self._c.stats()

    def checkpoint(self, dir=None, timeout=None):
        """Has every live server of the job write its checkpoint (what `osprey checkpoint` does)
        into `dir` (default: the job's checkpoint.dir) and returns a handle at once; its wait()
        returns the directory or raises OspreyError. With bsp tables the checkpoint is a cut at
        the next clock every server closes, so keep training (a worker that waits right away
        would hold that clock back) and wait() later, e.g. after the next opt.step()."""
        self._c.check_usable()
        self._issue_staged()
        ms = int((timeout if timeout is not None else self.info["timeout_ms"] / 1000.0) * 1000)
        return _CheckpointHandle(self._c, "" if dir is None else str(dir), ms)

    def close(self):
        if os.getpid() == self._pid:
            self._issue_staged()
        self._reap(block=True)
        self._c.close()

    def _stage(self, ready, issue, keep, then=None):
        """A call whose inputs are being copied off the device: a Handle without a ticket until
        `ready` (a CUDA event) completed and issue() sent it. Staged calls are issued in order,
        here when their copies are already done, else by the next call of this client (any
        table call, barrier, checkpoint, close) or a wait on them."""
        h = Handle(self, None, keep, then=then)
        with self._staged_mu:
            self._staged.append((ready, issue, h))
        self._issue_staged(block=False)
        return h

    def _issue_staged(self, upto=None, block=True):
        """Issues the staged calls in order: all of them (upto None) or up to Handle `upto`;
        block=False stops at the first whose copy is not complete. Waits only on those copies'
        events. A call that fails to issue keeps its error for its handle's wait()."""
        if not self._staged:
            return
        with self._staged_mu:
            while self._staged:
                ready, issue, h = self._staged[0]
                if not block and not ready.query():
                    return
                ready.synchronize()
                self._staged.pop(0)
                try:
                    h._ticket = issue()
                except Exception as e:  # e.g. the client was closed: the handle's wait() raises it
                    h._error = e
                if h is upto:
                    return

    def _abandon(self, ticket, keep):
        self._abandoned.append((ticket, keep))
        self._reap(block=False)

    def _reap(self, block):
        if os.getpid() != self._pid:
            return
        still = []
        for ticket, keep in self._abandoned:
            try:
                if block or self._c.ready(ticket):
                    self._c.wait(ticket, -1.0)
                    continue
            except Exception:
                continue
            still.append((ticket, keep))
        self._abandoned = still

    def __getstate__(self):
        raise TypeError("osprey.Client cannot be pickled: it holds live connections to the job. Call "
                        "osprey.connect() in each process (e.g. in a DataLoader worker_init_fn), or keep "
                        "the client in the training process and have DataLoader workers only load data")

    def __reduce_ex__(self, protocol):
        self.__getstate__()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def connect(config=None, coordinator=None, rank=None, sets=None, timeout=None):
    """Joins the running job as one of its workers and returns a Client.

    config: the job's YAML (default: $OSPREY_CONFIG, which `osprey launch` sets); sets: extra
    "key=value" overrides (default: $OSPREY_SETS, one per line); coordinator: the coordinator's
    endpoint (default: $OSPREY_COORDINATOR, else the config's); rank: the worker rank to ask for
    (default $OSPREY_RANK, else any); timeout: seconds to wait for every worker to register
    (default cluster.startup_timeout_ms). Raises OspreyError (e.g. DeadlineExceeded naming the
    coordinator when none answers)."""
    config = config or os.environ.get(_ENV_CONFIG)
    if not config:
        raise ValueError("osprey.connect: no job config: pass config=... or run under `osprey launch` "
                         f"(which sets ${_ENV_CONFIG})")
    if sets is None:
        sets = [s for s in os.environ.get(_ENV_SETS, "").split("\n") if s]
    coordinator = coordinator or os.environ.get(_ENV_COORDINATOR, "")
    if rank is None:
        rank = int(os.environ.get(_ENV_RANK, "-1"))
    ms = -1 if timeout is None else max(1, int(timeout * 1000))
    client = Client(_C.JobClient.connect(str(config), list(sets), coordinator, int(rank), ms))
    client._config, client._sets = str(config), list(sets) + ([f"cluster.coordinator={coordinator}"] if coordinator else [])
    return client
