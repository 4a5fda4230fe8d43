#!/usr/bin/env python3
"""DLRM in plain PyTorch on osprey.torch: the embedding rows and the dense MLP live on the Osprey
servers; this script is one worker. Run it under the launcher (configs/python.yaml sets
worker.command to this script):

    osprey launch configs/python.yaml

It trains on the planted synthetic data (osprey.data, the same streams as the C++ worker: worker
r reads stream r), rank 0 evaluates on the held-out stream and prints the AUC, and every worker
sends its report, so the launcher's progress line and final report work as for osprey-worker.
The model is the C++ worker's DLRM (worker/models/dlrm.h), layer for layer and in the same flat
parameter layout: bottom MLP -> z0; z0 and the 26 rows -> pairwise dots; top MLP -> logit.

--device cuda runs the model on the GPU (the same code: osprey.torch stages the rows and the
gradients through pinned host memory); the ids stay on the CPU, where the embedding bag dedupes
them. --pool N reuses N pre-made batches round-robin (as the C++ GPU worker's data_pool_batches),
so that the data generator is not what is measured.
"""
import argparse
import math
import os
import sys
import time

# One BLAS thread per worker, as osprey-worker computes on one core (set before numpy loads BLAS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch
import torch.nn.functional as F

import osprey
import osprey.torch as ot
from osprey import _C
from osprey.data import EVAL_STREAM, Criteo, Synthetic, auc


class Mlp(torch.nn.Module):
    """Layers x @ W + b with W [in x out] (the C++ layout), ReLU on all but the last when
    `last_linear`; He init for ReLU layers, Glorot for the final linear one, zero biases."""

    def __init__(self, widths_in, widths, last_linear, gen):
        super().__init__()
        self.relu = [not (last_linear and i == len(widths) - 1) for i in range(len(widths))]
        self.params = torch.nn.ParameterList()
        fan_in = widths_in
        for i, out in enumerate(widths):
            std = math.sqrt(2.0 / fan_in) if self.relu[i] else math.sqrt(2.0 / (fan_in + out))
            self.params.append(torch.nn.Parameter(torch.randn(fan_in, out, generator=gen) * std))
            self.params.append(torch.nn.Parameter(torch.zeros(out)))
            fan_in = out

    def forward(self, x):
        for i in range(len(self.relu)):
            x = torch.addmm(self.params[2 * i + 1], x, self.params[2 * i])
            if self.relu[i]:
                x = torch.relu(x)
        return x


