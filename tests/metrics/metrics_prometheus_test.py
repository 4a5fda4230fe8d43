"""A real Prometheus server scrapes a running local job: the test starts prometheus on a free
loopback port with a scrape config generated from the job's metrics endpoints, queries
osprey_worker_samples_total through its HTTP API until it has seen the value increase, and stops
it by pid."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

from metrics_util import PROMETHEUS, Job, check, fail, free_port, scrape, wait_until


def scrape_config(endpoints):
    lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 900ms", "scrape_configs:"]
    for name, url in sorted(endpoints.items()):
        u = urllib.parse.urlparse(url)
        lines += ["  - job_name: osprey-%s" % name, "    metrics_path: %s" % u.path,
                  "    static_configs:", "      - targets: ['%s']" % u.netloc,
                  "        labels: {role: %s}" % name.split("-")[0]]
    return "\n".join(lines) + "\n"


def query(port, expr):
    """The instant vector of expr: [(labels, float value)], [] when not available yet."""
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": expr}))
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            body = json.load(r)
    except OSError:
        return []
    check(body.get("status") == "success", "query %s: %s" % (expr, body))
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def main():
    check(shutil.which(PROMETHEUS) is not None, "no prometheus binary (%s): deploy/install-deps.sh" % PROMETHEUS)
    job = Job(sets=["train.steps=4000"])
    tmp = tempfile.mkdtemp(prefix="osprey-prometheus-test-")
    prom = None
    try:
        eps = job.endpoints()
        cfg = os.path.join(tmp, "prometheus.yml")
        open(cfg, "w").write(scrape_config(eps))
        port = free_port()
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        prom = subprocess.Popen([PROMETHEUS, "--config.file=" + cfg,
                                 "--storage.tsdb.path=" + os.path.join(tmp, "data"),
                                 "--web.listen-address=127.0.0.1:%d" % port],
                                stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: prom.poll() is not None or scrape("http://127.0.0.1:%d/-/ready" % port) is not None,
                   60, "prometheus to be ready")
        check(prom.poll() is None, "prometheus exited: " + open(log.name).read()[-3000:])
        seen = []

        def increased():
            check(job.proc.poll() is None or len(seen) >= 2,
                  "the job ended before prometheus saw samples increase: %s" % seen)
            r = query(port, "sum(osprey_worker_samples_total)")
            if r and (not seen or r[0][1] != seen[-1]):
                seen.append(r[0][1])
            return len(seen) >= 3
        wait_until(increased, 120, "osprey_worker_samples_total to increase in prometheus")
        check(all(a < b for a, b in zip(seen, seen[1:])), "not increasing: %s" % seen)
        up = query(port, "up")
        check(len(up) == len(eps) and all(v == 1 for _, v in up), "targets not all up: %s" % up)
        rate = query(port, "sum(rate(osprey_worker_samples_total[5s]))")
        print("ok: prometheus saw osprey_worker_samples_total %s; %d targets up; rate %s"
              % (seen, len(up), rate[0][1] if rate else "n/a"))
    finally:
        if prom is not None and prom.poll() is None:
            prom.terminate()
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
        job.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
