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
        self.coordinator = f"tcp://127.0.0.1:{free_port()}"
        self.config = os.path.join(tmp, "job.yaml")
        text = config_text or CONFIG.format(servers=servers, workers=workers, coordinator=self.coordinator,
                                            mode=mode, timeout_ms=timeout_ms, sparse_opt=sparse_opt,
                                            dense_opt=dense_opt) + extra
        with open(self.config, "w") as f:
            f.write(text)
        self.procs = {}
        self.logs = {}
        self.endpoints = {}  # server process name -> the endpoint it listens on
        self.tmp = tmp
        self.restore = restore  # a checkpoint directory the servers start from (--restore)
        self._start("coordinator", "osprey-coordinator")
        for i in range(servers):
            self._start(f"server-{i}", "osprey-server")

    def _start(self, name, binary):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        self.logs[name] = log
        args = [os.path.join(BIN_DIR, binary), "--config", self.config]
        if binary == "osprey-coordinator":
            args += ["--final-state", os.path.join(self.tmp, "final_state.pb")]
        else:
            self.endpoints[name] = f"tcp://127.0.0.1:{free_port()}"
            args += ["--listen", self.endpoints[name]]
            if self.restore:
                args += ["--restore", self.restore]
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

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
