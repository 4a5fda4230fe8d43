"""Exactness: after k steps the servers' rows (and dense weights) equal a pure-PyTorch model --
nn.EmbeddingBag(sparse=True) + torch.optim.SGD / Adagrad -- trained on the same data, against
real osprey-server processes. Every test taking `device` runs on the CPU, on the CPU through the
staging path (conftest.py) and on CUDA where torch sees a GPU; the reference runs on the CPU."""
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the osprey.torch tests need it")
import osprey.torch as ot  # noqa: E402

NUM_KEYS = 40
STEPS = 4


def initial_rows(table):
    return table.pull(np.arange(NUM_KEYS, dtype=np.uint64)).wait().copy()


def batches(case, rng):
    """(input, offsets, per_sample_weights) triples for one case; keys in [0, NUM_KEYS)."""
    out = []
    for _ in range(STEPS):
        if case in ("2d", "2d_one"):  # 2d_one: one id per bag (the gather fast path), duplicates likely
            shape = (6, 3) if case == "2d" else (30, 1)
            out.append((torch.from_numpy(rng.integers(0, NUM_KEYS, shape)), None, None))
            continue
        n = 20
        ids = torch.from_numpy(rng.integers(0, NUM_KEYS, n))
        if case == "duplicates":
            ids[:8] = 5  # one key many times, within a bag and across bags
        cuts = np.sort(rng.integers(0, n, 5))
        if case == "empty_bags":
            cuts = np.array([0, 0, 4, 4, 4, 13, n])  # bags 0, 2, 3 and the last are empty
        else:
            cuts[0] = 0
        offsets = torch.from_numpy(cuts.astype(np.int64))
        psw = torch.from_numpy(rng.random(n).astype(np.float32)) if case == "per_sample_weights" else None
        out.append((ids, offsets, psw))
    return out


CASES = [("sum", "offsets", False), ("mean", "offsets", False), ("sum", "2d", False), ("mean", "2d", False),
         ("sum", "2d_one", False), ("mean", "2d_one", False),
         ("sum", "include_last_offset", True), ("mean", "empty_bags", False), ("sum", "per_sample_weights", False),
         ("mean", "duplicates", False), ("sum", "duplicates", False)]


def run_case(job_factory, mode, case, include_last, optimizer, device=None):
    device = device or torch.device("cpu")
    sparse_opt = "{type: sgd, lr: 0.1}" if optimizer == "sgd" else "{type: adagrad, lr: 0.1, initial_accumulator: 0.01}"
    job = job_factory(sparse_opt=sparse_opt)
    client = job.connect()
    table = client.table("emb")
    init = initial_rows(table)
    ref = torch.nn.EmbeddingBag(NUM_KEYS, 4, mode=mode, sparse=True, include_last_offset=include_last)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(init))
    ref_opt = (torch.optim.SGD(ref.parameters(), lr=0.1) if optimizer == "sgd" else
               torch.optim.Adagrad(ref.parameters(), lr=0.1, initial_accumulator_value=0.01, eps=1e-8))
    bag = ot.EmbeddingBag(table, mode=mode, include_last_offset=include_last).to(device)
    assert bag.device.type == device.type
    rng = np.random.default_rng(11)
    for ids, offsets, psw in batches(case, rng):
        if include_last:
            offsets = torch.cat([offsets, torch.tensor([ids.numel()])])
        nbags = ids.shape[0] if ids.dim() == 2 else offsets.numel() - (1 if include_last else 0)
        target = torch.from_numpy(rng.standard_normal((nbags, 4)).astype(np.float32))
        on = lambda t: None if t is None else t.to(device)  # noqa: E731
        out = bag(on(ids), on(offsets), per_sample_weights=on(psw))
        assert out.device.type == device.type
        ((out - on(target)) ** 2).sum().backward()
        bag.wait_pushes()
        client.step()
        ref_opt.zero_grad()
        ref_out = ref(ids, offsets, per_sample_weights=psw)
        torch.testing.assert_close(out.detach().cpu(), ref_out.detach(), rtol=1e-5, atol=1e-6)  # same forward
        ((ref_out - target) ** 2).sum().backward()
        ref_opt.step()
    got = initial_rows(table)
    np.testing.assert_allclose(got, ref.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, init), "training changed nothing: the test would not see a wrong update"
    client.close()


@pytest.mark.parametrize("mode,case,include_last", CASES)
def test_rows_equal_pytorch_sgd(make_job, mode, case, include_last, device):
    run_case(make_job, mode, case, include_last, "sgd", device)


@pytest.mark.parametrize("mode,case", [("sum", "offsets"), ("mean", "duplicates")])
def test_rows_equal_pytorch_adagrad(make_job, mode, case, device):
    run_case(make_job, mode, case, False, "adagrad", device)


def test_unsupported_options_raise(make_job):
    job = make_job()
    client = job.connect()
    table = client.table("emb")
    for kw in ({"mode": "max"}, {"padding_idx": 0}, {"max_norm": 1.0}):
        with pytest.raises(NotImplementedError):
            ot.EmbeddingBag(table, **kw)
    with pytest.raises(TypeError, match="dense"):
        ot.EmbeddingBag(client.table("mlp"))


