#!/usr/bin/env bash
# Configures Osprey (Release, Ninja) into $BUILD_DIR (default build/). The one place the README's
# commands take their cmake options from, so every configure of a build dir is the same one and
# a later configure changes no compile line (deploy/test.sh checks that).
# Usage: deploy/configure.sh [extra cmake -D options]   (env: BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$BUILD_DIR"
# cmake's own lines go to a log (shown when it fails); one line here says what was configured.
if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > "$BUILD_DIR/configure.log" 2>&1; then
  cat "$BUILD_DIR/configure.log" >&2
  echo "configure: FAILED (log above: $BUILD_DIR/configure.log)" >&2
  exit 1
fi
echo "configure: $BUILD_DIR ($(grep -o 'osprey: .*' "$BUILD_DIR/configure.log" | head -1))"
