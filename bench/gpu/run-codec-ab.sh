#!/usr/bin/env bash
# A/B of the CUDA codec benchmark on one GPU: runs a baseline osprey-bench-codec and the pack's
# alternately, ROUNDS times, and prints each case's median over the rounds for both and their
# ratio (new / base: below 1 is faster). Builds nothing.
#
# Usage, from the repo root on the GPU machine:
#   bench/gpu/run-codec-ab.sh PACK BASE_BIN [OUT_DIR]
# BASE_BIN is the baseline's osprey-bench-codec (built from the baseline commit, linked against the
# same PACK/lib). Knobs (environment): SIZES (1e8), DENSITIES (0.01,0.001), ROUNDS (3), RUNS (30),
# WARMUP (5). The torch.topk baseline is left out (it does not change between the two).
set -u -o pipefail

pack=$(cd "${1:?usage: $0 PACK BASE_BIN [OUT_DIR]}" && pwd) || exit 2
base=${2:?usage: $0 PACK BASE_BIN [OUT_DIR]}
out=${3:-$PWD/codec-ab-results}
mkdir -p "$out"
export LD_LIBRARY_PATH="$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SIZES=${SIZES:-1e8}
DENSITIES=${DENSITIES:-0.01,0.001}
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-30}
WARMUP=${WARMUP:-5}
new="$pack/bin/osprey-bench-codec"
for b in "$new" "$base"; do
  [ -x "$b" ] || { echo "missing: $b"; exit 2; }
done

status=0
for round in $(seq 1 "$ROUNDS"); do
  for side in base new; do
    bin=$new
    [ "$side" = base ] && bin=$base
    if ! "$bin" --device cuda --sizes "$SIZES" --densities "$DENSITIES" --runs "$RUNS" --warmup "$WARMUP" \
        --torch-script "" --json "$out/$side-$round.json" > "$out/$side-$round.txt" 2>&1; then
      echo "$side round $round failed: $out/$side-$round.txt"
      tail -5 "$out/$side-$round.txt"
      status=1
    fi
  done
done

python3 - "$out" "$ROUNDS" <<'PY' || status=1
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
cases = {}
for side in ("base", "new"):
    for r in range(1, rounds + 1):
        try:
            rows = json.load(open(f"{out}/{side}-{r}.json"))
        except (OSError, ValueError):
            continue
        for row in rows:
            key = (row["codec"], row["n"], row["density"])
            c = cases.setdefault(key, {"base": [], "new": [], "sel": []})
            if row["median_ms"] is not None:
                c[side].append(row["median_ms"])
            if side == "new" and row.get("selected_over_k") is not None:
                c["sel"].append(row["selected_over_k"])
print(f"{'codec':34} {'n':>10} {'density':>8} {'base_ms':>9} {'new_ms':>9} {'new/base':>8} {'sel/k':>7}")
for (codec, n, density), c in cases.items():
    if not c["base"] or not c["new"]:
        continue
    b, m = statistics.median(c["base"]), statistics.median(c["new"])
    sel = f"{statistics.median(c['sel']):7.4f}" if c["sel"] else f"{'-':>7}"
    d = f"{density:8.3g}" if isinstance(density, (int, float)) else f"{'-':>8}"
    print(f"{codec[:34]:34} {n:>10} {d} {b:9.4f} {m:9.4f} {m / b:8.3f} {sel}")
print(f"(median over {rounds} alternating rounds of each binary's per-case median)")
PY
exit "$status"
