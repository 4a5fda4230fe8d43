#!/usr/bin/env bash
# Are the rows and parameters every step reads its own, with many pullers? With a learning rate of
# 1e-30 no update moves a float, so a step's loss depends only on its batch and on the rows and
# dense parameters it reads. Each case trains the bench DLRM (batch 2048, pool of batches, async)
# for STEPS steps and logs the per-step loss in full precision (train.log_every_steps=1); every
# case must log the same losses as the reference -- no cache and one puller -- up to float
# rounding. A step that read rows of another key or older parameters shows as the first step
# that differs. Prints one line per case; exit 1 when a case differs or failed.
#
# Usage, from the repository root on the GPU machine:
#   bench/gpu/run-row-identity.sh PACK [BIN_DIR]
# BIN_DIR (default PACK/bin): where osprey-worker and the other binaries are (e.g. a worker built
# without the pull_threads guard). env: STEPS (300), PULLERS (6 8), TOLERANCE (1e-6). Builds nothing.
set -u -o pipefail
pack=$(cd "${1:?usage: $0 PACK [BIN_DIR]}" && pwd) || exit 2
bin=${2:-$pack/bin}
steps=${STEPS:-300}
work=$(mktemp -d /tmp/row-identity.XXXXXX)
. "$(dirname "$0")/env.sh"
export NCCL_NVLS_ENABLE=0
tiny=(--set tables.embeddings.optimizer.lr=1e-30 --set tables.mlp.optimizer.lr=1e-30 --set train.log_every_steps=1)
run() {  # NAME CACHE INDEX PULLERS
  timeout 120 "$pack/bin/osprey-bench-dlrm" --bin-dir "$bin" --batches 2048 --cache "$2" --cache-index "$3" \
    --gpus 1 --steps "$steps" --runs 1 --reference '' --servers 8 --work-dir "$work/$1" "${tiny[@]}" \
    --set worker.pull_threads="$4" > "$work/$1.out" 2>&1 || echo "$1: the run failed (see $work/$1.out)"
}
run ref 0 device 1
cases=()
for p in ${PULLERS:-6 8}; do
  for idx in device host; do
    run "$idx-p$p" 1.0 "$idx" "$p"
    cases+=("$idx-p$p")
  done
done
python3 - "$work" "${TOLERANCE:-1e-6}" "${cases[@]}" <<'PY'
import glob, re, sys
work, tol, cases = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
def losses(name):
    out = {}
    for f in glob.glob(f"{work}/{name}/*/worker-0.log"):
        for line in open(f, errors="replace"):
            m = re.search(r"worker 0 step (\d+) loss (\S+)", line)
            if m: out[int(m.group(1))] = float(m.group(2))
    return out
ref = losses("ref")
print(f"reference (no cache, 1 puller): {len(ref)} steps")
bad = not ref
for name in cases:
    got = losses(name)
    common = sorted(set(got) & set(ref))
    if not common:
        print(f"{name:10s} no steps logged"); bad = True; continue
    first = next((s for s in common if abs(got[s] - ref[s]) > tol), None)
    worst = max(abs(got[s] - ref[s]) for s in common)
    print(f"{name:10s} {len(common)} steps, max |loss - reference| {worst:.3g}, first step over {tol:g}: {first}")
    bad = bad or first is not None or len(common) < len(ref)
sys.exit(1 if bad else 0)
PY
