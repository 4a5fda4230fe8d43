#!/usr/bin/env bash
# `osprey doctor` on this machine gives a verdict for every check (no crash), its --json parses
# with the same checks, a bad NCCL_* value is a fail verdict (exit 1), and --network measures the
# 4 KiB..64 MiB curve against a real running server of a CURVE job (with the job's keys; without
# them the check fails, it does not hang).
#   usage: doctor_test.sh BIN_DIR SOURCE_DIR
set -uo pipefail
BIN=$1
SRC=$2
T=$(mktemp -d)
LAUNCH_PID=
cleanup() {
  if [ -n "$LAUNCH_PID" ]; then
    kill "$LAUNCH_PID" 2>/dev/null
    wait "$LAUNCH_PID" 2>/dev/null
  fi
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "doctor_test: FAILED: $*" >&2; exit 1; }

"$BIN/osprey" doctor >"$T/doctor.txt" 2>&1 || { cat "$T/doctor.txt"; fail "doctor exited $?"; }
cat "$T/doctor.txt"
grep -q "^summary: [0-9]* ok" "$T/doctor.txt" || fail "no summary line"
for g in build zeromq cpu memory gpu nccl rdma network; do
  grep -q "^$g:" "$T/doctor.txt" || fail "no $g checks"
done
"$BIN/osprey" doctor --json >"$T/doctor.json" || fail "doctor --json exited $?"
python3 -m json.tool "$T/doctor.json" >/dev/null || fail "doctor --json is not JSON"
python3 - "$T/doctor.json" "$T/doctor.txt" <<'PY' || fail "doctor --json does not hold the checks"
import json, sys
d = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
assert len(d["checks"]) >= 15, len(d["checks"])
assert all(c["verdict"] in ("ok", "warn", "fail", "skip") for c in d["checks"])
assert sum(d["summary"].values()) == len(d["checks"])
assert "summary: %d ok, %d warn" % (d["summary"]["ok"], d["summary"]["warn"]) in text
curve = [c for c in d["checks"] if c["name"] == "CURVE"]
assert curve and curve[0]["verdict"] == "ok", curve  # Debian's libzmq has CURVE
PY

NCCL_P2P_LEVEL=BOGUS "$BIN/osprey" doctor >"$T/bad.txt" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "a bad NCCL_P2P_LEVEL: exit $rc, not 1"
grep -q "\[fail\] NCCL_P2P_LEVEL" "$T/bad.txt" || fail "a bad NCCL_P2P_LEVEL is not a fail verdict"

# A real job (CURVE on) that trains long enough to be measured against, then stopped.
"$BIN/osprey" launch "$SRC/configs/local-curve.yaml" --quiet --log-dir "$T/job" \
  --set train.steps=1000000 --set cluster.servers=1 --set cluster.workers=1 >"$T/launch.out" 2>&1 &
LAUNCH_PID=$!
for _ in $(seq 300); do
  grep -q "serving on" "$T/job/server-0.log" 2>/dev/null && break
  kill -0 "$LAUNCH_PID" 2>/dev/null || { cat "$T/launch.out"; fail "the job ended early"; }
  sleep 0.2
done
EP=$(grep -o "serving on tcp://[0-9.:]*" "$T/job/server-0.log" | awk '{print $3}')
[ -n "$EP" ] || fail "no server endpoint in $T/job/server-0.log"

timeout 120 "$BIN/osprey" doctor --json --network "$EP" --keys "$T/job/keys" >"$T/net.json" ||
  { cat "$T/net.json"; fail "doctor --network $EP exited $?"; }
python3 - "$T/net.json" <<'PY' || fail "the network curve is not there"
import json, sys
d = json.load(open(sys.argv[1]))
pts = d["network"]
assert [p["reply_bytes"] for p in pts] == [4096 * 4 ** i for i in range(8)], pts
assert all(p["median_us"] > 0 and p["gbps"] > 0 for p in pts), pts
check = [c for c in d["checks"] if c["name"].startswith("round trips")]
assert check and check[0]["verdict"] in ("ok", "warn"), check
print("doctor_test: network: %.0f us at 4 KiB, %.3f GB/s at 64 MiB" % (pts[0]["median_us"], pts[-1]["gbps"]))
PY
# Without the job's keys a CURVE server does not answer: a fail verdict, bounded.
timeout 60 "$BIN/osprey" doctor --network "$EP" >"$T/nokeys.txt" 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat "$T/nokeys.txt"; fail "--network without keys: exit $rc, not 1"; }
grep -q "\[fail\] round trips" "$T/nokeys.txt" || fail "--network without keys is not a fail verdict"
echo "doctor_test: OK"
