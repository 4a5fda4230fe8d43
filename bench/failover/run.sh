#!/usr/bin/env bash
# Server failover benchmark: kill -9 of a server holding a 1M-row shard to training resumed on its
# replacement, per store (median of 3 runs per restart mode). Builds what it needs in BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
ninja -C "$BUILD_DIR" osprey-coordinator osprey-server osprey-worker osprey-bench-failover >/dev/null
export OSPREY_BIN_DIR=$PWD/$BUILD_DIR/bin OSPREY_SOURCE_DIR=$PWD
for store in ${STORES:-native redis}; do
  "$BUILD_DIR/bin/osprey-bench-failover" --store "$store" --rows "${ROWS:-1000000}" --runs "${RUNS:-3}"
done
