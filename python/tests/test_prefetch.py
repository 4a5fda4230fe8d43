"""The prefetcher (EmbeddingBag.prefetch): with slow pulls a step costs about max(compute, pull),
not their sum; a prefetched pull is used only within its staleness bound; backward's pushes are
asynchronous and none is left pending after the optimizer step. Real servers (async tables)."""
import statistics
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the osprey.torch tests need it")
import osprey.torch as ot  # noqa: E402

NUM_KEYS = 40


class DelayedPull:
    """Test double for a slow network (a real one would need tc netem in a network namespace):
    wraps a real pull's handle so that wait() returns no sooner than `delay` s after the pull was
    issued. The pull itself goes to the real servers."""

    def __init__(self, handle, delay):
        self._handle, self._ready_at = handle, time.monotonic() + delay

    def wait(self, timeout=None):
        result = self._handle.wait(timeout)
        time.sleep(max(0.0, self._ready_at - time.monotonic()))
        return result


def delay_pulls(table, delay):
    real = table.pull
    table.pull = lambda *a, **kw: DelayedPull(real(*a, **kw), delay)


def batches(n, seed=5):
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.integers(0, NUM_KEYS, (8, 1))) for _ in range(n)]


def median_step(client, bag, prefetch, compute, steps=6):
    data = batches(steps)
    times = []
    for s in range(steps):
        t = time.monotonic()
        out = bag(data[s])
        if prefetch and s + 1 < steps:
            bag.prefetch(data[s + 1], staleness=1)  # pulled while this step computes
        time.sleep(compute)  # the model's forward and backward
        out.sum().backward()
        bag.wait_pushes()
        client.step()
        times.append(time.monotonic() - t)
    return statistics.median(times[1:])


def test_prefetch_step_time_is_max_of_compute_and_pull(make_job):
    client = make_job().connect()
    table = client.table("emb")
    delay = compute = 0.12
    delay_pulls(table, delay)
    plain = median_step(client, ot.EmbeddingBag(table, mode="sum"), False, compute)
    bag = ot.EmbeddingBag(table, mode="sum")
    fetched = median_step(client, bag, True, compute)
    assert bag.prefetch_hits == 5
    assert plain >= compute + delay, f"without prefetch a step took {plain:.3f} s: the delay is not injected"
    assert fetched < 0.75 * (compute + delay), (
        f"with prefetch a step took {fetched:.3f} s, not about max(compute, pull) = {max(compute, delay)} s "
        f"(without: {plain:.3f} s)")
    client.close()


def test_prefetched_rows_are_used_only_within_the_staleness_bound(make_job):
    client = make_job().connect()  # async tables
    table = client.table("emb")
    bag = ot.EmbeddingBag(table, mode="sum")
    x = batches(1)[0]
    keys = x.reshape(-1).numpy().astype(np.uint64)
    grads = np.ones((keys.shape[0], table.dim), dtype=np.float32)

    bag.prefetch(x, staleness=1)
    table.push(keys, grads).wait()
    client.step()  # one clock later: within the bound
    bag(x)
    assert (bag.prefetch_hits, bag.last_staleness) == (1, 1)

    bag.prefetch(x, staleness=1)
    for _ in range(2):  # two clocks of updates: past the bound
        table.push(keys, grads).wait()
        client.step()
    out = bag(x)
    assert bag.prefetch_hits == 1, "a prefetch two clocks old was used with staleness=1"
    np.testing.assert_array_equal(out.detach().numpy(), table.pull(keys).wait())  # pulled afresh
    with pytest.raises(ValueError):
        bag.prefetch(x, staleness=-1)
    client.close()


def test_backward_push_is_asynchronous_and_the_optimizer_step_collects_it(make_job):
    client = make_job().connect()
    bag = ot.EmbeddingBag(client.table("emb"), mode="sum")
    w = torch.nn.Parameter(torch.linspace(-1, 1, client.table("mlp").size))
    opt = ot.DenseOptimizer([w], client.table("mlp"))
    for x in batches(3):
        loss = (bag(x) * w[:4]).sum()
        opt.zero_grad()
        loss.backward()
        assert len(bag._pending) == 1, "backward did not leave its push in flight"
        opt.step()
        assert bag._pending == [], "a push is still pending after the optimizer step"
    client.close()
