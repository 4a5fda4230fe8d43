#!/usr/bin/env bash
# Runs every GPU test binary of a pack (bench/gpu/pack.sh BUILD_DIR PACK --tests) on a GPU machine,
# without building anything there, and prints one line per test binary: passed, failed or skipped
# counts from gtest. gpu_worker_test starts real clusters, so it needs the pack's osprey binaries
# (OSPREY_BIN_DIR) and this checkout's configs (OSPREY_SOURCE_DIR, the current directory).
#
# Usage, from the repository root on the GPU machine:
#   bench/gpu/run-tests.sh PACK [OUT_DIR]
# Logs go to OUT_DIR (default ./gpu-test-results). Exit status 0 only when every binary ran and
# none failed; a binary whose tests all skipped (no GPU visible) counts as not run, status 1.
set -u -o pipefail
pack=$(cd "${1:?usage: $0 PACK [OUT_DIR]}" && pwd) || exit 2
out=${2:-$PWD/gpu-test-results}
mkdir -p "$out"
. "$(dirname "$0")/env.sh"
export OSPREY_BIN_DIR="$pack/bin"
export OSPREY_SOURCE_DIR=${OSPREY_SOURCE_DIR:-$PWD}

echo "== device"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>/dev/null || echo "(nvidia-smi unavailable)"
# gtest's summary lines, e.g. "[  PASSED  ] 11 tests." / "[  SKIPPED ] 1 test, listed below:".
count() { sed -nE "s/^\[ +$1 +\] ([0-9]+) tests?.*/\1/p" "$2" | head -1; }
status=0
ran=0
printf '%-22s %-8s %6s %6s %7s %8s\n' test result passed failed skipped seconds
for t in $(grep -v '^#' "$(dirname "$0")/gpu-tests.txt"); do
  bin="$pack/bin/$t"
  if [ ! -x "$bin" ]; then
    printf '%-22s %-8s\n' "$t" missing
    status=1
    continue
  fi
  start=$(date +%s)
  "$bin" > "$out/$t.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  passed=$(count PASSED "$out/$t.log"); failed=$(count FAILED "$out/$t.log"); skipped=$(count SKIPPED "$out/$t.log")
  passed=${passed:-0}; failed=${failed:-0}; skipped=${skipped:-0}
  if [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then
    result=FAILED; status=1
  elif [ "$passed" -eq 0 ]; then
    result=skipped; status=1
  else
    result=ok; ran=$((ran + 1))
  fi
  printf '%-22s %-8s %6s %6s %7s %8s\n' "$t" "$result" "$passed" "$failed" "$skipped" "$secs"
  if [ "$result" = FAILED ]; then grep -E '^\[  FAILED  \]|Failure' "$out/$t.log" | head -5 | sed 's/^/    /'; fi
done
echo "$ran binaries ran; logs in $out"
exit $status
