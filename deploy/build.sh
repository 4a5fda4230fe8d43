#!/usr/bin/env bash
# Installs missing dependencies, configures (deploy/configure.sh) and builds Osprey (Release) into
# build/, binaries in build/bin/.
# Usage: deploy/build.sh [extra cmake -D options]
#   env: BUILD_DIR (default build), JOBS (default nproc), TARGETS (space-separated ninja targets;
#   default: everything, tests and benchmarks included)
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
BUILD_DIR=$BUILD_DIR bash deploy/configure.sh "$@"
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
echo "build: $BUILD_DIR (${TARGETS:-all targets})"
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}" -- --quiet
