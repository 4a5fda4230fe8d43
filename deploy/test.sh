#!/usr/bin/env bash
# README command 2: install what is missing, build (Release), run the whole test suite (unit and
# integration; gpu-labelled tests skip themselves where no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/build.sh
cd build
ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900 "$@"
