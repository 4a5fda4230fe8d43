#!/usr/bin/env bash
# Adds to a GPU pack (bench/gpu/pack.sh BUILD_DIR PACK made bin/ and lib/) the Python kit that
# bench/python/gpu_build_and_test.sh needs to build osprey._C on the GPU machine, offline, for
# whatever python3 is there (this machine builds for Debian's 3.11; the extension cannot be
# moved between Python versions):
#   PACK/python/nanobind/   the nanobind package of BUILD_DIR's venv (its include/, src/, ext/)
#   PACK/python/gen/        BUILD_DIR's generated headers that _C's sources include (proto/*.pb.h)
#   PACK/python/include/    the third-party headers they include (protobuf, spdlog, fmt, ...), not
#                           the C or C++ library's: the GPU machine's compiler has its own
#   PACK/python/lib/        the static libraries _C links and the shared ones (by soname)
#   PACK/python/flags.sh    the compile flags and link inputs of BUILD_DIR's ninja commands for _C
#   PACK/python/pyinclude.tar.gz  Python 3.10+ headers of the CPythons found here (pyenv), for a
#                           python3 whose -dev headers are not installed
#   PACK/python/site.tar.gz pytest and its pure-Python dependencies (nothing is pip-installed there)
#   PACK/python/prebuilt/   _C.abi3.so (Python 3.12's stable ABI: any CPython >= 3.12), built here
#                           from the kit itself when a CPython >= 3.12 with headers is found
# Then it checks the kit: builds _C from it with BUILD_DIR's venv python in a clean temp
# directory and imports it.
#   bench/python/gpu_pack.sh BUILD_DIR PACK
# BUILD_DIR: a build where osprey._C was built (deploy/python-env.sh: OSPREY_WITH_PYTHON=ON).
set -euo pipefail
usage="usage: $0 BUILD_DIR PACK"
build=$(cd "${1:?$usage}" && pwd)
mkdir -p "${2:?$usage}"
pack=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
venv_py=$build/python-venv/bin/python
[ -x "$venv_py" ] || { echo "gpu_pack: no venv in $build: run BUILD_DIR=$build deploy/python-env.sh" >&2; exit 2; }
kit=$pack/python
rm -rf "$kit"
mkdir -p "$kit/lib" "$kit/gen" "$kit/include" "$kit/pyinclude" "$kit/site"
[ -d "$pack/lib" ] || echo "gpu_pack: note: $pack/lib is missing: run bench/gpu/pack.sh first, then shared libraries it packs are not copied twice"

cmds=$(ninja -C "$build" -t commands _C)
compile_of() { grep -E -- "-c [^ ]*$1\$" <<<"$cmds" | head -1; }
module_cmd=$(compile_of python/src/module.cc)
nb_cmd=$(compile_of nanobind/src/nb_func.cpp)
link_cmd=$(grep -E -- "-o [^ ]*_C\.[^ ]*\.so " <<<"$cmds" | tail -1)
[ -n "$module_cmd" ] && [ -n "$nb_cmd" ] && [ -n "$link_cmd" ] || {
  echo "gpu_pack: no ninja commands for _C in $build (is OSPREY_WITH_PYTHON on? run deploy/python-env.sh)" >&2; exit 2; }

# Compile flags: the defines, -O/-f/-W/-m/-std flags (the include directories are the kit's).
flags() { tr ' ' '\n' <<<"$1" | grep -E '^-(D|O|f|W|m|std=)' | grep -v '^-D_C_EXPORTS$' | tr '\n' ' '; }
nb_dir=$("$venv_py" -c 'import nanobind, os; print(os.path.dirname(nanobind.__file__))')
nb_sources=$(ls "$nb_dir/src" | sed -n 's/\.cpp$//p' | grep -v '^nb_combined$' | while read -r f; do
  grep -q "nanobind/src/$f.cpp" <<<"$cmds" && echo "$f"; done | tr '\n' ' ')

