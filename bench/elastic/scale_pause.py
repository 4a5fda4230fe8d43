#!/usr/bin/env python3
"""The pause of a scale step (osprey scale), measured with the real binaries on this machine.

Starts osprey-coordinator, 2 osprey-server and 2 osprey-worker processes (bsp, the DLRM of
configs/bsp.yaml with large batches of nearly uniform ids over 26 x --cardinality keys, so the
servers hold about a million rows after --warmup seconds), then per run: starts a third server with --join, `osprey scale --servers 3`, and
`osprey scale --servers 2`. Reports per step, median of --runs runs:
  records   rows + dense chunks the servers held when the step began (their reshard log lines)
  moved     records moved: sent server to server, or (redis, sparse rows) handed over in Redis
  pause     coordinator: first worker paused -> new map committed (what `osprey scale` prints)
  transfer  coordinator: transfer begun -> every old server done
  worker    the slowest worker's own pause (from its pause request to its new client), which adds
            the reply and the new client's start to `pause`

  python3 bench/elastic/scale_pause.py --bin-dir build/bin [--cardinality 40000] [--runs 3]
      [--store native|redis|both]

--store redis starts one redis-server (no persistence) on a free loopback port for the runs and
stops it by pid at the end; each run uses its own key prefix, store.redis.write_policy
write_through. `both` interleaves native and redis runs.
"""
import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def latest(path, pattern):
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return []
    return re.findall(pattern, text)


def start_redis(work):
    """A redis-server on a free loopback port; (process, "127.0.0.1:PORT")."""
    port = free_port()
    log = open(os.path.join(work, "redis.log"), "w")
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", work], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError("redis-server exited; see %s/redis.log" % work)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    return p, "127.0.0.1:%d" % port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise RuntimeError("redis-server did not answer PING within 30 s")


def run_once(args, work, store_sets=()):
    endpoint = "tcp://127.0.0.1:%d" % free_port()
    sets = ["cluster.coordinator=" + endpoint, "cluster.heartbeat_interval_ms=50",
            "train.steps=1000000", "train.eval_samples=0", "train.batch_size=%d" % args.batch,
            "data.zipf_alpha=0.05", "data.cardinalities=[%s]" % ",".join([str(args.cardinality)] * 26),
            "client.timeout_ms=120000"] + list(store_sets)
    common = ["--config", args.config]
    for s in sets:
        common += ["--set", s]
    procs = {}

    def spawn(name, binary, extra=()):
        log = open(os.path.join(work, name + ".log"), "w")
        procs[name] = subprocess.Popen([os.path.join(args.bin_dir, binary)] + common + list(extra),
                                       stdout=log, stderr=subprocess.STDOUT)

    try:
        spawn("coordinator", "osprey-coordinator")
        for s in range(2):
            spawn("server-%d" % s, "osprey-server")
        for w in range(2):
            spawn("worker-%d" % w, "osprey-worker")
        # 26 features of --cardinality nearly uniform ids: the rows saturate near 26 x cardinality
        # within seconds; the reshard log lines below say how many there were.
        time.sleep(args.warmup)
        for name, p in procs.items():
            if p.poll() is not None:
                raise RuntimeError("%s exited early; see %s" % (name, work))
        spawn("server-2", "osprey-server", ["--join"])
        out = {}
        for step, servers in (("2->3", 3), ("3->2", 2)):
            r = subprocess.run([os.path.join(args.bin_dir, "osprey"), "scale", "--coordinator", endpoint,
                                "--servers", str(servers)], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise RuntimeError("osprey scale %s failed: %s%s" % (step, r.stdout, r.stderr))
            m = re.search(r"at step (\d+): (\d+) records moved, training paused ([0-9.]+) s "
                          r"\(transfer ([0-9.]+) s\)", r.stdout)
            epoch = 2 if servers == 3 else 3
            records = 0
            for s in range(3):
                for sent, kept in latest(os.path.join(work, "server-%d.log" % s),
                                         r"resharded to epoch %d .*: (\d+) records moved .*?, (\d+) kept" % epoch):
                    records += int(sent) + int(kept)
            # A worker logs its pause when it hears of the commit (its next heartbeat), which may
            # be after `osprey scale` returned: wait for both lines (up to 10 s).
            worker = 0.0
            deadline = time.time() + 10
            for w in range(2):
                got = []
                while not got and time.time() < deadline:
                    got = latest(os.path.join(work, "worker-%d.log" % w),
                                 r"shard map epoch %d .* paused ([0-9.]+) s" % epoch)
                    if not got:
                        time.sleep(0.05)
                if got:
                    worker = max(worker, float(got[-1]))
            out[step] = dict(records=records, moved=int(m.group(2)), pause=float(m.group(3)),
                             transfer=float(m.group(4)), worker=worker)
            time.sleep(1.0)  # train a little on the new map before the next step
        return out
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in procs.values():
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default="build/bin")
    ap.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "..", "..", "configs", "bsp.yaml"))
    ap.add_argument("--cardinality", type=int, default=40000, help="ids per feature (26 features)")
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds of training before the first step")
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--store", choices=["native", "redis", "both"], default="native")
    args = ap.parse_args()
    stores = ["native", "redis"] if args.store == "both" else [args.store]
    runs = {store: [] for store in stores}
    redis = None
    try:
        if "redis" in stores:
            redis = start_redis(tempfile.mkdtemp(prefix="osprey-scale-bench-redis-"))
        for i in range(args.runs):
            for store in stores:  # interleaved: both see the same machine load
                work = tempfile.mkdtemp(prefix="osprey-scale-bench-")
                sets = [] if store == "native" else [
                    "store.type=redis", "store.redis.endpoints=" + redis[1],
                    "store.redis.write_policy=write_through", "store.redis.key_prefix=pause%d" % i]
                r = run_once(args, work, sets)
                runs[store].append(r)
                for step, v in r.items():
                    print("run %d %s %s: %d records, %d moved, pause %.3f s, transfer %.3f s, worker %.3f s"
                          % (i + 1, store, step, v["records"], v["moved"], v["pause"], v["transfer"], v["worker"]),
                          flush=True)
    finally:
        if redis is not None:
            redis[0].kill()
            redis[0].wait()
    print()
    print("| store | step | records (median) | moved (median) | pause s (median) | transfer s | worker pause s | runs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for store in stores:
        for step in ("2->3", "3->2"):
            col = lambda k: statistics.median(r[step][k] for r in runs[store])
            print("| %s | %s | %d | %d | %.3f | %.3f | %.3f | %d |" % (
                store, step, col("records"), col("moved"), col("pause"), col("transfer"), col("worker"),
                len(runs[store])))


if __name__ == "__main__":
    sys.exit(main())
