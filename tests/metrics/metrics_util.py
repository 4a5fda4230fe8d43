"""Helpers of the metrics tests (python3 stdlib only): launch a local job with --metrics, read
its endpoints, scrape and parse the Prometheus text format, wait on conditions with a deadline."""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN_DIR = os.environ.get("OSPREY_BIN_DIR", "build/bin")
SOURCE_DIR = os.environ.get("OSPREY_SOURCE_DIR", ".")
PROMTOOL = os.environ.get("PROMTOOL") or "promtool"
PROMETHEUS = os.environ.get("PROMETHEUS") or "prometheus"

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def wait_until(pred, timeout_s, what):
    """Polls pred every 50 ms; returns its truthy value, fails the test after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            fail("timed out after %d s waiting for %s" % (timeout_s, what))
        time.sleep(0.05)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def parse(text):
    """{(name, labels-string): value} of a text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def total(samples, name):
    """Sum of every series of `name` (any labels)."""
    return sum(v for (n, _), v in samples.items() if n == name)


def scrape(url, timeout=2.0):
    """The body of GET url, or None when nothing answers (the process is gone)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except OSError:
        return None


def promtool_check(text, who):
    check(shutil.which(PROMTOOL) is not None, "no promtool (%s): deploy/install-deps.sh installs prometheus" % PROMTOOL)
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
    check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(),
          "promtool check metrics on %s: rc %d\n%s%s" % (who, p.returncode, p.stdout, p.stderr))


class Job:
    """`osprey launch configs/local.yaml --metrics` in a fresh log dir; stop() by pid."""

    def __init__(self, sets=()):
        self.dir = tempfile.mkdtemp(prefix="osprey-metrics-test-")
        self.report = os.path.join(self.dir, "report.json")
        cmd = [os.path.join(BIN_DIR, "osprey"), "launch",
               os.path.join(SOURCE_DIR, "configs/local.yaml"), "--metrics", "--quiet",
               "--log-dir", os.path.join(self.dir, "logs"), "--report-json", self.report,
               "--bin-dir", BIN_DIR]
        for s in sets:
            cmd += ["--set", s]
        self.out = open(os.path.join(self.dir, "launch.out"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT)

    def endpoints(self, timeout_s=120):
        """{name: url} once the launcher wrote LOG_DIR/metrics_endpoints.txt."""
        path = os.path.join(self.dir, "logs", "metrics_endpoints.txt")

        def read():
            check(self.proc.poll() is None or os.path.exists(path),
                  "the job ended before printing its metrics endpoints:\n" + self.log())
            if not os.path.exists(path):
                return None
            return dict(line.split() for line in open(path) if line.strip())
        return wait_until(read, timeout_s, "metrics_endpoints.txt")

    def log(self):
        self.out.flush()
        return open(os.path.join(self.dir, "launch.out")).read()

    def wait(self, timeout_s=240):
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            fail("the job did not finish within %d s:\n%s" % (timeout_s, self.log()))
        check(rc == 0, "osprey launch exited %d:\n%s" % (rc, self.log()))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # the launcher stops its children
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
