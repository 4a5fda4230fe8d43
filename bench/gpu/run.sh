#!/usr/bin/env bash
# Runs the GPU DLRM benchmark (`osprey bench dlrm`) on a GPU machine from prebuilt binaries: local
# clusters (coordinator and servers on the CPU cores, one osprey-worker per GPU) training the
# Criteo-Kaggle-shaped DLRM of configs/bench-dlrm-kaggle.yaml, against the all-on-GPU PyTorch
# reference (bench/reference/dlrm_torch.py) in the same run, and prints the results table.
#
# Usage, from the repository root on the GPU machine:
#   bench/gpu/run.sh PACK [osprey bench dlrm flags...]
# e.g.
#   bench/gpu/run.sh pack --batches 2048,16384 --cache 1.0,0.1 --gpus 1,2 --runs 3 --json out.json
# PACK holds bin/ (osprey, osprey-coordinator, osprey-server, osprey-worker, osprey-bench-dlrm,
# built for sm_90) and lib/ (their shared libraries except glibc, libstdc++, libcuda and NCCL;
# bench/gpu/pack.sh BUILD_DIR PACK makes it). cuBLAS comes from PACK/lib or the machine's CUDA.
set -u -o pipefail
pack=$(cd "${1:?usage: $0 PACK [osprey bench dlrm flags...]}" && pwd) || exit 2
shift
. "$(dirname "$0")/env.sh"
echo "== device"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>/dev/null || echo "(nvidia-smi unavailable)"
nproc | sed 's/^/cpu cores: /'
exec "$pack/bin/osprey-bench-dlrm" --bin-dir "$pack/bin" "$@"