# Link inputs in their order: Osprey's static libraries and the shared ones, into lib/.
inputs=()
link_flags=()
skip_next=0
for t in $link_cmd; do
  if [ $skip_next = 1 ]; then skip_next=0; continue; fi
  case $t in
    :|'&&'|*/c++|*/g++|*/clang++|c++|g++|clang++) ;;
    -o) skip_next=1 ;;
    -shared) ;;
    -l*) inputs+=("$t") ;;
    -*) link_flags+=("$t") ;;
    *.o) ;;
    *libnanobind*.a) ;;  # built for the target python
    *.a) cp -f "$build/$t" "$kit/lib/"; inputs+=("lib/$(basename "$t")") ;;
    *.so|*.so.*)
      soname=$(objdump -p "$t" 2>/dev/null | awk '/SONAME/{print $2}')
      soname=${soname:-$(basename "$t")}
      if cmp -s "$t" "$pack/lib/$soname"; then  # bench/gpu/pack.sh packed it already
        inputs+=("../lib/$soname")
      else
        cp -fL "$t" "$kit/lib/$soname"
        inputs+=("lib/$soname")
      fi ;;
  esac
done
# The shared libraries those load in turn (as bench/gpu/pack.sh: not glibc, libstdc++, CUDA).
for l in "$kit"/lib/*.so* "$pack"/lib/*.so*; do
  [ -e "$l" ] || continue
  ldd "$l" | awk '/=> \//{print $3}' | while read -r d; do
    case "$(basename "$d")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*|libcuda.so*|libnccl.so*|libcublas*) ;;
      *) [ -e "$kit/lib/$(basename "$d")" ] || [ -e "$pack/lib/$(basename "$d")" ] || cp -fL "$d" "$kit/lib/" ;;
    esac
  done
done

# Headers: every one the four sources included, by where it lives.
objs=(python/src/CMakeFiles/_C.dir/module.cc.o python/src/CMakeFiles/_C.dir/job_client.cc.o
      python/src/CMakeFiles/_C.dir/kernels.cc.o python/src/CMakeFiles/_C.dir/__/__/tools/checkpoint_command.cc.o)
deps=$(ninja -C "$build" -t deps "${objs[@]}" | grep -v ':' | sed 's/^ *//' | grep . | sort -u)
sys_headers=()
while read -r h; do
  case $h in
    "$build"/python-venv/*) ;;
    "$build"/*) rel=${h#"$build"/}; mkdir -p "$kit/gen/$(dirname "$rel")"; cp -f "$h" "$kit/gen/$rel" ;;
    /usr/include/python3*|/usr/include/*/python3*|/usr/include/c++/*|/usr/include/*/c++/*) ;;
    /usr/include/*) sys_headers+=("$h") ;;
  esac
done <<<"$deps"
# Third-party headers are those no C library / kernel headers package owns; their top-level
# directory under /usr/include is copied whole (another compiler may take other #if branches).
tops=$(dpkg -S "${sys_headers[@]}" 2>/dev/null | grep -vE '^(libc6-dev|linux-libc-dev|libcrypt-dev|libstdc\+\+|libgcc)' |
       sed -E 's#^.*: /usr/include/([^/]+).*#\1#' | sort -u)
for top in $tops; do cp -a "/usr/include/$top" "$kit/include/"; done

{
  echo "# Made by bench/python/gpu_pack.sh from $build ($(date -u +%FT%TZ)); paths relative to this directory."
  echo "CXXFLAGS_MODULE='$(flags "$module_cmd")'"
  echo "CXXFLAGS_NANOBIND='$(flags "$nb_cmd")'"
  echo "NANOBIND_SOURCES='$nb_sources'"
  echo "LINK_FLAGS='${link_flags[*]}'"
  echo "LINK_INPUTS='${inputs[*]}'"
} >"$kit/flags.sh"

cp -a "$nb_dir" "$kit/nanobind"
rm -rf "$kit/nanobind/__pycache__"
site=$("$venv_py" -c 'import pytest, os; print(os.path.dirname(os.path.dirname(pytest.__file__)))')
for m in pytest _pytest pluggy iniconfig packaging pygments py.py; do
  if [ -e "$site/$m" ]; then cp -a "$site/$m" "$kit/site/"; fi
done
for d in pytest pluggy iniconfig packaging pygments; do  # their metadata: pytest reads pluggy's
  cp -a "$site/$d"-*.dist-info "$kit/site/"
done
find "$kit/site" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$kit" -czf "$kit/site.tar.gz" site && rm -rf "$kit/site"  # pygments is 5 MB unpacked

# Python headers of the CPythons here (pyenv's, /usr/include's), one directory per version.
for inc in /root/.pyenv/versions/*/include/python3.* /usr/include/python3.*; do
  [ -f "$inc/Python.h" ] || continue
  v=$(basename "$inc")
  case $v in python3.1[0-9]) ;; *) continue ;; esac  # 3.10 and later, not debug / free-threaded builds
  [ -d "$kit/pyinclude/$v" ] && continue
  mkdir -p "$kit/pyinclude/$v"
  cp -a "$inc/." "$kit/pyinclude/$v/"
  # Debian keeps pyconfig.h under the multiarch directory: put it next to Python.h.
  [ -f "$kit/pyinclude/$v/pyconfig.h" ] || cp -f "/usr/include/x86_64-linux-gnu/$v/pyconfig.h" "$kit/pyinclude/$v/" 2>/dev/null || true
