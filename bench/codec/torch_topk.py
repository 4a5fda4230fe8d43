#!/usr/bin/env python3
"""Baseline for osprey-bench-codec --device cuda: torch.topk(g.abs(), k, sorted=False).

Prints one line "RESULT <n> <density> <median_ms>" per case (CUDA-event timing, after warm-up),
"SKIP <reason>" when torch or a GPU is missing or a size does not fit, and exits 0 either way, so
the benchmark simply reports a null baseline.
"""
import argparse
import statistics
import sys


def parse_list(text, kind):
    return [kind(float(x)) for x in text.split(",") if x]


def time_topk(torch, g, k, warmup, runs):
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(warmup + runs):
        start.record()
        torch.topk(g.abs(), k, sorted=False)
        stop.record()
        stop.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000000,25000000,100000000")
    parser.add_argument("--densities", default="0.01,0.001")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP torch is not importable")
        return 0
    if not torch.cuda.is_available():
        print("SKIP torch sees no CUDA device")
        return 0
    densities = parse_list(args.densities, float)
    for n in parse_list(args.sizes, int):
        try:
            g = torch.randn(n, device="cuda") * 1e-3
            for density in densities:
                k = max(1, round(density * n))
                ms = time_topk(torch, g, k, args.warmup, args.runs)
                print(f"RESULT {n} {density!r} {ms:.6f}", flush=True)
            del g
        except RuntimeError as err:  # out of memory for this size: skip it, keep the others
            print(f"SKIP n={n}: {str(err).splitlines()[0]}", flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
