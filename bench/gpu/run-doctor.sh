#!/usr/bin/env bash
# Runs `osprey doctor` from a pack (bench/gpu/pack.sh BUILD_DIR PACK) on a GPU machine: the text
# report, then --json into OUT_DIR/doctor.json, checked to parse, with the GPU checks' verdicts
# printed. The doctor needs nothing outside the pack: it reads /proc and /sys and dlopens NVML
# (libnvidia-ml.so.1), the CUDA driver and NCCL from the machine.
#   bench/gpu/run-doctor.sh PACK [OUT_DIR]      (exit: the doctor's, 3 when its JSON does not parse)
set -u -o pipefail
pack=$(cd "${1:?usage: $0 PACK [OUT_DIR]}" && pwd) || exit 2
out=${2:-$PWD/gpu-doctor}
mkdir -p "$out"
. "$(dirname "$0")/env.sh"
[ -x "$pack/bin/osprey" ] || { echo "no $pack/bin/osprey (bench/gpu/pack.sh copies it)" >&2; exit 2; }
"$pack/bin/osprey" doctor | tee "$out/doctor.txt"
"$pack/bin/osprey" doctor --json > "$out/doctor.json"
rc=$?
python3 - "$out/doctor.json" <<'PY' || exit 3
import json, sys
doc = json.load(open(sys.argv[1]))
print("doctor.json parses: %d checks, %s" % (len(doc["checks"]), doc["summary"]))
for c in doc["checks"]:
    if c["group"].lower() in ("gpu", "nccl", "cuda") or "gpu" in c["name"].lower():
        print("  %-10s %-28s %-5s %s" % (c["group"], c["name"], c["verdict"], c["found"]))
        for d in c["details"]:
            print("      " + d)
PY
exit $rc
