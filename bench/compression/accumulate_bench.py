#!/usr/bin/env python3
"""Gradient accumulation (train.accumulate_steps, issue 18) on the default CPU job, through the
real binaries: samples/s, bytes per sample and AUC with N = 1 and N = 4 micro-batches per push,
the same samples in both (train.steps = SAMPLES / (batch_size x N) pushes per worker), runs
interleaved (1, 4, 1, 4, ...) so both see the same machine load; median of --runs per N.

  python3 bench/compression/accumulate_bench.py [--bin build/bin] [--pushes 800] [--runs 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(binary_dir, n, pushes):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [os.path.join(binary_dir, "osprey"), "launch", "configs/local.yaml", "--quiet",
               "--log-dir", os.path.join(tmp, "logs"), "--report-json", report,
               "--set", "train.accumulate_steps=%d" % n, "--set", "train.steps=%d" % (pushes // n),
               "--set", "train.eval_samples=20000"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("accumulate_steps=%d: osprey launch failed:\n%s\n%s" % (n, out.stdout, out.stderr))
        with open(report) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--pushes", type=int, default=800, help="pushes per worker with N = 1")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    results = {1: [], 4: []}
    for i in range(a.runs):
        for n in (1, 4):
            r = run(a.bin, n, a.pushes)
            results[n].append(r)
            print("run %d N=%d: %.0f samples/s, %.0f bytes/sample, AUC %.4f" % (
                i + 1, n, r["samples_per_sec"], r["bytes_per_sample"], r["auc"]), flush=True)
    print()
    print("| accumulate_steps | samples/s (median) | bytes/sample (median) | AUC (median) | runs |")
    print("| --- | --- | --- | --- | --- |")
    for n in (1, 4):
        med = lambda k: statistics.median(r[k] for r in results[n])
        print("| %d | %.0f | %.0f | %.4f | %d |" % (n, med("samples_per_sec"), med("bytes_per_sample"),
                                                   med("auc"), len(results[n])))


if __name__ == "__main__":
    main()
