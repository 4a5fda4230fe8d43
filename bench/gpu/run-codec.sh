#!/usr/bin/env bash
# Runs the codec GPU tests and the CUDA codec benchmark from prebuilt binaries (no building), then
# prints a compact summary with the issue's H200 targets.
#
# Usage, from the repo root on the GPU machine:
#   bench/gpu/run-codec.sh PACK [OUT_DIR]
# PACK holds bin/ (osprey-bench-codec; the test binaries cuda_topk_test, cuda_dense_test and
# cuda_layer_topk_test may be in bin/, tests/ or PACK itself) and lib/. Results (logs, gtest
# JSON, bench JSON) go to OUT_DIR, default ./codec-gpu-results. Knobs (environment): SIZES
# (1e6,2.5e7,1e8,4e8), DENSITIES (0.01,0.001), RUNS (50), WARMUP (5). Exit status 0 only if every
# test passed, the bench ran and every target was met (the layer-wise rows: within 10% of their
# bucket-wise baseline).
set -u -o pipefail

pack=$(cd "${1:?usage: $0 PACK_DIR [OUT_DIR]}" && pwd) || exit 2
out=${2:-$PWD/codec-gpu-results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH="$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SIZES=${SIZES:-1e6,2.5e7,1e8,4e8}
DENSITIES=${DENSITIES:-0.01,0.001}
RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}

find_bin() {
  local d
  for d in "$pack/bin" "$pack/tests" "$pack"; do
    if [ -x "$d/$1" ]; then echo "$d/$1"; return 0; fi
  done
  return 1
}

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(nvidia-smi unavailable)"

# Count from gtest's summary lines, e.g. "[  SKIPPED ] 3 tests, listed below:".
count() { sed -nE "s/^\[  $1 *\] ([0-9]+) tests?.*/\1/p" "$2" | head -1; }

status=0
echo "== gpu tests"
printf '%-16s %-7s %s\n' test result detail
for t in cuda_topk_test cuda_dense_test cuda_layer_topk_test; do
  if ! bin=$(find_bin "$t"); then
    printf '%-16s %-7s %s\n' "$t" MISSING "not found under $pack"
    status=1
    continue
  fi
  "$bin" --gtest_output="json:$out/$t.json" > "$out/$t.log" 2>&1
  rc=$?
  passed=$(count PASSED "$out/$t.log")
  failed=$(count FAILED "$out/$t.log")
  skipped=$(count SKIPPED "$out/$t.log")
  passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0}
  # On the GPU machine a skip means the test saw no device: that is a failure here.
  if [ "$rc" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$passed" -gt 0 ]; then result=PASS; else result=FAIL; status=1; fi
  printf '%-16s %-7s %s passed, %s failed, %s skipped (log: %s)\n' "$t" "$result" "$passed" "$failed" "$skipped" \
    "$out/$t.log"
  if [ "$result" = FAIL ]; then
    grep -E '^\[  FAILED  \]|Failure|error' "$out/$t.log" | head -20 | sed 's/^/    /'
  fi
done

echo "== codec benchmark (cuda)"
if ! bench=$(find_bin osprey-bench-codec); then
  echo "osprey-bench-codec not found under $pack"
  exit 1
fi
"$bench" --device cuda --sizes "$SIZES" --densities "$DENSITIES" --runs "$RUNS" --warmup "$WARMUP" \
  --json "$out/codec-bench.json" 2>&1 | tee "$out/codec-bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== targets (one H200, n = 1e8 fp32)"
if command -v python3 > /dev/null && [ -s "$out/codec-bench.json" ]; then
  python3 - "$out/codec-bench.json" <<'PY' || status=1
import json, sys
rows = json.load(open(sys.argv[1]))
def find(codec, density=None):
    for r in rows:
        if r["codec"] == codec and r["n"] == 100000000 and (density is None or r["density"] == density):
            return r
    return None
targets = [
    ("EF + approx top-1% (sample)", "ef_topk_sample", 0.01, 0.40, True),
    ("EF + onebit", "ef_onebit", None, 0.35, False),
    ("exact top-1% (no EF)", "topk_exact", 0.01, 0.60, False),
    ("EF + exact top-1%", "ef_topk_exact", 0.01, 0.60, False),
    ("decode-add 1M pairs into 1e8", "decode_topk", 0.01, 0.05, False),
]
ok = True
print(f"{'target':32} {'ms':>9} {'limit':>7} {'sel/k':>7} {'torch_ms':>9}  verdict")
for label, codec, density, limit, check_count in targets:
    r = find(codec, density)
    if r is None or r["median_ms"] is None:
        print(f"{label:32} {'-':>9} {limit:7.2f} {'-':>7} {'-':>9}  MISSING")
        ok = False
        continue
    good = r["median_ms"] <= limit
    sel = r["selected_over_k"]
    if check_count and sel is not None:
        good = good and abs(sel - 1.0) <= 0.05
    base = r["baseline_ms"]
    print(f"{label:32} {r['median_ms']:9.4f} {limit:7.2f} {sel if sel is not None else float('nan'):7.4f} "
          f"{base if base is not None else float('nan'):9.4f}  {'MET' if good else 'MISSED'}")
    ok = ok and good
# Issue 18: layer-wise EF + exact top-k within 10% of bucket-wise (its baseline) on each list.
layer_rows = [r for r in rows if r["codec"].startswith("layer_ef_topk_exact")]
if not layer_rows:
    print(f"{'layer-wise vs bucket-wise':32} MISSING")
    ok = False
for r in layer_rows:
    base = r["baseline_ms"]
    good = r["median_ms"] is not None and base is not None and r["median_ms"] <= 1.10 * base
    print(f"{r['codec'][len('layer_ef_topk_exact '):][:32]:32} {r['median_ms']:9.4f} {1.10 * base:7.3f} {'-':>7} "
          f"{'-':>9}  {'MET' if good else 'MISSED'} (limit 1.10 x bucket-wise {base:.4f} ms)")
    ok = ok and good
sys.exit(0 if ok else 1)
PY
else
  echo "(python3 or the bench JSON is missing: see $out/codec-bench.txt)"
fi
echo "== results in $out"
exit "$status"
