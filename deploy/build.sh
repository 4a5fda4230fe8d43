#!/usr/bin/env bash
# Configures and builds Osprey (Release) into build/ after installing missing dependencies.
# Usage: deploy/build.sh [extra cmake -D options]   (env: BUILD_DIR, JOBS)
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
