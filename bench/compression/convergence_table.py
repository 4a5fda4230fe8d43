#!/usr/bin/env python3
"""AUC and bytes of each compression option on the CPU job, through the real binaries.

Runs `osprey launch configs/local.yaml` once per option (1 worker, so each run is repeatable;
2 servers; the MLP gradient compressed as the option says, the embedding rows in fp32) and prints
one Markdown table row per option: AUC, logloss, dense push bytes before/after, the compression
diagnostics (cosine raw vs decoded, share of layer-steps without update) and the warning, if any.

  python3 bench/compression/convergence_table.py [--bin build/bin] [--steps 1000] [--only NAME,...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

C = "tables.mlp.codec."


def topk(density, granularity="tensor", ef=True, **extra):
    sets = [C + "type=topk", C + f"density={density}", C + "min_compress_bytes=4096",
            C + f"granularity={granularity}", C + f"error_feedback={'true' if ef else 'false'}"]
    sets += [C + f"{k}={v}" for k, v in extra.items()]
    return sets


OPTIONS = [
    ("none (fp32)", []),
    ("top-1% + EF, per message", topk(0.01)),
    ("top-1% + EF, layer", topk(0.01, "layer")),
    ("top-1% + EF, layer, importance", topk(0.01, "layer", select="importance")),
    ("top-1% + EF, layer, fp16 values", topk(0.01, "layer", value_type="fp16")),
    ("top-0.1% + EF, per message", topk(0.001)),
    ("top-0.1% + EF, bucket 16 KiB", topk(0.001, "bucket", bucket_bytes=16384)),
    ("top-0.1% + EF, layer", topk(0.001, "layer")),
    ("top-0.1%, no EF, layer", topk(0.001, "layer", ef=False)),
    ("broken: top-0.01%, no EF", topk(0.0001, ef=False)),
]


def run(binary_dir, name, sets, steps):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [os.path.join(binary_dir, "osprey"), "launch", "configs/local.yaml", "--quiet",
               "--log-dir", os.path.join(tmp, "logs"), "--report-json", report,
               "--set", "cluster.workers=1", "--set", f"train.steps={steps}",
               "--set", "train.eval_samples=20000"]
        for s in sets:
            cmd += ["--set", s]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.stderr.write(f"{name}: osprey launch failed:\n{out.stdout}\n{out.stderr}\n")
            return None
        with open(report) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = [x for x in a.only.split(",") if x]
    print("| option | AUC | logloss | dense bytes pushed | cosine | layer-steps w/o update | warning |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, sets in OPTIONS:
        if only and not any(o in name for o in only):
            continue
        r = run(a.bin, name, sets, a.steps)
        if r is None:
            print(f"| {name} | failed | | | | | |")
            continue
        raw = r.get("dense_push_bytes_raw") or 0
        enc = r.get("dense_push_bytes_encoded") or 0
        cos = r.get("compression_cosine")
        nou = r.get("compression_no_update_share")
        fmt = lambda x, p: "-" if x is None or x != x else f"{x:.{p}f}"
        bytes_col = f"{enc / 2**20:.2f} MiB" + (f" ({raw / enc:.0f}x less)" if enc and raw != enc else "")
        print(f"| {name} | {fmt(r.get('auc'), 4)} | {fmt(r.get('logloss'), 4)} | {bytes_col} | {fmt(cos, 3)} | "
              f"{fmt(None if nou is None else 100 * nou, 1)}% | {r.get('compression_warning') or ''} |", flush=True)


if __name__ == "__main__":
    main()
