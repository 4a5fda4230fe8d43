#!/usr/bin/env python3
"""PyTorch reference for Osprey's DLRM with every embedding table on one GPU.

The model is the one worker/models/dlrm.h describes:

    z_0     = bottom_mlp(dense)               ReLU after every layer; last width = --dim
    z_{f+1} = embedding row of sparse feature f (one nn.EmbeddingBag per feature, sum, bags of 1)
    t       = [z_0 | z_i . z_j for 0 <= i < j <= F]   pairs in Osprey's order (0,1), (0,2), ...,
                                                      (0,F), (1,2), ..., (F-1,F)
    logit   = top_mlp(t)                      ReLU on hidden layers, last layer linear
    loss    = mean binary cross-entropy with logits

trained with torch.optim.SGD (sparse gradients for the tables, dense for the MLPs), or Adagrad /
SparseAdam+Adam with --optimizer. The data are generated on the GPU before timing, a pool of
--pool batches reused round-robin: ids of feature f ~ Zipf(--zipf-alpha) over [0, cardinality_f)
(exact inverse-CDF sampling from a power-law table, ranks scattered by a multiplicative hash mod
the cardinality so that the hot ids are not 0, 1, 2...), dense features log1p(floor(lognormal)),
labels Bernoulli(sigmoid(a random planted logit)). No host work or copies inside the timed loop.

Timing: --warmup steps, then --windows windows of --steps training steps each, every window timed
with CUDA events; ms_per_step is the median window's time / --steps. Prints a table and, with
--json PATH, writes a list of records
    {"case": "torch_reference", "batch": B, "samples_per_sec": X, "ms_per_step": Y, "device": name,
     ...the configuration...}

Run on a GPU machine (PyTorch 2.x with CUDA), from the repository root:

    python3 bench/reference/dlrm_torch.py                          # Kaggle tables, batch 2048 16384
    python3 bench/reference/dlrm_torch.py --tf32 off --json /tmp/ref.json
    python3 bench/reference/dlrm_torch.py --tables fused           # one concatenated table
    python3 bench/reference/dlrm_torch.py --check                  # CPU self-check, seconds

The Kaggle tables at --dim 16 in fp32 take ~2.2 GB (plus optimizer state: none for SGD, as much
again for Adagrad, twice for SparseAdam). --check runs on the CPU with small cardinalities and
compares the interaction with an explicit loop; it prints SKIP and exits 0 when torch is missing.
"""
import argparse
import json
import math
import statistics
import sys

# The 26 sparse cardinalities of the Criteo Kaggle (Display Advertising Challenge) data set, as in
# osprey::data::SyntheticGenerator::CriteoKaggleCardinalities().
KAGGLE_CARDINALITIES = [
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
    5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
]
# Odd prime larger than any cardinality we accept, so rank * A mod n is a bijection of [0, n).
HASH_MULTIPLIER = 2654435761
MAX_CARDINALITY = 1 << 31


