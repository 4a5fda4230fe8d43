#!/usr/bin/env python3
"""Samples/s and AUC of the adaptive per-node ratio against the fixed ratio, through the real binaries.

Runs `osprey launch configs/local-topk.yaml` with 2 workers, worker 1's pushes throttled by the
test-only ThrottledTransport (worker.debug_throttle_bytes_per_sec), a wide MLP so the dense push
dominates the bytes, top-k density 0.2 + EF: once with the fixed density and once with
adaptive_ratio {min 0.01, max 0.2} (and, with --async-barrier, adaptive_ratio + async_barrier),
alternating, --repeats times, in the given consistency mode; prints per run and the median of each:
job samples/s, AUC, bytes pushed, both workers' final densities, worker 1's skipped clocks.

  python3 bench/compression/adaptive_ratio_bench.py [--bin build-cpu/bin] [--repeats 3] [--mode async|bsp]
      [--async-barrier] [--rate 1e6]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

JOB = ["cluster.workers=2", "cluster.heartbeat_interval_ms=100", "train.batch_size=64",
       "train.eval_samples=20000", "tables.embeddings.dim=4", "model.embedding_dim=4",
       "model.bottom_mlp=[64,4]", "model.top_mlp=[256,1]", "tables.mlp.codec.density=0.2",
       "worker.debug_throttle_rank=1"]
A = "tables.mlp.codec.adaptive_ratio."
ADAPTIVE = [A + "min_density=0.01", A + "max_density=0.2", A + "interval_steps=10", A + "factor=2"]


def run(binary_dir, sets):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [os.path.join(binary_dir, "osprey"), "launch", "configs/local-topk.yaml", "--quiet",
               "--log-dir", os.path.join(tmp, "logs"), "--report-json", report]
        for s in sets:
            cmd += ["--set", s]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"osprey launch failed:\n{out.stdout}\n{out.stderr}")
        with open(report) as f:
            return json.load(f)


def density(r, rank):
    for a in r.get("adaptive_ratio", []):
        if a["rank"] == rank:
            return a["final_density"]
    return 0.2


def skipped(r):
    """Clocks worker 1 skipped after leaving the step barrier (async_barrier); 0 otherwise."""
    for a in r.get("adaptive_ratio", []):
        if a["rank"] == 1:
            return a.get("clocks_skipped", 0)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build-cpu/bin")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rate", type=float, default=4e6, help="worker 1's uplink, bytes/s")
    ap.add_argument("--mode", default="async", choices=["async", "ssp", "bsp"])
    ap.add_argument("--async-barrier", action="store_true", help="also run adaptive + async_barrier (bsp/ssp)")
    args = ap.parse_args()
    base = JOB + [f"train.steps={args.steps}", f"worker.debug_throttle_bytes_per_sec={args.rate:g}",
                  f"tables.mlp.consistency.mode={args.mode}", f"tables.embeddings.consistency.mode={args.mode}"]
    variants = [("fixed", []), ("adaptive", ADAPTIVE)]
    if args.async_barrier:
        variants.append(("adaptive + async_barrier", ADAPTIVE + [A + "async_barrier=true"]))
    rows = {name: [] for name, _ in variants}
    for i in range(args.repeats):
        for name, extra in variants:
            r = run(args.bin, base + extra)
            rows[name].append(r)
            print(f"run {i} {name:8s} {r['samples_per_sec']:8.0f} samples/s  AUC {r['auc']:.4f}  "
                  f"pushed {r['bytes_pushed'] / 2**20:7.1f} MiB  final density worker 0 {density(r, 0):.4f}, "
                  f"worker 1 {density(r, 1):.4f}, skipped {skipped(r)}",
                  flush=True)
    print(f"\nmode {args.mode}, {args.steps} steps, worker 1 throttled to {args.rate / 1e6:g} MB/s, "
          f"median of {args.repeats}:")
    print("| ratio | samples/s | AUC | bytes pushed | final density worker 0 / worker 1 (throttled) "
          "| clocks worker 1 skipped |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, rs in rows.items():
        med = lambda k: statistics.median(r[k] for r in rs)
        print(f"| {name} | {med('samples_per_sec'):.0f} | {med('auc'):.4f} | "
              f"{med('bytes_pushed') / 2**20:.1f} MiB | {statistics.median(density(r, 0) for r in rs):.4f} / "
              f"{statistics.median(density(r, 1) for r in rs):.4f} | "
              f"{statistics.median(skipped(r) for r in rs):.0f} |")


if __name__ == "__main__":
    main()
