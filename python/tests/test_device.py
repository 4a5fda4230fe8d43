"""Device tensors through the client (osprey/_device.py), against real osprey-server processes:
table calls with tensors on `device` (conftest.py: cpu, cpu-staged, cuda) give what the same
calls on numpy arrays give; staged calls reach the servers in the order they were made; mixed
devices and unsupported ones are clear errors."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the tensor tests need it")
import osprey.torch as ot  # noqa: E402
from osprey import _device  # noqa: E402

DIM = 4


def test_table_calls_on_device_equal_numpy(make_job, device):
    client = make_job().connect()
    emb, mlp = client.table("emb"), client.table("mlp")
    keys = np.array([3, 1, 3, 7], dtype=np.uint64)
    before = emb.pull(keys).wait().copy()
    dkeys = torch.tensor([3, 1, 3, 7], device=device)
    rows = emb.pull(dkeys).wait()  # device keys, no `out`: a tensor on their device
    assert torch.is_tensor(rows) and rows.device.type == device.type and rows.shape == (4, DIM)
    np.testing.assert_array_equal(rows.cpu().numpy(), before)
    out = torch.full((4, DIM), -1.0, device=device)
    assert emb.pull(dkeys, out=out).wait() is out
    np.testing.assert_array_equal(out.cpu().numpy(), before)

    grads = torch.arange(4 * DIM, dtype=torch.float32, device=device).reshape(4, DIM) / 10
    emb.push(dkeys, grads).wait()
    g = grads.cpu().numpy()
    # sgd lr 0.1: key 3 (positions 0 and 2) gets both its gradient rows
    expect = before - 0.1 * np.stack([g[0] + g[2], g[1], g[0] + g[2], g[3]])
    np.testing.assert_allclose(emb.pull(keys).wait(), expect, rtol=1e-6, atol=1e-6)

    dense = mlp.pull_dense().wait().copy()
    dout = torch.zeros(mlp.size, device=device)
    mlp.pull_dense(out=dout).wait()
    np.testing.assert_array_equal(dout.cpu().numpy(), dense)
    dgrad = torch.linspace(-1, 1, mlp.size, device=device)
    mlp.push_dense(dgrad).wait()
    np.testing.assert_allclose(mlp.pull_dense().wait(), dense - 0.1 * dgrad.cpu().numpy(), rtol=1e-6, atol=1e-6)
    client.close()


def test_staged_push_reaches_the_servers_before_a_later_pull(make_job):
    """The test double's copies complete only when waited for, so the push is still queued when
    the pull is made: the pull must issue it first (async tables answer in arrival order)."""
    _device.stage_cpu_tensors_for_tests(True)
    try:
        client = make_job().connect()
        emb = client.table("emb")
        keys = torch.tensor([5, 6])
        before = emb.pull(keys.numpy().astype(np.uint64)).wait().copy()
        h = emb.push(keys, torch.ones(2, DIM))
        assert h._ticket is None, "the double's copy is not complete: the push must still be queued"
        after = emb.pull(keys).wait()  # issues the queued push first
        assert h._ticket is not None
        np.testing.assert_allclose(after.numpy(), before - 0.1, rtol=1e-6)
        h.wait()
        assert not client._staged
        client.close()
    finally:
        _device.stage_cpu_tensors_for_tests(False)


def test_backward_returns_before_the_staged_push_and_step_leaves_none_pending(make_job):
    _device.stage_cpu_tensors_for_tests(True)
    try:
        client = make_job().connect()
        bag = ot.EmbeddingBag(client.table("emb"), mode="sum")
        w = torch.nn.Parameter(torch.zeros(client.table("mlp").size))
        opt = ot.DenseOptimizer([w], client.table("mlp"))
        out = bag(torch.tensor([[1, 2], [2, 3]]))
        (out.sum() + w.sum()).backward()
        assert len(bag._pending) == 1 and bag._pending[0]._ticket is None, "backward waited for its push"
        opt.step()
        assert not bag._pending and not client._staged
        client.close()
    finally:
        _device.stage_cpu_tensors_for_tests(False)


def test_unsupported_device_is_a_clear_error(make_job):
    client = make_job().connect()
    emb = client.table("emb")
    meta = torch.empty(2, dtype=torch.int64, device="meta")
    with pytest.raises(TypeError, match="keys is on meta; only CPU and CUDA"):
        emb.pull(meta)
    bag = ot.EmbeddingBag(emb, mode="sum")
    with pytest.raises(TypeError, match="on meta"):
        bag(meta.reshape(1, 2))
    client.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="mixed devices need a CUDA device (the GPU machine)")
def test_mixed_devices_are_a_clear_error(make_job):
    client = make_job().connect()
    emb, mlp = client.table("emb"), client.table("mlp")
    keys = torch.tensor([1, 2], device="cuda")
    with pytest.raises(ValueError, match="keys on cuda:0, out on cpu: put them on one device"):
        emb.pull(keys, out=torch.zeros(2, DIM))
    with pytest.raises(ValueError, match="keys on cpu, grads on cuda:0"):
        emb.push(torch.tensor([1, 2]), torch.zeros(2, DIM, device="cuda"))
    bag = ot.EmbeddingBag(emb, mode="sum")  # on the CPU
    with pytest.raises(ValueError, match="move the module with .to"):
        bag(keys.reshape(1, 2))
    with pytest.raises(ValueError, match="input on cuda:0, offsets on cpu"):
        bag.to("cuda")(keys, torch.tensor([0]))
    with pytest.raises(ValueError, match="parameter 0 on cpu, parameter 1 on cuda:0"):
        ot.DenseOptimizer([torch.nn.Parameter(torch.zeros(1)),
                           torch.nn.Parameter(torch.zeros(mlp.size - 1, device="cuda"))], mlp)
    client.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU machine)")
def test_cuda_module_takes_cpu_ids(make_job):
    client = make_job().connect()
    emb = client.table("emb")
    init = torch.from_numpy(emb.pull(np.arange(10, dtype=np.uint64)).wait().copy())
    bag = ot.EmbeddingBag(emb, mode="mean", device="cuda")
    ids, offsets = torch.tensor([1, 4, 4, 9]), torch.tensor([0, 3])
    out = bag(ids, offsets)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out.cpu(), torch.nn.functional.embedding_bag(ids, init, offsets, mode="mean"))
    client.close()
