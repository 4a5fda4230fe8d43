#!/usr/bin/env bash
# README command 1: install what is missing, build (Release) the four binaries a job needs -- tests
# and benchmarks are left to deploy/test.sh, which reuses what this built -- run the default job
# (a local cluster: coordinator, 2 servers, 2 workers as separate processes, training a small DLRM
# on synthetic data) and print its report. Extra arguments go to `osprey launch`.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS="osprey osprey-coordinator osprey-server osprey-worker" bash deploy/build.sh
exec ./build/bin/osprey launch configs/local.yaml "$@"