def parse_ints(text, name):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"dlrm_torch: --{name}: expected a comma list of integers, got {text!r}")
    if not values or min(values) < 1:
        raise SystemExit(f"dlrm_torch: --{name}: every value must be >= 1, got {text!r}")
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", nargs="+", default=["2048", "16384"], help="batch sizes to time (spaces or commas)")
    p.add_argument("--steps", type=int, default=50, help="training steps per timed window")
    p.add_argument("--windows", type=int, default=5, help="timed windows; the median is reported")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before the first window")
    p.add_argument("--pool", type=int, default=64, help="pre-generated batches, reused round-robin")
    p.add_argument("--dim", type=int, default=16, help="embedding dimension")
    p.add_argument("--num-dense", type=int, default=13)
    p.add_argument("--bottom", default="512,256,64,16", help="bottom MLP widths; last = --dim")
    p.add_argument("--top", default="512,256,1", help="top MLP widths; last = 1")
    p.add_argument("--cardinalities", default="kaggle", help="'kaggle' or a comma list")
    p.add_argument("--zipf-alpha", type=float, default=1.05)
    p.add_argument("--optimizer", choices=["sgd", "adagrad", "sparseadam"], default="sgd")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--tables", choices=["per-feature", "fused"], default="per-feature",
                   help="one EmbeddingBag per feature (default) or one over all features' rows")
    p.add_argument("--tf32", choices=["on", "off"], default="on", help="TF32 matmuls in the MLPs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default="", help="write the records to this path")
    p.add_argument("--check", action="store_true", help="CPU self-check of the model, then exit")
    args = p.parse_args(argv)
    args.batch = parse_ints(",".join(args.batch), "batch")
    args.bottom_widths = parse_ints(args.bottom, "bottom")
    args.top_widths = parse_ints(args.top, "top")
    if args.cardinalities == "kaggle":
        args.cards = list(KAGGLE_CARDINALITIES)
    else:
        args.cards = parse_ints(args.cardinalities, "cardinalities")
    if max(args.cards) >= MAX_CARDINALITY:
        raise SystemExit(f"dlrm_torch: --cardinalities: each must be < 2^31, got {max(args.cards)}")
    if args.bottom_widths[-1] != args.dim:
        raise SystemExit(f"dlrm_torch: --bottom: last width {args.bottom_widths[-1]} must equal --dim {args.dim}")
    if args.top_widths[-1] != 1:
        raise SystemExit(f"dlrm_torch: --top: last width must be 1 (the logit), got {args.top_widths[-1]}")
    if args.steps < 1 or args.windows < 1 or args.pool < 1 or args.warmup < 0:
        raise SystemExit("dlrm_torch: --steps, --windows, --pool must be >= 1 and --warmup >= 0")
    if args.zipf_alpha <= 0:
        raise SystemExit("dlrm_torch: --zipf-alpha must be > 0")
    return args


def build_model(torch, args, cards, device):
    nn = torch.nn

    def mlp(widths, in_dim, relu_last):
        layers = []
        for i, out in enumerate(widths):
            linear = nn.Linear(in_dim, out, device=device)
            last = i + 1 == len(widths)
            relu = relu_last or not last
            # As Dlrm::InitDense: He for ReLU layers, Glorot for the final linear one, zero biases.
            std = math.sqrt(2.0 / in_dim) if relu else math.sqrt(2.0 / (in_dim + out))
            nn.init.normal_(linear.weight, 0.0, std)
            nn.init.zeros_(linear.bias)
            layers.append(linear)
            if relu:
                layers.append(nn.ReLU())
            in_dim = out
        return nn.Sequential(*layers)

    class Dlrm(nn.Module):
        """DLRM as in worker/models/dlrm.h; forward(dense [B, num_dense], ids [B, F] int64) -> logits [B]."""

        def __init__(self):
            super().__init__()
            self.num_sparse = len(cards)
            self.dim = args.dim
            self.bottom = mlp(args.bottom_widths, args.num_dense, relu_last=True)
            vectors = self.num_sparse + 1
            self.top_in = args.dim + vectors * (vectors - 1) // 2
            self.top = mlp(args.top_widths, self.top_in, relu_last=False)
            # Row-major upper triangle: (0,1), (0,2), ..., (1,2), ... -- Osprey's pair order.
            iu = torch.triu_indices(vectors, vectors, offset=1)
            self.register_buffer("pair_i", iu[0].clone(), persistent=False)
            self.register_buffer("pair_j", iu[1].clone(), persistent=False)
            self.fused = args.tables == "fused"
            if self.fused:
                self.table = nn.EmbeddingBag(sum(cards), args.dim, mode="sum", sparse=True, device=device)
                offsets = torch.tensor([0] + list(cards[:-1]), dtype=torch.int64).cumsum(0)
                self.register_buffer("row_offsets", offsets, persistent=False)
                bound = 1.0 / math.sqrt(max(cards))
                nn.init.uniform_(self.table.weight, -bound, bound)
            else:
                self.tables = nn.ModuleList(
                    [nn.EmbeddingBag(n, args.dim, mode="sum", sparse=True, device=device) for n in cards])
                for n, t in zip(cards, self.tables):
                    bound = 1.0 / math.sqrt(n)
                    nn.init.uniform_(t.weight, -bound, bound)

        def embed(self, ids):
            """[B, F] ids -> [B, F, dim] rows (bags of one id)."""
            b = ids.shape[0]
            if self.fused:
                rows = self.table((ids + self.row_offsets).reshape(-1, 1))
                return rows.view(b, self.num_sparse, self.dim)
            return torch.stack([t(ids[:, f:f + 1]) for f, t in enumerate(self.tables)], dim=1)

        def interact(self, z0, rows):
            """[B, dim], [B, F, dim] -> [B, top_in] = [z0 | z_i . z_j, i < j]."""
            z = torch.cat([z0.unsqueeze(1), rows], dim=1)  # [B, F+1, dim]
            gram = torch.bmm(z, z.transpose(1, 2))          # [B, F+1, F+1]
            return torch.cat([z0, gram[:, self.pair_i, self.pair_j]], dim=1)

        def forward(self, dense, ids):
            z0 = self.bottom(dense)
            return self.top(self.interact(z0, self.embed(ids))).squeeze(1)

        def sparse_parameters(self):
            return [self.table.weight] if self.fused else [t.weight for t in self.tables]

        def dense_parameters(self):
            return list(self.bottom.parameters()) + list(self.top.parameters())

    return Dlrm().to(device)  # the index buffers; parameters are made on the device directly


def make_optimizers(torch, model, args):
    sparse, dense = model.sparse_parameters(), model.dense_parameters()
    if args.optimizer == "sgd":
        return [torch.optim.SGD(sparse, lr=args.lr), torch.optim.SGD(dense, lr=args.lr)]
    if args.optimizer == "adagrad":  # Adagrad takes sparse gradients
        return [torch.optim.Adagrad(sparse, lr=args.lr, initial_accumulator_value=0.01),
                torch.optim.Adagrad(dense, lr=args.lr, initial_accumulator_value=0.01)]
    return [torch.optim.SparseAdam(sparse, lr=args.lr), torch.optim.Adam(dense, lr=args.lr)]


def zipf_ids(torch, n, alpha, count, salt, generator, device):
    """count ids of Zipf(alpha) over [0, n): P(rank k) ~ (k + 1)^-alpha, ranks scattered by a hash."""
    # Exact inverse CDF: float64 cumulative power-law table (n entries, transient), then binary search.
    cdf = torch.arange(1, n + 1, dtype=torch.float64, device=device).pow_(-alpha).cumsum_(0)
    cdf /= cdf[-1].clone()
    u = torch.rand(count, dtype=torch.float64, device=device, generator=generator)
    ranks = torch.searchsorted(cdf, u, right=True).clamp_(max=n - 1)
    del cdf
    # rank -> (rank * A + salt) mod n is a bijection (A is a prime > n), so hot ranks land anywhere.
    return (ranks * HASH_MULTIPLIER + salt % n) % n


def make_pool(torch, args, cards, batch, device):
    """The timed loop's data: dense [P, B, num_dense], ids [P, B, F] int64, labels [P, B]."""
    g = torch.Generator(device=device)
    g.manual_seed(args.seed * 1000003 + batch)
    count = args.pool * batch
    num_sparse = len(cards)
    ids = torch.empty(count, num_sparse, dtype=torch.int64, device=device)
    for f, n in enumerate(cards):
        ids[:, f] = zipf_ids(torch, n, args.zipf_alpha, count, 7919 * (f + 1) + args.seed, g, device)
    # Dense: log1p(floor(lognormal)) with per-feature location / scale, as Criteo counts after the
    # reader's preprocessing.
    mu = torch.rand(args.num_dense, device=device, generator=g) * 3.0
    sigma = 0.5 + torch.rand(args.num_dense, device=device, generator=g)
    normal = torch.randn(count, args.num_dense, device=device, generator=g)
    dense = torch.log1p(torch.floor(torch.exp(mu + sigma * normal)))
    # Planted logit: a linear term on the standardised dense features plus a weight per (hashed) id.
    v = torch.randn(args.num_dense, device=device, generator=g) / math.sqrt(max(args.num_dense, 1))
    std = (dense - dense.mean(0)) / dense.std(0).clamp_min(1e-6)
    logit = -1.3 + std @ v
    buckets = 1 << 16
    w = torch.randn(num_sparse, buckets, device=device, generator=g) / math.sqrt(max(num_sparse, 1))
    feature = torch.arange(num_sparse, device=device)
    logit += w[feature, (ids * 40503 + feature) % buckets].sum(1)
    labels = torch.bernoulli(torch.sigmoid(logit), generator=g)
    shape = (args.pool, batch)
    return dense.view(*shape, args.num_dense), ids.view(*shape, num_sparse), labels.view(*shape)


def train_step(torch, model, optimizers, dense, ids, labels):
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(dense, ids), labels)
    loss.backward()
    for opt in optimizers:
        opt.step()
    return loss


