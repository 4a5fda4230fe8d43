"""The metrics' cost: the default job's samples/s with metrics off and on (every exposer scraped
once a second, as a Prometheus would), interleaved, median of N runs each (README "Metrics and
monitoring"). Not a ctest test: run by hand, `python3 tests/metrics/metrics_cost.py [N]` with
OSPREY_BIN_DIR / OSPREY_SOURCE_DIR as for the tests (defaults: build/bin, .)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from metrics_util import BIN_DIR, SOURCE_DIR, scrape


def run(metrics):
    d = tempfile.mkdtemp(prefix="osprey-metrics-cost-")
    report = os.path.join(d, "report.json")
    cmd = [os.path.join(BIN_DIR, "osprey"), "launch", os.path.join(SOURCE_DIR, "configs/local.yaml"),
           "--quiet", "--log-dir", os.path.join(d, "logs"), "--report-json", report, "--bin-dir", BIN_DIR]
    if metrics:
        cmd.append("--metrics")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scrapes = [0]

    def scraper():
        path = os.path.join(d, "logs", "metrics_endpoints.txt")
        while proc.poll() is None:
            if os.path.exists(path):
                for line in open(path):
                    if line.strip() and scrape(line.split()[1], timeout=0.5) is not None:
                        scrapes[0] += 1
            time.sleep(1)
    t = threading.Thread(target=scraper)
    if metrics:
        t.start()
    rc = proc.wait()
    if metrics:
        t.join()
    if rc != 0:
        sys.exit("osprey launch exited %d (logs in %s)" % (rc, d))
    return json.load(open(report))["samples_per_sec"], scrapes[0]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    off, on = [], []
    for i in range(n):
        off.append(run(False)[0])
        sps, scrapes = run(True)
        on.append(sps)
        print("run %d: off %.0f samples/s, on %.0f samples/s (%d scrapes)" % (i + 1, off[-1], on[-1], scrapes))
    mo, mn = statistics.median(off), statistics.median(on)
    print("median of %d: metrics off %.0f samples/s, on %.0f samples/s (%+.1f%%)" % (n, mo, mn, 100 * (mn - mo) / mo))


if __name__ == "__main__":
    main()
