"""Fixtures of the Python tests: a real job -- osprey-coordinator and osprey-server processes
from the build ($OSPREY_BIN_DIR, which ctest sets) on loopback -- that the test joins as its
worker(s) through osprey.connect(). Every process is stopped by its pid at the end."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

BIN_DIR = os.environ.get("OSPREY_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
SOURCE_DIR = os.environ.get("OSPREY_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))

CONFIG = """
cluster: {{servers: {servers}, workers: {workers}, transport: tcp, host: 127.0.0.1,
          coordinator: "{coordinator}", heartbeat_interval_ms: 200, heartbeat_timeout_ms: 3000,
          startup_timeout_ms: 20000}}
tables:
  - name: emb
    type: sparse
    dim: 4
    init: {{type: uniform, scale: 0.5, seed: 3}}
    optimizer: {sparse_opt}
    consistency: {{mode: {mode}, merge_reduce: mean}}
  - name: mlp
    type: dense
    size: 0
    chunk_floats: 16
    optimizer: {dense_opt}
    consistency: {{mode: {mode}, merge_reduce: mean}}
model: {{type: dlrm, sparse_table: emb, dense_table: mlp, embedding_dim: 4, bottom_mlp: [4], top_mlp: [4, 1]}}
client: {{timeout_ms: {timeout_ms}}}
log: {{level: warn}}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listens_on(pid, port):
    """Whether process `pid` holds a listening TCP socket on `port` (Linux /proc): a stranger that
    took the port first does not count."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(fields[9])
    if not inodes:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Job:
    """A coordinator and `servers` servers of a job whose config is written to a temp file."""

    def __init__(self, tmp, servers=2, workers=1, mode="async", timeout_ms=5000,
                 sparse_opt="{type: sgd, lr: 0.1}", dense_opt="{type: sgd, lr: 0.1}", config_text=None,
                 restore=None, extra=""):
        self.config = os.path.join(tmp, "job.yaml")
        self.text = lambda coordinator: config_text or CONFIG.format(
            servers=servers, workers=workers, coordinator=coordinator, mode=mode, timeout_ms=timeout_ms,
            sparse_opt=sparse_opt, dense_opt=dense_opt) + extra
        self.procs = {}
        self.logs = {}
        self.endpoints = {}  # server process name -> the endpoint it listens on
        self.used_ports = set()
        self.tmp = tmp
        self.restore = restore  # a checkpoint directory the servers start from (--restore)
        self._start("coordinator", "osprey-coordinator")
        for i in range(servers):
            self._start(f"server-{i}", "osprey-server")

    def _start(self, name, binary):
        """Starts the process on a free port and waits until it listens there. A port taken by
        another test between free_port() and the process's bind (ctest runs tests side by side)
        makes the process exit with "address in use": it is started again on another port."""
        for attempt in range(5):
            port = free_port()
            if port in self.used_ports:
                continue
            self.used_ports.add(port)
            endpoint = f"tcp://127.0.0.1:{port}"
            log_path = os.path.join(self.tmp, f"{name}.log")
            log = open(log_path, "w")
            self.logs[name] = log
            args = [os.path.join(BIN_DIR, binary), "--config", self.config]
            if binary == "osprey-coordinator":
                self.coordinator = endpoint
                with open(self.config, "w") as f:
                    f.write(self.text(endpoint))
                args += ["--final-state", os.path.join(self.tmp, "final_state.pb")]
            else:
                self.endpoints[name] = endpoint
                args += ["--listen", endpoint]
                if self.restore:
                    args += ["--restore", self.restore]
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
            self.procs[name] = proc
            wait_for(lambda: proc.poll() is not None or listens_on(proc.pid, port), 30,
                     f"{name} to listen on {endpoint}")
            if proc.poll() is None:
                return
            log.close()
            with open(log_path) as f:
                out = f.read()
            if "address in use" not in out:
                raise AssertionError(f"{name} exited at start:\n{out}")
        raise AssertionError(f"{name}: no free port after 5 attempts")

    def connect(self, **kw):
        import osprey
        return osprey.connect(config=self.config, **kw)

    def kill(self, name, sig=signal.SIGKILL):
        p = self.procs[name]
        p.send_signal(sig)
        p.wait(timeout=10)

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs.values():
            p.wait(timeout=10)
        for log in self.logs.values():
            log.close()


@pytest.fixture
def make_job():
    jobs = []
    dirs = []

    def make(**kw):
        d = tempfile.TemporaryDirectory(prefix="osprey-py-")
        dirs.append(d)
        job = Job(d.name, **kw)
        jobs.append(job)
        return job

    yield make
    for j in jobs:
        j.stop()
    for d in dirs:
        d.cleanup()


def python_with_package():
    return sys.executable


# The devices the tensor tests run on: "cpu" (zero-copy), "cpu-staged" (CPU tensors through the
# CUDA path's staging queue, with osprey._device.HostStagingForTests as the test double for a
# GPU: it runs everywhere) and "cuda" (real CUDA tensors; skipped where torch has no CUDA device).
DEVICES = ["cpu", "cpu-staged", "cuda"]


@pytest.fixture(params=DEVICES)
def device(request):
    torch = pytest.importorskip("torch", reason="torch is not installed: the tensor tests need it")
    from osprey import _device
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch (torch %s, CUDA build %s): the CUDA tests run on the GPU "
                    "machine (bench/python/gpu_build_and_test.sh)" % (torch.__version__, torch.version.cuda))
    double = _device.stage_cpu_tensors_for_tests(request.param == "cpu-staged")
    try:
        yield torch.device("cuda" if request.param == "cuda" else "cpu")
    finally:
        _device.stage_cpu_tensors_for_tests(False)
    if double is not None:
        assert double.copies > 0, "cpu-staged: no tensor went through the staging path"
