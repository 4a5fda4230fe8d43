#!/usr/bin/env bash
# Copies the binaries bench/gpu/run.sh needs from BUILD_DIR/bin, with the shared libraries they
# load (not glibc, libstdc++, libcuda, NCCL or cuBLAS, which the GPU machine has), into PACK/bin
# and PACK/lib.
#   bench/gpu/pack.sh BUILD_DIR PACK
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR PACK}
dest=${2:?usage: $0 BUILD_DIR PACK}
mkdir -p "$dest/bin" "$dest/lib"
for b in osprey osprey-coordinator osprey-server osprey-worker osprey-bench-dlrm; do
  [ -x "$build/bin/$b" ] || { echo "missing $build/bin/$b (build with CUDA first)" >&2; exit 2; }
  cp -f "$build/bin/$b" "$dest/bin/"
  ldd "$build/bin/$b" | awk '/=> \//{print $3}' | while read -r l; do
    case "$(basename "$l")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*|libcuda.so*|libnccl.so*|libcublas*) ;;
      *) cp -fL "$l" "$dest/lib/" ;;
    esac
  done
done
du -sh "$dest" | awk '{print "packed " $1 " into " $2}'
