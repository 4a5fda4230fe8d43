#!/usr/bin/env bash
# Copies the binaries bench/gpu/run.sh needs from BUILD_DIR/bin, with the shared libraries they
# load (not glibc, libstdc++, libcuda, NCCL or cuBLAS, which the GPU machine has), into PACK/bin
# and PACK/lib. With --tests, also the GPU test binaries (BUILD_DIR/tests, the ctest label gpu)
# that bench/gpu/run-tests.sh runs.
#   bench/gpu/pack.sh BUILD_DIR PACK [--tests]
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR PACK [--tests]}
dest=${2:?usage: $0 BUILD_DIR PACK [--tests]}
mkdir -p "$dest/bin" "$dest/lib"
bins=()
for b in osprey osprey-coordinator osprey-server osprey-worker osprey-bench-dlrm osprey-bench-codec; do
  bins+=("$build/bin/$b")
done
if [ "${3:-}" = "--tests" ]; then
  while read -r t; do
    case "$t" in ''|'#'*) continue ;; esac
    bins+=("$build/tests/$t")
  done < "$(dirname "$0")/gpu-tests.txt"
elif [ -n "${3:-}" ]; then
  echo "usage: $0 BUILD_DIR PACK [--tests]" >&2
  exit 2
fi
for path in "${bins[@]}"; do
  [ -x "$path" ] || { echo "missing $path (build with CUDA first)" >&2; exit 2; }
  cp -f "$path" "$dest/bin/"
  ldd "$path" | awk '/=> \//{print $3}' | while read -r l; do
    case "$(basename "$l")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*|libcuda.so*|libnccl.so*|libcublas*) ;;
      *) cp -fL "$l" "$dest/lib/" ;;
    esac
  done
done
du -sh "$dest" | awk '{print "packed " $1 " into " $2}'
