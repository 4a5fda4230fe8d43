"""Client.checkpoint(): every live server writes its file (the `osprey checkpoint` code), and a
job restored from it (real servers started with --restore) serves the same rows."""
import os

import numpy as np

import osprey  # noqa: F401

KEYS = np.arange(64, dtype=np.uint64)  # spread over both servers


def push_some(table, clock=None):
    g = np.linspace(-1, 1, KEYS.shape[0] * table.dim, dtype=np.float32).reshape(-1, table.dim)
    table.push(KEYS, g, clock=clock).wait()


def test_checkpoint_then_restore_serves_the_same_rows(make_job, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    job = make_job(extra=f"checkpoint: {{dir: {ckpt}}}\n")
    client = job.connect()
    emb = client.table("emb")
    push_some(emb)
    saved = emb.pull(KEYS).wait().copy()
    assert client.checkpoint(ckpt).wait(timeout=60) == ckpt
    assert sorted(os.listdir(ckpt)) == ["server-0-of-2.ckpt", "server-1-of-2.ckpt"]
    push_some(emb)  # after the checkpoint: not in it
    assert not np.array_equal(emb.pull(KEYS).wait(), saved)
    client.close()
    job.stop()

    restored = make_job(restore=ckpt).connect()
    np.testing.assert_array_equal(restored.table("emb").pull(KEYS).wait(), saved)
    restored.close()


def test_bsp_checkpoint_completes_while_the_worker_trains_on(make_job, tmp_path):
    # Under bsp the cut is at the next clock every server closes: the worker keeps stepping and
    # waits afterwards (waiting at once would hold that clock back until the timeout).
    client = make_job(mode="bsp", extra=f"checkpoint: {{dir: {tmp_path / 'bsp'}}}\n").connect()
    emb, mlp = client.table("emb"), client.table("mlp")

    def train_step():  # every bsp table closes a clock
        push_some(emb, clock=client.clock)
        mlp.push_dense(np.zeros(mlp.size, dtype=np.float32), clock=client.clock).wait()
        client.step()
        emb.pull(KEYS).wait()
        mlp.pull_dense().wait()

    train_step()
    h = client.checkpoint()  # the job's checkpoint.dir
    steps = 0
    while not h.done() and steps < 500:  # the cut needs the clocks after the request to close
        train_step()
        steps += 1
    assert h.wait(timeout=60) is None
    # One file per server. A cut refused by a server that had already passed its clock is retried
    # at a later clock; a server that wrote the refused cut then keeps it under previous-cut/.
    files = sorted(os.listdir(tmp_path / "bsp"))
    assert [f for f in files if f != "previous-cut"] == ["server-0-of-2.ckpt", "server-1-of-2.ckpt"]
    client.close()


def test_checkpoint_without_a_directory_fails_clearly(make_job):
    client = make_job().connect()  # the job config has no checkpoint.dir: the servers refuse
    try:
        client.checkpoint().wait(timeout=60)
    except osprey.OspreyError as e:
        assert "checkpoint" in str(e)
    else:
        raise AssertionError("a checkpoint with no directory anywhere succeeded")
    client.close()
