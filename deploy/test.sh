#!/usr/bin/env bash
# README command 2: install what is missing, build (Release) everything, check that the build is
# deterministic (configuring again leaves ninja nothing to do), build the non-CUDA code with clang's
# -Wthread-safety (deploy/check-thread-safety.sh), run the in-tree fuzz targets for a bounded time
# under ASan/UBSan (deploy/fuzz.sh; FUZZ_SECONDS per target, default 30; FUZZ_SECONDS=0 skips
# them), then the whole test suite (unit and integration; gpu-labelled tests skip themselves where
# no GPU is present). Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_DIR=$BUILD_DIR bash deploy/build.sh

# A second configure must change no compile line: otherwise every configure (each README command
# runs one) rebuilds the world.
BUILD_DIR=$BUILD_DIR bash deploy/configure.sh >/dev/null
if ! plan=$(ninja -n -C "$BUILD_DIR"); then
  echo "test.sh: ninja -n failed after a second configure" >&2
  exit 1
fi
if ! grep -q "no work to do" <<<"$plan"; then
  echo "test.sh: FAILED: configuring $BUILD_DIR again left ninja work to do (the build is not" >&2
  echo "test.sh: deterministic: some compile or link line changes between configures):" >&2
  head -n 20 <<<"$plan" >&2
  exit 1
fi
echo "test.sh: second configure: ninja has no work to do"

bash deploy/check-thread-safety.sh

if [ "${FUZZ_SECONDS:-30}" != "0" ]; then
  bash deploy/fuzz.sh
fi

BUILD_DIR=$BUILD_DIR bash deploy/python-env.sh  # the venv ctest's python_tests run in
# Last, so that ctest's summary closes the output.
(cd "$BUILD_DIR" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900 "$@")