def time_batch(torch, model, optimizers, args, cards, batch, device):
    dense, ids, labels = make_pool(torch, args, cards, batch, device)
    torch.cuda.synchronize()
    step = 0

    def run(steps):
        nonlocal step
        loss = None
        for _ in range(steps):
            k = step % args.pool
            loss = train_step(torch, model, optimizers, dense[k], ids[k], labels[k])
            step += 1
        return loss

    run(args.warmup)
    torch.cuda.synchronize()
    times = []
    for _ in range(args.windows):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        loss = run(args.steps)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / args.steps)
    final_loss = float(loss.detach()) if loss is not None else float("nan")
    del dense, ids, labels
    torch.cuda.empty_cache()
    return statistics.median(times), min(times), final_loss


def benchmark(torch, args):
    if not torch.cuda.is_available():
        print("dlrm_torch: torch sees no CUDA device (use --check for the CPU self-check)", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high" if args.tf32 == "on" else "highest")
    torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
    name = torch.cuda.get_device_name(device)
    model = build_model(torch, args, args.cards, device)
    optimizers = make_optimizers(torch, model, args)
    rows = sum(args.cards)
    print(f"# torch {torch.__version__} on {name}; DLRM {args.num_dense} dense, {len(args.cards)} sparse "
          f"({rows} rows, {rows * args.dim * 4 / 2**30:.2f} GiB fp32), d {args.dim}, "
          f"bottom {args.num_dense}-{args.bottom}, top {model.top_in}-{args.top}")
    print(f"# {args.tables} tables, {args.optimizer} lr {args.lr}, tf32 {args.tf32}, Zipf({args.zipf_alpha}) ids, "
          f"pool {args.pool} batches on the GPU; median of {args.windows} windows of {args.steps} steps "
          f"after {args.warmup} warm-up (CUDA events)")
    print(f"{'batch':>7}  {'ms_per_step':>11}  {'min_ms':>8}  {'samples_per_sec':>15}  {'loss':>8}")
    records = []
    for batch in args.batch:
        try:
            ms, best, loss = time_batch(torch, model, optimizers, args, args.cards, batch, device)
        except torch.cuda.OutOfMemoryError as err:
            print(f"{batch:>7}  out of memory: {str(err).splitlines()[0]}")
            torch.cuda.empty_cache()
            continue
        sps = batch * 1000.0 / ms
        print(f"{batch:>7}  {ms:>11.3f}  {best:>8.3f}  {sps:>15.0f}  {loss:>8.4f}", flush=True)
        records.append({
            "case": "torch_reference", "batch": batch, "samples_per_sec": sps, "ms_per_step": ms,
            "min_ms_per_step": best, "device": name, "torch": torch.__version__, "tf32": args.tf32 == "on",
            "optimizer": args.optimizer, "tables": args.tables, "dim": args.dim,
            "bottom": args.bottom_widths, "top": args.top_widths, "num_dense": args.num_dense,
            "cardinalities": args.cardinalities if args.cardinalities == "kaggle" else args.cards,
            "zipf_alpha": args.zipf_alpha, "steps": args.steps, "windows": args.windows,
            "warmup": args.warmup, "final_loss": loss,
        })
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
            f.write("\n")
    return 0


def self_check(torch, args):
    """CPU: interaction order and shape against an explicit loop, layouts agree, a step trains."""
    torch.manual_seed(0)
    cards = [7, 5, 11, 3]
    small = argparse.Namespace(**vars(args))
    small.dim, small.num_dense = 4, 3
    small.bottom_widths, small.top_widths = [8, 4], [6, 1]
    small.pool, small.seed = 2, 3
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    device = torch.device("cpu")
    small.tables = "per-feature"
    model = build_model(torch, small, cards, device)
    small.tables = "fused"
    fused = build_model(torch, small, cards, device)
    with torch.no_grad():  # same weights in both layouts
        fused.bottom.load_state_dict(model.bottom.state_dict())
        fused.top.load_state_dict(model.top.state_dict())
        fused.table.weight.copy_(torch.cat([t.weight for t in model.tables], 0))
    batch = 5
    dense, ids, labels = make_pool(torch, small, cards, batch, device)
    dense, ids, labels = dense[0], ids[0], labels[0]
    expect(all(int(ids[:, f].min()) >= 0 and int(ids[:, f].max()) < n for f, n in enumerate(cards)),
           "ids out of range")

    z0 = model.bottom(dense)
    rows = model.embed(ids)
    t = model.interact(z0, rows)
    f_count = len(cards)
    expect(model.top_in == small.dim + (f_count + 1) * f_count // 2, "top_in formula")
    expect(tuple(t.shape) == (batch, model.top_in), f"interaction shape {tuple(t.shape)}")
    worst = 0.0
    for b in range(batch):
        z = [z0[b]] + [model.tables[f].weight[ids[b, f]] for f in range(f_count)]
        want = list(z0[b])
        for i in range(f_count + 1):
            for j in range(i + 1, f_count + 1):
                want.append(sum(z[i][k] * z[j][k] for k in range(small.dim)))
        worst = max(worst, float((t[b] - torch.stack(want)).abs().max().detach()))
    expect(worst < 1e-5, f"interaction differs from the explicit loop by {worst}")
    expect(torch.allclose(model(dense, ids), fused(dense, ids), atol=1e-6), "fused layout disagrees")

    # Zipf: over a large sample rank 0 (hashed) is the most frequent id and frequencies follow ~k^-alpha.
    g = torch.Generator().manual_seed(5)
    sample = zipf_ids(torch, 1000, 1.05, 200000, 0, g, device)
    counts = torch.bincount(sample, minlength=1000).double()
    top = counts.sort(descending=True).values
    expect(int(counts.argmax()) == 0, "rank 0 is not the hottest id (salt 0 maps rank 0 to id 0)")
    ratio = float(top[0] / top[9])
    expect(abs(math.log(ratio) / math.log(10) - 1.05) < 0.1, f"Zipf slope off: top1/top10 = {ratio:.2f}")
    expect(int((counts > 0).sum()) > 500, "hash does not spread the ranks")

    # One SGD step with sparse gradients moves only the rows that were used.
    small.optimizer, small.lr = "sgd", 0.1
    opts = make_optimizers(torch, model, small)
    before = [t.weight.detach().clone() for t in model.tables]
    loss0 = float(train_step(torch, model, opts, dense, ids, labels).detach())
    expect(all(t.weight.grad is None or t.weight.grad.is_sparse for t in model.tables), "dense table grads")
    for f, t in enumerate(model.tables):
        changed = (t.weight.detach() != before[f]).any(1).nonzero().flatten().tolist()
        expect(set(changed) <= set(ids[:, f].tolist()), f"feature {f}: unused rows changed")
    expect(math.isfinite(loss0), "loss is not finite")
    for _ in range(30):
        loss = float(train_step(torch, model, opts, dense, ids, labels).detach())
    expect(loss < loss0, f"30 steps on one batch did not lower the loss ({loss0:.4f} -> {loss:.4f})")

    if failures:
        for f in failures:
            print(f"check FAILED: {f}")
        return 1
    print(f"check OK: interaction order/shape (max diff {worst:.2e}), fused == per-feature, Zipf ids, "
          f"sparse SGD (loss {loss0:.4f} -> {loss:.4f})")
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
    except ImportError:
        print("SKIP torch is not importable")
        return 0
    if args.check:
        return self_check(torch, args)
    return benchmark(torch, args)


if __name__ == "__main__":
    sys.exit(main())
