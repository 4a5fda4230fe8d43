#!/usr/bin/env bash
# samples/s of examples/train_dlrm.py (osprey.torch, configs/python.yaml) against the C++ worker
# (osprey-worker, configs/local.yaml: the same job, data and model) on the CPU: RUNS (default 3)
# runs of each, interleaved (python, C++, python, ...) so both see the same machine load; prints
# every run and the medians. Needs the build (deploy/build.sh) and the venv (deploy/python-env.sh).
# Usage: bench/python/run.sh [extra --set k=v for both jobs]   (env: BUILD_DIR, RUNS)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
RUNS=${RUNS:-3}
VENV=$BUILD_DIR/python-venv
[ -x "$VENV/bin/python" ] || { echo "bench/python: no venv: run deploy/python-env.sh" >&2; exit 1; }
export PATH=$(cd "$VENV/bin" && pwd):$PATH
sets=()
for s in "$@"; do sets+=(--set "$s"); done
out=$(mktemp -d /tmp/osprey-bench-python-XXXXXX)
py=() cpp=()
for i in $(seq 1 "$RUNS"); do
  for kind in python cpp; do
    config=configs/local.yaml
    [ "$kind" = python ] && config=configs/python.yaml
    "$BUILD_DIR/bin/osprey" launch "$config" --quiet --report-json "$out/$kind-$i.json" \
      --log-dir "$out/$kind-$i" ${sets[@]+"${sets[@]}"} >/dev/null 2>"$out/$kind-$i.err" \
      || { cat "$out/$kind-$i.err" >&2; exit 1; }
    read -r sps auc < <(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['samples_per_sec'], r['auc'])" "$out/$kind-$i.json")
    printf 'bench/python: run %d %-6s samples/s %9.0f  AUC %.4f\n' "$i" "$kind" "$sps" "$auc"
    if [ "$kind" = python ]; then py+=("$sps"); else cpp+=("$sps"); fi
  done
done
python3 - "${py[*]}" "${cpp[*]}" <<'PY'
import statistics, sys
py = [float(x) for x in sys.argv[1].split()]
cpp = [float(x) for x in sys.argv[2].split()]
mp, mc = statistics.median(py), statistics.median(cpp)
print(f"bench/python: median of {len(py)}: train_dlrm.py {mp:.0f} samples/s, osprey-worker {mc:.0f} samples/s: "
      f"python = {100 * mp / mc:.0f}% of C++")
PY
echo "bench/python: reports and logs in $out"
