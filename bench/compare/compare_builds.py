#!/usr/bin/env python3
"""Old build against new build, interleaved in one run: the server, transport and default-job
benchmarks of two bin/ folders, each invocation of the old binary followed by one of the new, so
both see the same machine load. Prints per case the median over the rounds of each build and
new/old (> 1 is faster: throughput ratio).

Usage, from the repository root of the NEW checkout (its configs are used for the job):
  python3 bench/compare/compare_builds.py OLD_BIN NEW_BIN [--rounds 5] [--what server,transport,job]
      [--json PATH]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(cmd, timeout):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        sys.exit(f"compare_builds: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}")


def server_case(bin_dir, out):
    # Adagrad at dim 16 and 64, windows of 1 and 4 pushes (the README's figures).
    results = {}
    for dim in (16, 64):
        path = f"{out}.d{dim}"
        run([f"{bin_dir}/osprey-bench-server", "--optimizer", "adagrad", "--dim", str(dim),
             "--runs", "3", "--json", path], 600)
        for r in json.load(open(path)):
            results[f"server {r['case']} adagrad dim{r['dim']} rows/s"] = r["rows_per_sec"]
    return results


def transport_case(bin_dir, out):
    run([f"{bin_dir}/osprey-bench-transport", "--dense-only", "--dense-sizes", "1048576",
         "16777216", "--runs", "3", "--json", out], 600)
    records = json.load(open(out))
    raw = {(r["transport"], r["op"], r["bytes"]): r["median_us"] for r in records
           if r["case"] == "raw_zmq"}
    raw_op = {"push": ["push"], "pull": ["pull"], "pull_buffer": ["pull"],
              "pushpull": ["push", "pull"]}
    results = {}
    for r in records:
        if r["case"] != "dense":
            continue
        name = f"transport {r['transport']} {r['op']} {r['bytes'] >> 20}MiB"
        # Throughput: bytes per microsecond (MB/s), so that higher is better like the others.
        results[name + " MB/s"] = r["bytes"] / r["median_us"]
        # The same invocation's raw ZeroMQ echo over the Osprey time: the machine's load at that
        # moment cancels out, which on a shared machine makes this the steadier figure.
        base = [raw.get((r["transport"], op, r["bytes"])) for op in raw_op.get(r["op"], [])]
        if base and all(base):
            results[name + " vs raw"] = sum(base) / r["median_us"]
    return results


def job_case(bin_dir, out):
    run([f"{bin_dir}/osprey", "launch", "configs/local.yaml", "--quiet", "--bin-dir", bin_dir,
         "--report-json", out], 600)
    report = json.load(open(out))
    return {"default job samples/s": report["samples_per_sec"]}


CASES = {"server": server_case, "transport": transport_case, "job": job_case}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old_bin")
    ap.add_argument("new_bin")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--what", default="server,transport,job")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    what = [w for w in args.what.split(",") if w]
    for w in what:
        if w not in CASES:
            sys.exit(f"compare_builds: --what: unknown case '{w}' (server, transport, job)")
    for d in (args.old_bin, args.new_bin):
        if not os.path.isdir(d):
            sys.exit(f"compare_builds: {d}: not a directory")
    samples = {"old": {}, "new": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for w in what:
                for side, bin_dir in (("old", args.old_bin), ("new", args.new_bin)):
                    for k, v in CASES[w](bin_dir, f"{tmp}/{side}-{w}.json").items():
                        samples[side].setdefault(k, []).append(v)
            print(f"compare_builds: round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    rows = []
    print(f"median of {args.rounds} interleaved rounds (old, new: {args.old_bin}, {args.new_bin})")
    print(f"{'case':<44} {'old':>14} {'new':>14} {'new/old':>8}")
    for k in samples["old"]:
        old = statistics.median(samples["old"][k])
        new = statistics.median(samples["new"].get(k, [float("nan")]))
        rows.append({"case": k, "old": old, "new": new, "ratio": new / old,
                     "old_runs": samples["old"][k], "new_runs": samples["new"].get(k, [])})
        digits = 3 if abs(old) < 100 else 1
        print(f"{k:<44} {old:>14.{digits}f} {new:>14.{digits}f} {new / old:>8.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