done
tar -C "$kit" -czf "$kit/pyinclude.tar.gz" pyinclude && rm -rf "$kit/pyinclude"

# The stable-ABI module, built here from the kit (any CPython >= 3.12 on the GPU machine).
abi_py=${OSPREY_ABI3_PYTHON:-}
if [ -z "$abi_py" ]; then
  for p in /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /root/.pyenv/versions/3.13*/bin/python3.13 /usr/bin/python3.13; do
    if [ -x "$p" ] && "$p" -c pass 2>/dev/null; then abi_py=$p; break; fi
  done
fi
if [ -n "$abi_py" ]; then
  bash "$here/build_module.sh" "$pack" "$abi_py" "$kit/prebuilt" --abi3 >"$kit/prebuilt.log" 2>&1 &&
    (cd "$kit/prebuilt" && LD_LIBRARY_PATH="$kit/lib" "$abi_py" -c 'import _C; print("gpu_pack: prebuilt", _C.__file__, "imports")') ||
    { cat "$kit/prebuilt.log" >&2; echo "gpu_pack: WARNING: no prebuilt _C.abi3.so (the GPU machine builds it)" >&2; rm -rf "$kit/prebuilt"; }
else
  echo "gpu_pack: no CPython >= 3.12 here: no prebuilt _C.abi3.so (the GPU machine builds it)"
fi

# The check: the kit alone builds a module that imports (this machine's venv python, a clean dir).
check=$(mktemp -d "${TMPDIR:-/tmp}/osprey-gpu-pack-check-XXXXXX")
bash "$here/build_module.sh" "$pack" "$venv_py" "$check" >"$kit/check.log" 2>&1 ||
  { cat "$kit/check.log" >&2; echo "gpu_pack: FAILED: the kit does not build _C here (log above)" >&2; exit 1; }
(cd "$check" && LD_LIBRARY_PATH="$kit/lib" "$venv_py" -c 'import _C; _C.JobClient') ||
  { echo "gpu_pack: FAILED: the module built from the kit does not import" >&2; exit 1; }
rm -rf "$check"
du -sh "$kit" | awk '{print "gpu_pack: python kit " $1 " in " $2}'
du -sh "$pack" | awk '{print "gpu_pack: pack " $1 " in all (the device tool carries at most 64 MiB)"}'
