#!/usr/bin/env bash
# One device call's worth of #17's DLRM measurement at one batch size: `osprey bench dlrm` with
# fp32 rows on the wire next to both PyTorch references (fused and per-feature tables), then the
# same cases with bf16 rows both ways (tables.embeddings.codec.type=bf16 and pull_codec=bf16; the
# servers keep fp32), each case the median of RUNS runs. Prints the two tables; JSON to OUT_DIR.
#
# Usage, from the repository root on the GPU machine:
#   bench/gpu/run-dlrm-rows.sh PACK BATCH [OUT_DIR]
# env: RUNS (3), STEPS (1000), SERVERS (8: on a 16-core host 8 servers beat 16, bench/results/
# 2026-12-07-h100-s6-gpu-fix-dlrm.md), CACHE (1.0,0.1). Builds nothing.
set -u -o pipefail
pack=${1:?usage: $0 PACK BATCH [OUT_DIR]}
batch=${2:?usage: $0 PACK BATCH [OUT_DIR]}
out=${3:-$PWD/dlrm-rows-results}
mkdir -p "$out"
case "$batch" in ''|*[!0-9]*) echo "BATCH must be a number, not '$batch'" >&2; exit 2 ;; esac
export NCCL_NVLS_ENABLE=0
common=(--batches "$batch" --cache "${CACHE:-1.0,0.1}" --gpus 1 --runs "${RUNS:-3}"
        --steps "${STEPS:-1000}" --servers "${SERVERS:-8}")
here=$(dirname "$0")
echo "== fp32 rows, with the PyTorch references"
"$here/run.sh" "$pack" "${common[@]}" --ref-tables fused,per-feature \
  --json "$out/dlrm-$batch-fp32.json" --work-dir "$out/work-fp32" 2>&1 | tail -14
rc=$?
echo "== bf16 rows both ways"
"$here/run.sh" "$pack" "${common[@]}" --reference '' \
  --set tables.embeddings.codec.type=bf16 --set tables.embeddings.pull_codec=bf16 \
  --json "$out/dlrm-$batch-bf16.json" --work-dir "$out/work-bf16" 2>&1 | tail -8
rc_bf16=$?
[ "$rc" -ne 0 ] && exit "$rc"
exit "$rc_bf16"
