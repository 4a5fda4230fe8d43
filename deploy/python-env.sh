#!/usr/bin/env bash
# Makes the Python environment of the osprey package: a venv from Debian's /usr/bin/python3 with
# --system-site-packages (python3-numpy and python3-torch come from deploy/install-deps.sh), the
# build tools and pytest from PyPI, and `pip install ./python` (the nanobind module built by
# scikit-build-core over the repository's CMake project; its build dir is kept in
# $BUILD_DIR/python-pkg and compiles go through ccache, so a rebuild only recompiles what changed;
# with a main build in $BUILD_DIR the module is built there and pip only packs it, see below).
# Prints one line per step; pip's output goes to $BUILD_DIR/python-env.log (shown on failure).
# Usage: deploy/python-env.sh   (env: BUILD_DIR, default build; the venv is $BUILD_DIR/python-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$BUILD_DIR"
BUILD_ABS=$(cd "$BUILD_DIR" && pwd)
VENV=$BUILD_ABS/python-venv
LOG=$BUILD_ABS/python-env.log
: >"$LOG"

step() {
  local what=$1
  shift
  echo "python-env: $what"
  if ! "$@" >>"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "python-env: FAILED ($what; log above: $LOG)" >&2
    exit 1
  fi
}

[ -x "$VENV/bin/python" ] || step "venv $VENV" /usr/bin/python3 -m venv --system-site-packages "$VENV"
step "build tools and pytest from PyPI" "$VENV/bin/pip" install -q --disable-pip-version-check \
  "scikit-build-core>=0.10" "nanobind>=2.0" pytest
cmake_args=()
if command -v ccache >/dev/null; then
  cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# With a configured main build in $BUILD_DIR (deploy/build.sh ran), osprey._C is built there over
# its static libraries (OSPREY_WITH_PYTHON=ON, the venv's python) and pip only packs that file:
# the C++ libraries are not compiled a second time. OSPREY_PIP_STANDALONE=1, or no main build:
# pip builds everything itself in $BUILD_DIR/python-pkg.
module=
if [ -f "$BUILD_ABS/CMakeCache.txt" ] && [ "${OSPREY_PIP_STANDALONE:-0}" != 1 ]; then
  step "osprey._C in $BUILD_DIR" env BUILD_DIR="$BUILD_DIR" bash deploy/configure.sh -DOSPREY_WITH_PYTHON=ON \
    -DPython_EXECUTABLE="$VENV/bin/python"
  step "ninja -C $BUILD_DIR _C" ninja -C "$BUILD_ABS" _C
  module=$(cat "$BUILD_ABS/python-module-path.txt" 2>/dev/null || true)
  [ -f "$module" ] || { echo "python-env: FAILED: osprey._C was not built in $BUILD_ABS (log: $LOG)" >&2; exit 1; }
fi
cmake_args+=(-DOSPREY_PREBUILT_MODULE="$module")
step "pip install ./python" env CMAKE_ARGS="${cmake_args[*]}" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --config-settings=build-dir="$BUILD_ABS/python-pkg" "$ROOT/python"
step "import osprey" "$VENV/bin/python" -c "import osprey, osprey.torch"
echo "python-env: $VENV/bin/python ($("$VENV/bin/python" -c 'import numpy, sys; print("python", sys.version.split()[0], "numpy", numpy.__version__)'))"