def dense_reference(steps, grads_of, lr):
    w = torch.nn.Parameter(grads_of.init.clone())
    opt = torch.optim.SGD([w], lr=lr)
    for s in range(steps):
        opt.zero_grad()
        grads_of.loss(w, s).backward()
        opt.step()
    return w.detach()


class DenseProblem:
    def __init__(self, size, workers):
        g = torch.Generator().manual_seed(5)
        self.init = torch.randn(size, generator=g)
        self.a = torch.randn(workers, 8, size, generator=g) / size ** 0.5  # well conditioned: lr 0.1 converges

    def worker_loss(self, w, rank, step):
        return ((w * self.a[rank].to(w.device)).sum(dim=1) - step).pow(2).mean()

    def loss(self, w, step):  # the averaged-gradient reference: mean over workers
        return sum(self.worker_loss(w, r, step) for r in range(self.a.shape[0])) / self.a.shape[0]


def train_dense(client, problem, rank, steps, out, device=None):
    table = client.table("mlp")
    w = torch.nn.Parameter(problem.init.clone().to(device or "cpu"))
    opt = ot.DenseOptimizer([w], table)
    for s in range(steps):
        opt.zero_grad()
        problem.worker_loss(w, rank, s).backward()
        opt.step()
    assert w.device.type == (device or torch.device("cpu")).type
    out[rank] = w.detach().cpu().clone()


def test_dense_equals_pytorch_sgd(make_job, device):
    job = make_job()
    client = job.connect()
    problem = DenseProblem(client.table("mlp").size, 1)
    out = {}
    train_dense(client, problem, 0, STEPS, out, device)
    ref = dense_reference(STEPS, problem, 0.1)
    torch.testing.assert_close(out[0], ref, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out[0], problem.init)


def test_two_workers_bsp_mean_equal_averaged_gradient(make_job, tmp_path):
    job = make_job(workers=2, mode="bsp")
    script = os.path.join(os.path.dirname(__file__), "dense_worker.py")
    out = str(tmp_path / "w")
    procs = [subprocess.Popen([sys.executable, script, job.config, out]) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0, "a worker process failed"
    size = len(np.load(out + ".0.npy"))
    ref = dense_reference(STEPS, DenseProblem(size, 2), 0.1).numpy()
    for r in range(2):
        np.testing.assert_allclose(np.load(out + f".{r}.npy"), ref, rtol=1e-5, atol=1e-5)


def train_with_prefetch(job, prefetch, device=None):
    client = job.connect()
    table = client.table("emb")
    bag = ot.EmbeddingBag(table, mode="sum").to(device or "cpu")
    w = torch.nn.Parameter(torch.linspace(-1, 1, client.table("mlp").size).to(device or "cpu"))
    opt = ot.DenseOptimizer([w], client.table("mlp"))
    rng = np.random.default_rng(3)
    data = [torch.from_numpy(rng.integers(0, NUM_KEYS, (8, 3))).to(device or "cpu") for _ in range(STEPS + 1)]
    for s in range(STEPS):
        out = bag(data[s])
        loss = ((out * w[:4]).sum(1) - 1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step(overlap=(lambda: bag.prefetch(data[s + 1])) if prefetch else None)
    assert bag.prefetch_hits == (STEPS - 1 if prefetch else 0)
    rows = initial_rows(table)
    client.close()
    return rows, w.detach().cpu().numpy().copy()


def test_bsp_prefetch_is_bit_identical_to_no_prefetch(make_job, device):
    plain = train_with_prefetch(make_job(mode="bsp"), prefetch=False, device=device)
    fetched = train_with_prefetch(make_job(mode="bsp"), prefetch=True, device=device)
    np.testing.assert_array_equal(plain[0], fetched[0])
    np.testing.assert_array_equal(plain[1], fetched[1])


def test_embedding_bag_collection_equals_pytorch_per_feature(make_job, device):
    client = make_job().connect()
    table = client.table("emb")
    init = torch.from_numpy(initial_rows(table))
    ebc = ot.EmbeddingBagCollection({"user": table, "item": table}, mode="sum").to(device)
    feats = {"user": (torch.tensor([1, 2, 2, 7]), torch.tensor([0, 1])),
             "item": (torch.tensor([3, 9, 1]), torch.tensor([0, 2]))}
    out = ebc({f: (v.to(device), o.to(device)) for f, (v, o) in feats.items()})
    assert set(out) == {"user", "item"}
    for f, (values, offsets) in feats.items():
        ref = torch.nn.functional.embedding_bag(values, init, offsets, mode="sum")
        assert out[f].device.type == device.type
        torch.testing.assert_close(out[f].detach().cpu(), ref)
    sum(o.sum() for o in out.values()).backward()
    ebc.wait_pushes()
    rows = initial_rows(table)
    # d(sum)/d(row) is the row's count over both features; SGD lr 0.1.
    counts = torch.zeros(NUM_KEYS)
    for values, _ in feats.values():
        counts.index_add_(0, values, torch.ones(len(values)))
    np.testing.assert_allclose(rows, (init - 0.1 * counts[:, None]).numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(KeyError, match="unknown features"):
        ebc({"nope": feats["user"]})
