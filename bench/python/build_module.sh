#!/usr/bin/env bash
# Builds osprey._C for one python from a pack's Python kit (bench/python/gpu_pack.sh made
# PACK/python), offline: no cmake, no pip, no network -- the compile and link commands are the
# ones the build's ninja ran for _C, with the pack's paths. Needs a C++17 compiler (c++, g++ or
# clang++; $CXX overrides) and this checkout's sources (python/src, tools/, common/, ...).
#
#   bench/python/build_module.sh PACK PYTHON OUT_DIR [--abi3]
#
# Writes OUT_DIR/_C<EXT_SUFFIX> (e.g. _C.cpython-312-x86_64-linux-gnu.so), or with --abi3
# OUT_DIR/_C.abi3.so built on Python 3.12's stable ABI (one file for CPython >= 3.12). Python's
# headers: PYTHON's own (sysconfig), else the pack's copy for its version (PACK/python/pyinclude.tar.gz).
set -euo pipefail
usage="usage: $0 PACK PYTHON OUT_DIR [--abi3]"
kit=$(cd "${1:?$usage}" && pwd)/python
py=${2:?$usage}
out=${3:?$usage}
abi3=${4:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$kit/flags.sh" ] || { echo "build_module: $kit/flags.sh missing: make the pack with bench/python/gpu_pack.sh" >&2; exit 2; }
. "$kit/flags.sh"  # CXXFLAGS_MODULE, CXXFLAGS_NANOBIND, NANOBIND_SOURCES, LINK_FLAGS, LINK_INPUTS (relative to $kit)

cxx=${CXX:-}
if [ -z "$cxx" ]; then
  for c in c++ g++ clang++; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
[ -n "$cxx" ] || { echo "build_module: no C++ compiler (c++, g++, clang++; or set CXX)" >&2; exit 2; }
obj=$(mktemp -d "${TMPDIR:-/tmp}/osprey-build-module-XXXXXX")
trap 'rm -rf "$obj"' EXIT
read -r pyver pyinc suffix < <("$py" -c 'import sys, sysconfig; print("%d.%d" % sys.version_info[:2], sysconfig.get_paths()["include"], sysconfig.get_config_var("EXT_SUFFIX"))')
if [ ! -f "$pyinc/Python.h" ]; then
  tar -C "$obj" -xzf "$kit/pyinclude.tar.gz" "pyinclude/python$pyver" 2>/dev/null || true
  if [ -f "$obj/pyinclude/python$pyver/Python.h" ]; then
    echo "build_module: $py has no headers at $pyinc; using the pack's Python $pyver headers"
    pyinc=$obj/pyinclude/python$pyver
  else
    echo "build_module: no Python.h for Python $pyver ($pyinc, nor in the pack's pyinclude.tar.gz: it has" \
         "$(tar -tzf "$kit/pyinclude.tar.gz" 2>/dev/null | sed -n 's#^pyinclude/\(python3[.0-9]*\)/$#\1#p' | tr '\n' ' ')); install python$pyver-dev" >&2
    exit 2
  fi
fi
defs=()
if [ "$abi3" = --abi3 ]; then
  case $pyver in 3.1[2-9]) ;; *) echo "build_module: --abi3 needs Python >= 3.12 headers, $py is $pyver" >&2; exit 2 ;; esac
  suffix=.abi3.so
  defs=(-DPy_LIMITED_API=0x030C0000)
elif [ -n "$abi3" ]; then
  echo "$usage" >&2
  exit 2
fi
nb=$kit/nanobind
echo "build_module: $cxx ($("$cxx" -dumpfullversion -dumpversion 2>/dev/null | head -1)) for Python $pyver ($pyinc) -> $out/_C$suffix"
compile() {  # OUTPUT SOURCE FLAGS...
  local o=$1 s=$2
  shift 2
  "$cxx" "$@" -c "$s" -o "$o" 2>"$o.log" || { cat "$o.log" >&2; echo "build_module: FAILED compiling $s" >&2; : >"$o.failed"; }
}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
run() {  # runs compile in the background, at most $jobs at once
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  compile "$@" &
}
for f in $NANOBIND_SOURCES; do
  run "$obj/nb_$f.o" "$nb/src/$f.cpp" $CXXFLAGS_NANOBIND "${defs[@]}" -I"$pyinc" -I"$nb/include" \
    -isystem "$nb/ext/robin_map/include"
done
for f in python/src/module.cc python/src/job_client.cc python/src/kernels.cc tools/checkpoint_command.cc; do
  run "$obj/$(basename "$f").o" "$src/$f" $CXXFLAGS_MODULE "${defs[@]}" -I"$src" -I"$pyinc" -I"$nb/include" \
    -I"$kit/gen" -I"$kit/gen/proto" -isystem "$kit/include"
done
wait
if ls "$obj"/*.failed >/dev/null 2>&1; then exit 1; fi
mkdir -p "$out"
inputs=()
for i in $LINK_INPUTS; do
  case $i in -*) inputs+=("$i") ;; *) inputs+=("$kit/$i") ;; esac
done
# $ORIGIN/../lib and the kit's lib: the packed shared libraries wherever the module lands.
"$cxx" $LINK_FLAGS -shared -o "$out/_C$suffix" "$obj"/*.o -Wl,--start-group "${inputs[@]}" -Wl,--end-group \
  -Wl,-rpath,"$kit/lib" || { echo "build_module: FAILED linking $out/_C$suffix" >&2; exit 1; }
echo "build_module: built $out/_C$suffix"