class DotInteraction(torch.autograd.Function):
    """The pairwise dots z_i . z_j (i < j) of z [B x (F+1) x d], in the C++ order (0,1), (0,2), ...
    on the C++ worker's kernels (osprey._C.dot_pairs / dot_pairs_grad): with Debian's torch 1.13,
    torch.bmm on these small matrices costs ~3x as much, and autograd's own bmm backward runs
    per-sample slices (README, "PyTorch")."""

    @staticmethod
    def forward(ctx, z):
        if z.device.type != "cpu":  # on a GPU: batched products, the pairs in the same order
            n = z.shape[1]
            i, j = torch.triu_indices(n, n, offset=1, device=z.device)
            ctx.pairs = (i, j)
            ctx.save_for_backward(z)
            return torch.bmm(z, z.transpose(1, 2))[:, i, j]
        z = z.contiguous()
        ctx.save_for_backward(z)
        b, n, _ = z.shape
        out = torch.empty(b, n * (n - 1) // 2)
        _C.dot_pairs(z.numpy(), out.numpy())
        return out

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        if z.device.type != "cpu":  # d(z_i . z_j) = g z_j for i and g z_i for j: a symmetric G @ z
            i, j = ctx.pairs
            g = torch.zeros(z.shape[0], z.shape[1], z.shape[1], device=z.device, dtype=grad.dtype)
            g[:, i, j] = grad
            return torch.bmm(g + g.transpose(1, 2), z)
        dz = torch.empty_like(z)
        _C.dot_pairs_grad(z.numpy(), grad.contiguous().numpy(), dz.numpy())
        return dz


class Dlrm(torch.nn.Module):
    def __init__(self, table, info, seed):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        d, f = info["embedding_dim"], info["num_sparse"]
        self.bottom = Mlp(info["num_dense"], info["bottom_mlp"], False, gen)
        self.top = Mlp(d + (f + 1) * f // 2, info["top_mlp"], True, gen)
        self.emb = ot.EmbeddingBag(table, mode="sum")

    def forward(self, dense, keys):
        b, f = keys.shape
        z0 = self.bottom(dense)
        rows = self.emb(keys.reshape(-1, 1)).view(b, f, -1)  # one id per bag: the row itself
        z = torch.cat([z0.unsqueeze(1), rows], dim=1)
        dots = DotInteraction.apply(z)
        return self.top(torch.cat([z0, dots], dim=1)).squeeze(1)


def evaluate(model, client, info):
    """AUC and logloss on the held-out data: the synthetic eval stream (with the oracle's AUC) or,
    for Criteo, the first eval_samples lines of data.eval_path."""
    samples = info["eval_samples"]
    criteo = info["data_source"] == "criteo"
    gen = Criteo(info["eval_path"]) if criteo else Synthetic(client, stream=EVAL_STREAM)
    probs, labels, oracle = [], [], []
    model.eval()
    with torch.no_grad():
        while sum(len(p) for p in probs) < samples:
            n = min(4096, samples - sum(len(p) for p in probs))
            dense, keys, y, o = gen.next(n)
            if len(y) == 0:
                break  # the eval file ended
            logit = model(torch.from_numpy(dense).to(model.emb.device), torch.from_numpy(keys.view(np.int64)))
            probs.append(torch.sigmoid(logit).cpu().numpy())
            labels.append(y)
            oracle.append(o if o is not None else np.zeros_like(y))
    p, y, o = np.concatenate(probs), np.concatenate(labels), np.concatenate(oracle)
    eps = 1e-7
    logloss = float(-np.mean(y * np.log(np.clip(p, eps, 1)) + (1 - y) * np.log(np.clip(1 - p, eps, 1))))
    return auc(p, y), logloss, 0.0 if criteo else auc(o, y), len(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="job config (default: $OSPREY_CONFIG, set by osprey launch)")
    ap.add_argument("--steps", type=int, help="steps per worker (default: train.steps)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OSPREY_TORCH_THREADS", "1")),
                    help="torch intra-op threads (default 1: one core per worker, as osprey-worker)")
    ap.add_argument("--no-prefetch", action="store_true",
                    help="pull each batch's rows in its forward, not with the previous step's dense pull")
    ap.add_argument("--device", default=os.environ.get("OSPREY_TORCH_DEVICE", "cpu"),
                    help="where the model computes: cpu, cuda, cuda:N or auto (default cpu; env OSPREY_TORCH_DEVICE)")
    ap.add_argument("--pool", type=int, default=0, help="reuse this many pre-made training batches (0: fresh ones)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    client = osprey.connect(config=args.config)
    info = client.info
    if info["model"] != "dlrm" or info["data_source"] not in ("synthetic", "criteo"):
        raise SystemExit("train_dlrm.py: needs model.type dlrm and data.source synthetic or criteo")
    model = Dlrm(client.table(info["sparse_table"]), info, info["seed"]).to(device)
    opt = ot.DenseOptimizer(model.parameters(), client.table(info["dense_table"]))
    if info["data_source"] == "criteo":  # worker r reads lines r, r + W, ... and wraps (epochs)
        gen = Criteo(info["train_path"], shard=client.rank, num_shards=client.world_size, wrap=True)
    else:
        gen = Synthetic(client, stream=client.rank)
    steps, batch = args.steps or info["steps"], info["batch_size"]
    pool = [gen.next(batch) for _ in range(args.pool)]
    on_host = device.type == "cpu"

    def next_batch(step):
        """(dense, ids, labels): dense and labels on the model's device, the ids on the CPU."""
        dense, keys, labels, _ = pool[step % len(pool)] if pool else gen.next(batch)
        dense, labels = torch.from_numpy(dense), torch.from_numpy(labels)
        if not on_host:
            dense, labels = (t.pin_memory().to(device, non_blocking=True) for t in (dense, labels))
        return dense, torch.from_numpy(keys.view(np.int64)), labels

    # The running loss stays a tensor; it is read (which waits for a GPU) every log_every_steps.
    log_every = max(1, info["log_every_steps"])
    avg_t, avg = None, 0.0
    start = time.monotonic()
    dense, ids, labels = next_batch(0)
    for step in range(steps):
        logit = model(dense, ids)
        loss = F.binary_cross_entropy_with_logits(logit, labels)
        opt.zero_grad()
        loss.backward()
        avg_t = loss.detach() if avg_t is None else 0.95 * avg_t + 0.05 * loss.detach()
        if step % log_every == 0 or step == steps - 1:
            avg = avg_t.item()
        dense, ids, labels = next_batch(step + 1)  # the next batch, whose rows come with the dense pull
        next_ids = ids.reshape(-1, 1)
        opt.step(samples=batch, loss=avg, overlap=None if args.no_prefetch else lambda: model.emb.prefetch(next_ids))
    if not on_host:
        torch.cuda.synchronize(device)  # the time includes every step's GPU work
    seconds = time.monotonic() - start
    print(f"worker {client.rank} of {client.world_size} on {device}: {steps} steps of batch {batch} in "
          f"{seconds:.1f} s ({steps * batch / seconds:.0f} samples/s), loss {avg:.4f}", flush=True)
    client.barrier("train-done")
    result = {}
    if client.rank == 0 and info["eval_samples"] > 0:
        opt.refresh()
        a, ll, oracle, n = evaluate(model, client, info)
        result = dict(auc=a, logloss=ll, oracle_auc=oracle, eval_samples=n)
        print(f"held-out: AUC {a:.4f} (oracle {oracle:.4f}), logloss {ll:.4f} on {n} samples", flush=True)
    client.report(steps=steps, samples=steps * batch, train_seconds=seconds, loss=avg, **result)
    client.close()


if __name__ == "__main__":
    main()
