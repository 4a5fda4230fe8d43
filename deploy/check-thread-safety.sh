#!/usr/bin/env bash
# Builds every non-CUDA library and binary with clang++ and -Wthread-safety -Werror=thread-safety
# into $TSA_BUILD_DIR (default build-thread-safety/), so a field read or written without the
# lock its GUARDED_BY names, or a call that skips a REQUIRES, fails the build (annotations:
# common/thread_annotations.h, common/mutex.h). Other clang warnings stay warnings. clang 14 needs
# -fsized-deallocation for the sized, aligned operator delete that GCC enables by default. Tests and
# benchmarks are left out: they take no annotated locks of their own, and the build stays short.
# Called by deploy/test.sh (and so by CI). Usage: deploy/check-thread-safety.sh  (env: JOBS)
set -euo pipefail
cd "$(dirname "$0")/.."
TSA_BUILD_DIR=${TSA_BUILD_DIR:-build-thread-safety}
JOBS=${JOBS:-$(nproc)}
CLANGXX=${CLANGXX:-clang++}
if ! command -v "$CLANGXX" >/dev/null; then
  echo "check-thread-safety: $CLANGXX not found (deploy/install-deps.sh installs clang)" >&2
  exit 1
fi
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
echo "check-thread-safety: configuring $TSA_BUILD_DIR with $CLANGXX"
cmake -S . -B "$TSA_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$CLANGXX" "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety -fsized-deallocation" \
  -DOSPREY_WITH_CUDA=OFF -DOSPREY_BUILD_TESTS=OFF -DOSPREY_BUILD_BENCH=OFF >/dev/null
echo "check-thread-safety: building"
if ! cmake --build "$TSA_BUILD_DIR" -j "$JOBS" -- --quiet; then
  echo "check-thread-safety: FAILED (thread-safety errors are shown above as -Werror=thread-safety)" >&2
  exit 1
fi
echo "check-thread-safety: ok"
