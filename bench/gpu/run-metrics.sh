#!/usr/bin/env bash
# Runs tests/metrics/gpu_metrics_check.py on a GPU machine from a pack (bench/gpu/pack.sh
# BUILD_DIR PACK): the default job on GPU workers with --metrics, checking the GPU loop's series.
# Extra arguments are --set values for the job. From the repository root:
#   bench/gpu/run-metrics.sh PACK [KEY=VALUE...]
set -u -o pipefail
pack=$(cd "${1:?usage: $0 PACK [KEY=VALUE...]}" && pwd) || exit 2
shift
. "$(dirname "$0")/env.sh"
export OSPREY_BIN_DIR="$pack/bin" OSPREY_SOURCE_DIR=${OSPREY_SOURCE_DIR:-$PWD}
[ -x "$pack/bin/promtool" ] && export PROMTOOL="$pack/bin/promtool"
exec python3 tests/metrics/gpu_metrics_check.py "$@"
