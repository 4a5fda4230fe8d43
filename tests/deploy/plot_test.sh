#!/usr/bin/env bash
# The launcher's --report-json carries the loss curve; `osprey plot` draws it as a PNG with the
# deploy venv's matplotlib (deploy/venv.sh); a python without matplotlib gets exit 3 and the
# message saying how to install it; `osprey bench transport --quick --plot` draws the transport
# curve (when the benchmark is built).
#   usage: plot_test.sh BIN_DIR SOURCE_DIR
set -uo pipefail
BIN=$1
SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "plot_test: FAILED: $*" >&2; exit 1; }
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; }

"$BIN/osprey" launch "$SRC/configs/local.yaml" --quiet --set train.steps=600 \
  --report-json "$T/report.json" --log-dir "$T/job" >"$T/launch.out" 2>&1 ||
  { cat "$T/launch.out"; fail "the job failed"; }
python3 - "$T/report.json" <<'PY' || fail "the report's curve is wrong"
import json, math, sys
r = json.load(open(sys.argv[1]))
c = r["curve"]
assert len(c) >= 2, c
steps = [p["step"] for p in c]
assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
assert 0 < steps[-1] <= 600, steps
assert all(p["seconds"] >= 0 and p["samples_per_sec"] >= 0 for p in c), c
losses = [p["loss"] for p in c if p["loss"] is not None]
assert losses and all(0 < l < 1 for l in losses), losses
print("plot_test: curve of %d points, loss %.4f -> %.4f" % (len(c), losses[0], losses[-1]))
PY

VENV=$(bash "$SRC/deploy/venv.sh" | tail -n 1) || fail "deploy/venv.sh failed"
OSPREY_PYTHON=$VENV/bin/python "$BIN/osprey" plot "$T/report.json" "$T/loss.png" ||
  fail "osprey plot exited $?"
is_png "$T/loss.png" || fail "osprey plot wrote no PNG"

python3 -m venv --without-pip "$T/bare" || fail "cannot make a bare venv"
OSPREY_PYTHON=$T/bare/bin/python "$BIN/osprey" plot "$T/report.json" "$T/none.png" >"$T/bare.out" 2>&1
rc=$?
[ "$rc" -eq 3 ] || { cat "$T/bare.out"; fail "without matplotlib: exit $rc, not 3"; }
grep -q "matplotlib is not installed" "$T/bare.out" || fail "no clear message without matplotlib"
[ ! -e "$T/none.png" ] || fail "a PNG appeared without matplotlib"

if [ -x "$BIN/osprey-bench-transport" ]; then
  rc=0
  OSPREY_PYTHON=$VENV/bin/python "$BIN/osprey" bench transport --quick --plot "$T/transport.png" \
    >"$T/bench.out" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || { tail -20 "$T/bench.out"; fail "bench transport --plot exited $rc"; }
  is_png "$T/transport.png" || fail "bench --plot wrote no PNG"
  [ -s "$T/transport.png.json" ] || fail "bench --plot kept no JSON next to the PNG"
fi
echo "plot_test: OK"
