"""Failures surface as clear Python errors, never hangs: a killed server, no coordinator, an unknown
table, Ctrl-C during a wait, a forked child, pickling, a bad array."""
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

import osprey
from conftest import free_port, wait_for


def keys_on_both_servers():
    return np.arange(64, dtype=np.uint64)  # hashed over the 2 servers: both own some


def test_killed_server_wait_raises_naming_it(make_job):
    job = make_job(timeout_ms=1500)
    client = job.connect()
    emb = client.table("emb")
    emb.pull(keys_on_both_servers()).wait()
    rank = client.servers.index(job.endpoints["server-1"])  # ranks follow registration order
    job.kill("server-1")
    t0 = time.monotonic()
    with pytest.raises(osprey.OspreyError) as e:
        emb.pull(keys_on_both_servers()).wait()
    waited = time.monotonic() - t0
    assert waited < 1.5 + 8.0, f"the wait took {waited:.1f} s, far past the 1.5 s client timeout"
    assert e.value.code_name == "DeadlineExceeded", str(e.value)
    assert e.value.server == rank, str(e.value)
    assert e.value.table == "emb", str(e.value)
    assert f"server {rank}" in str(e.value)


def test_no_coordinator_raises(tmp_path):
    config = tmp_path / "job.yaml"
    import conftest
    config.write_text(conftest.CONFIG.format(servers=1, workers=1, coordinator=f"tcp://127.0.0.1:{free_port()}",
                                             mode="async", timeout_ms=1000, sparse_opt="{type: sgd, lr: 0.1}",
                                             dense_opt="{type: sgd, lr: 0.1}"))
    t0 = time.monotonic()
    with pytest.raises(osprey.OspreyError) as e:
        osprey.connect(config=str(config), timeout=1.0)
    assert time.monotonic() - t0 < 10
    assert "coordinator" in str(e.value), str(e.value)
    assert e.value.code_name == "DeadlineExceeded", str(e.value)


def test_missing_config_is_a_clear_error():
    with pytest.raises(osprey.OspreyError, match="NotFound"):
        osprey.connect(config="/nonexistent/job.yaml", timeout=1.0)
    env = os.environ.pop("OSPREY_CONFIG", None)
    try:
        with pytest.raises(ValueError, match="osprey launch"):
            osprey.connect()
    finally:
        if env is not None:
            os.environ["OSPREY_CONFIG"] = env


def test_unknown_table_lists_tables(make_job):
    client = make_job().connect()
    with pytest.raises(KeyError) as e:
        client.table("embedings")
    assert "emb, mlp" in str(e.value)
    with pytest.raises(TypeError, match="dense"):
        client.table("mlp").pull(np.arange(3))


def test_bad_arrays_are_clear_errors(make_job):
    client = make_job().connect()
    emb = client.table("emb")
    with pytest.raises(osprey.OspreyError, match="3 keys need 12 floats"):
        emb.push(np.arange(3), np.zeros((3, 5), dtype=np.float32))
    with pytest.raises(osprey.OspreyError, match="has 1485 floats"):
        client.table("mlp").push_dense(np.zeros(7, dtype=np.float32))
    with pytest.raises(TypeError, match="integers"):
        emb.pull(np.array([0.5, 1.5]))


def test_pickling_is_refused(make_job):
    client = make_job().connect()
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(client)


def test_forked_child_gets_a_clear_error(make_job):
    client = make_job().connect()
    emb = client.table("emb")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what using the parent's client did, then leave at once
        try:
            emb.pull(np.arange(4)).wait()
            msg = b"no error"
        except osprey.OspreyError as e:
            msg = str(e).encode()
        except BaseException as e:  # noqa: B902 - any other outcome is a failure to report
            msg = repr(e).encode()
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    msg = os.read(r, 4096).decode()
    os.close(r)
    assert os.WIFEXITED(status), "the child crashed"
    assert "forked child" in msg and "osprey.connect()" in msg, msg
    emb.pull(np.arange(4)).wait()  # the parent's client still works


def process_state(pid):
    """'T' once every thread of PID is stopped (/proc/PID/task/*/stat), else another state letter:
    on a loaded machine a signalled server's threads may run a little longer, long enough to
    answer a pull."""
    states = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/stat") as f:
            states.add(f.read().rsplit(")", 1)[1].split()[0])
    return "T" if states == {"T"} else "".join(sorted(states))


def test_ctrl_c_interrupts_a_wait(make_job):
    job = make_job(timeout_ms=20000)
    client = job.connect()
    # A stopped (SIGSTOP) server answers nothing: the wait would block for the 20 s timeout.
    job.procs["server-0"].send_signal(signal.SIGSTOP)
    wait_for(lambda: process_state(job.procs["server-0"].pid) == "T", 10, "server-0 to be stopped")
    h = client.table("emb").pull(keys_on_both_servers())
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        h.wait()
    assert time.monotonic() - t0 < 10.0, "the wait ran on towards the 20 s client timeout"
    with pytest.raises(TimeoutError, match="still in flight"):
        h.wait(timeout=0.2)
    job.procs["server-0"].send_signal(signal.SIGCONT)
    h.wait(timeout=10)  # the request completes once the server runs again


def test_backward_returns_before_the_push_completes(make_job):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import osprey.torch as ot
    job = make_job(timeout_ms=20000)
    client = job.connect()
    bag = ot.EmbeddingBag(client.table("emb"), mode="sum")
    out = bag(torch.arange(64).reshape(16, 4))
    for name in ("server-0", "server-1"):  # from now on nothing is answered
        job.procs[name].send_signal(signal.SIGSTOP)
    for name in ("server-0", "server-1"):  # (once every thread has stopped: see process_state)
        wait_for(lambda: process_state(job.procs[name].pid) == "T", 10, f"{name} to be stopped")
    try:
        t0 = time.monotonic()
        out.sum().backward()
        assert time.monotonic() - t0 < 10.0, "backward waited for the push (the client timeout is 20 s)"
        assert len(bag._pending) == 1 and not bag._pending[0].done()
    finally:
        for name in ("server-0", "server-1"):
            job.procs[name].send_signal(signal.SIGCONT)
    bag.wait_pushes(timeout=10)
    assert not bag._pending
