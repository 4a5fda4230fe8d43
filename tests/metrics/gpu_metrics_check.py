"""GPU workers' metrics, for a GPU machine (not a ctest: no GPU here; bench/gpu/run-metrics.sh
runs it from a pack). The default job on GPU workers with the hot-row cache on and --metrics:
promtool check metrics is clean on a worker's output (when promtool is there), and the GPU
loop's series move -- the step phases (wait_input, compute, push; read, dedupe, cache, pull),
the step histogram, the cache's lookups / hits, pull staleness, model FLOPs against the
configured peak -- and the coordinator's scaling efficiency appears."""
import shutil
import sys
import time

import metrics_util
from metrics_util import Job, check, parse, scrape, total, wait_until

SETS = ["worker.device=cuda", "train.steps=3000", "worker.cache.capacity_fraction=1",
        "worker.cache.staleness_bound=4", "metrics.peak_flops_per_sec=9.89e14"]


def series(samples, name, **labels):
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    return sum(v for (n, l), v in samples.items() if n == name and all(
        ('%s="%s"' % kv) in l for kv in labels.items())) if want else total(samples, name)


def main():
    job = Job(sets=SETS + sys.argv[1:])
    try:
        eps = job.endpoints()
        wait_until(lambda: total(parse(scrape(eps["worker-0"]) or ""), "osprey_worker_samples_total") > 0,
                   180, "worker 0 to train")
        first, t1 = parse(scrape(eps["worker-0"]) or ""), time.monotonic()
        time.sleep(1.0)  # a second of steps: the window MFU is measured over (not a synchronisation)
        text, t2 = scrape(eps["worker-0"]), time.monotonic()
        check(text is not None, "worker 0 did not answer")
        if shutil.which(metrics_util.PROMTOOL):
            metrics_util.promtool_check(text, "worker-0")
        else:
            print("(no promtool here: exposition not checked by promtool)")
        w = parse(text)
        for phase in ["wait_input", "compute", "push", "read", "dedupe", "cache", "pull"]:
            check(series(w, "osprey_worker_step_phase_seconds_total", phase=phase) > 0, "phase %s is 0" % phase)
        check(total(w, "osprey_worker_step_duration_seconds_count") > 0, "no step observed")
        lookups, hits = total(w, "osprey_worker_cache_lookups_total"), total(w, "osprey_worker_cache_hits_total")
        check(lookups > 0 and 0 < hits <= lookups, "cache lookups %s hits %s" % (lookups, hits))
        check(series(w, "osprey_worker_pull_staleness_count", table="sparse") > 0, "no pull staleness")
        flops = total(w, "osprey_worker_model_flops_total")
        check(flops > 0 and total(w, "osprey_worker_peak_flops_per_second") == 9.89e14, "flops %s" % flops)
        coord = parse(scrape(eps["coordinator"]) or "")
        eff = wait_until(lambda: total(parse(scrape(eps["coordinator"]) or ""), "osprey_coordinator_scaling_efficiency"),
                         30, "the coordinator's scaling efficiency")
        phases = {p: series(w, "osprey_worker_step_phase_seconds_total", phase=p)
                  for p in ["wait_input", "compute", "push", "nccl", "read", "dedupe", "cache", "pull"]}
        steps = total(w, "osprey_worker_step_duration_seconds_count")
        mfu = (flops - total(first, "osprey_worker_model_flops_total")) / (t2 - t1) / 9.89e14
        print("ok: worker 0 after %d steps: hit rate %.3f (%d lookups), ms/step by phase %s, "
              "dense pull staleness mean %.2f, MFU %.2e; scaling efficiency %.3f; coordinator rates %s"
              % (steps, hits / lookups, lookups,
                 {p: round(v / steps * 1e3, 3) for p, v in phases.items()},
                 series(w, "osprey_worker_pull_staleness_sum", table="dense") /
                 max(1, series(w, "osprey_worker_pull_staleness_count", table="dense")),
                 mfu, eff, {l: round(v) for (n, l), v in coord.items() if n == "osprey_coordinator_worker_samples_per_second"}))
        job.wait()
    finally:
        job.stop()


if __name__ == "__main__":
    main()
