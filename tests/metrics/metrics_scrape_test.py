"""Every process of the default job serves /metrics: promtool check metrics is clean on each
exposer's output, the counters move while the job runs, and the last values scraped agree with
the final report (samples, bytes)."""
import json
import time

from metrics_util import Job, check, parse, promtool_check, scrape, total, wait_until

BATCH, STEPS, WORKERS = 256, 1000, 2  # configs/local.yaml


def main():
    job = Job()
    try:
        eps = job.endpoints()
        check(sorted(eps) == ["coordinator", "server-0", "server-1", "worker-0", "worker-1"],
              "endpoints: %s" % eps)
        # Each exposer's output, checked by promtool once the job trains (every family present).
        wait_until(lambda: total(parse(scrape(eps["worker-0"]) or ""), "osprey_worker_samples_total") > 0,
                   120, "worker 0 to train")
        first = {}
        for name, url in eps.items():
            text = scrape(url)
            check(text is not None, name + " did not answer")
            promtool_check(text, name)
            first[name] = parse(text)
        for fam in ["osprey_server_requests_total", "osprey_server_request_duration_seconds_count",
                    "osprey_server_bytes_received_total", "osprey_server_push_staleness_count",
                    "osprey_server_rows", "osprey_server_windows_applied_total"]:
            check(total(first["server-0"], fam) > 0, "server-0 %s is 0 or missing" % fam)
        check(first["coordinator"].get(("osprey_coordinator_nodes", '{role="worker",state="live"}')) == 2,
              "coordinator live workers: %s" % first["coordinator"])
        ages = [v for (n, _), v in first["coordinator"].items() if n == "osprey_coordinator_heartbeat_age_seconds"]
        check(len(ages) == 4 and all(0 <= a < 5 for a in ages), "heartbeat ages per node: %s" % ages)
        check(total(first["worker-0"], "osprey_worker_step_duration_seconds_count") > 0, "no step observed")
        # Counters move: scrape every endpoint until the job ends, keeping the last answer.
        last = dict(first)
        moved = set()
        efficiency = []  # the coordinator's scaling efficiency, once two scrapes saw the workers train
        while job.proc.poll() is None:
            for name, url in eps.items():
                text = scrape(url, timeout=0.5)
                if text is None:
                    continue
                s = parse(text)
                key = {"worker-0": "osprey_worker_samples_total", "worker-1": "osprey_worker_samples_total",
                       "server-0": "osprey_server_requests_total", "server-1": "osprey_server_requests_total",
                       "coordinator": "osprey_coordinator_node_samples_total"}[name]
                if name == "coordinator" and ("osprey_coordinator_scaling_efficiency", "") in s:
                    efficiency.append(s[("osprey_coordinator_scaling_efficiency", "")])
                if total(s, key) > total(first[name], key):
                    moved.add(name)
                check(total(s, key) >= total(last[name], key), name + " " + key + " went down")
                last[name] = s
            time.sleep(0.02)
        job.wait()
        check(moved == set(eps), "counters that never moved: %s" % (set(eps) - moved))
        # Relative to the fastest worker (no baseline configured): in (0, 1].
        check(efficiency and all(0 < e <= 1 for e in efficiency), "scaling efficiency: %s" % efficiency[-5:])
        report = json.load(open(job.report))
        # Worker 0 evaluates after training, so its last scrape saw the final count exactly.
        w0 = total(last["worker-0"], "osprey_worker_samples_total")
        check(w0 == STEPS * BATCH, "worker 0 scraped %d samples, trained %d" % (w0, STEPS * BATCH))
        check(report["steps"] in (STEPS, STEPS * WORKERS), "report steps %s" % report["steps"])
        samples = sum(total(last[w], "osprey_worker_samples_total") for w in ("worker-0", "worker-1"))
        check(STEPS * BATCH * WORKERS * 0.98 <= samples <= STEPS * BATCH * WORKERS,
              "scraped samples %d vs %d trained" % (samples, STEPS * BATCH * WORKERS))
        pushed = sum(total(last[w], "osprey_worker_bytes_pushed_total") for w in ("worker-0", "worker-1"))
        check(0.98 * report["bytes_pushed"] <= pushed <= report["bytes_pushed"],
              "scraped bytes pushed %d vs the report's %d" % (pushed, report["bytes_pushed"]))
        pulled = sum(total(last[w], "osprey_worker_bytes_pulled_total") for w in ("worker-0", "worker-1"))
        check(0.9 * report["bytes_pulled"] <= pulled <= report["bytes_pulled"],
              "scraped bytes pulled %d vs the report's %d" % (pulled, report["bytes_pulled"]))
        print("ok: %d endpoints clean under promtool; samples %d, bytes pushed %d/%d, pulled %d/%d; "
              "scaling efficiency %.3f" % (len(eps), samples, pushed, report["bytes_pushed"], pulled,
                                           report["bytes_pulled"], efficiency[-1]))
    finally:
        job.stop()


if __name__ == "__main__":
    main()
