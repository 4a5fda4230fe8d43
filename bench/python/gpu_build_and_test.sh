#!/usr/bin/env bash
# On the GPU machine (no network, no pip): builds osprey._C for its python3 from a pack
# (bench/gpu/pack.sh BUILD_DIR PACK, then bench/python/gpu_pack.sh BUILD_DIR PACK, on the build
# machine), runs the Python tests with CUDA tensors against the pack's servers, and benchmarks
# examples/train_dlrm.py --device cuda on the Kaggle-shaped job (configs/bench-dlrm-kaggle.yaml,
# batch 16384) next to the C++ GPU worker (osprey-worker, the same job) and the all-on-GPU PyTorch
# reference (bench/reference/dlrm_torch.py), printing samples/s of each.
#
# Usage, from the repository root on the GPU machine:
#   bench/python/gpu_build_and_test.sh PACK [all|build|test|bench] [OUT_DIR]
# build: probe (python3, headers, torch, CUDA, compiler, cmake) and make the module; test: build,
# then pytest python/tests (the CUDA cases run when torch sees a GPU); bench: build, then the three
# DLRM runs. all (default): build, test, bench. Logs go to OUT_DIR (default ./gpu-test-results/python).
# env: PYTHON (default python3), STEPS (training steps per DLRM run, default 100), POOL (batches
# train_dlrm.py reuses, default 64, as the C++ worker's data_pool_batches), PYTEST_ARGS;
# BENCH_CONFIG / BENCH_DEVICE (default configs/bench-dlrm-kaggle.yaml / cuda: a CPU dry run of
# the bench is BENCH_CONFIG=configs/local.yaml BENCH_DEVICE=cpu).
# The module is built once into build-gpu-python/ (kept while the machine stays warm).
set -u -o pipefail
usage="usage: $0 PACK [all|build|test|bench] [OUT_DIR]"
pack=$(cd "${1:?$usage}" && pwd) || exit 2
what=${2:-all}
out=${3:-$PWD/gpu-test-results/python}
case $what in all|build|test|bench) ;; *) echo "$usage" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mkdir -p "$out"
py=${PYTHON:-python3}
kit=$pack/python
[ -f "$kit/flags.sh" ] || { echo "gpu_build_and_test: $kit is not a Python kit: run bench/python/gpu_pack.sh BUILD_DIR $pack" >&2; exit 2; }
. bench/gpu/env.sh  # LD_LIBRARY_PATH: the pack's libraries, the system's NCCL and CUDA
export LD_LIBRARY_PATH="$kit/lib:$LD_LIBRARY_PATH"
work=$root/build-gpu-python
site=$work/site  # osprey/ (this checkout's Python sources and the module) and pytest

echo "== probe"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: unavailable"
echo "cpu cores: $(nproc)"
"$py" - <<'PY' || { echo "gpu_build_and_test: $py does not run" >&2; exit 2; }
import os, sys, sysconfig
inc = sysconfig.get_paths()["include"]
print(f"python: {sys.executable} {sys.version.split()[0]}; headers: {inc} "
      f"({'present' if os.path.exists(os.path.join(inc, 'Python.h')) else 'MISSING: the pack has copies'}); "
      f"extension suffix {sysconfig.get_config_var('EXT_SUFFIX')}")
for mod in ("numpy", "torch", "pytest"):
    try:
        m = __import__(mod)
        extra = ""
        if mod == "torch":
            extra = f", CUDA {m.version.cuda}, cuda.is_available() = {m.cuda.is_available()}"
            if m.cuda.is_available():
                extra += f" ({m.cuda.get_device_name(0)})"
        print(f"{mod}: {m.__version__}{extra}")
    except Exception as e:  # noqa: BLE001 - a probe
        print(f"{mod}: not importable ({type(e).__name__}: {e})")
PY
for c in "${CXX:-}" c++ g++ clang++; do
  [ -n "$c" ] && command -v "$c" >/dev/null && { echo "compiler: $(command -v "$c") ($("$c" -dumpfullversion -dumpversion 2>/dev/null))"; break; }
done
echo "cmake: $(command -v cmake >/dev/null && cmake --version | head -1 || echo 'absent (not needed: build_module.sh runs the compiler directly)')"
echo "nvcc: $(command -v nvcc >/dev/null && nvcc --version | tail -1 || echo absent)"

# The module: this checkout's osprey/*.py, and _C built for this python (or the pack's stable-ABI one).
imports() { (cd / && PYTHONPATH="$site" "$py" -c 'import osprey, osprey._C; print("osprey._C:", osprey._C.__file__)'); }
build_module() {
  rm -rf "$site/osprey" && mkdir -p "$site/osprey"
  cp python/osprey/*.py "$site/osprey/"
  if [ -f "$work/_C.built" ] && cp "$(cat "$work/_C.built")" "$site/osprey/" && imports; then return 0; fi
  rm -f "$site"/osprey/_C*.so
  if [ -f "$kit/prebuilt/_C.abi3.so" ] && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
    cp "$kit/prebuilt/_C.abi3.so" "$site/osprey/"
    if imports; then echo "module: the pack's prebuilt _C.abi3.so (stable ABI)"; return 0; fi
    echo "module: the prebuilt _C.abi3.so does not import here; building one"
    rm -f "$site/osprey/_C.abi3.so"
  fi
  mkdir -p "$work/module"
  bash bench/python/build_module.sh "$pack" "$py" "$work/module" >"$out/build.log" 2>&1 || {
    tail -40 "$out/build.log"; echo "gpu_build_and_test: FAILED building _C (log: $out/build.log)" >&2; return 1; }
  tail -1 "$out/build.log"
  cp "$work/module"/_C*.so "$site/osprey/" && imports || { echo "gpu_build_and_test: the built _C does not import" >&2; return 1; }
  ls "$work/module"/_C*.so | head -1 >"$work/_C.built"
}
mkdir -p "$site"
if ! "$py" -c 'import pytest' 2>/dev/null; then
  tar -C "$work" -xzf "$kit/site.tar.gz"  # its site/ is $site: pytest from the pack
fi
echo "== build"
build_module || exit 1
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export OSPREY_BIN_DIR=$pack/bin OSPREY_SOURCE_DIR=$root
[ "$what" = build ] && exit 0
status=0

if [ "$what" = all ] || [ "$what" = test ]; then
  echo "== test (pytest python/tests; log $out/pytest.log)"
  # The fixtures' binaries: the pack's osprey-coordinator / osprey-server; -rs lists skip reasons.
  "$py" -m pytest -v -p no:cacheprovider -rs ${PYTEST_ARGS:-} python/tests >"$out/pytest.log" 2>&1 || status=1
  grep -E '^(FAILED|ERROR)' "$out/pytest.log" | head -20
  tail -1 "$out/pytest.log"
  n() { grep -cE "\[[^]]*cuda[^]]*\] $1" "$out/pytest.log" || true; }
  echo "CUDA cases: $(n PASSED) passed, $(n FAILED) failed, $(n SKIPPED) skipped" \
       "(+ the CUDA-only tests of test_device.py: see the log)"
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
  steps=${STEPS:-100}
  pool=${POOL:-64}
  cfg=${BENCH_CONFIG:-configs/bench-dlrm-kaggle.yaml}
  dev=${BENCH_DEVICE:-cuda}
  echo "== bench: $cfg, $steps steps, train_dlrm.py on $dev (logs in $out)"
  launch() {  # NAME [--set k=v ...]
    local name=$1
    shift
    rm -rf "$out/$name"
    "$pack/bin/osprey" launch "$cfg" --quiet --bin-dir "$pack/bin" --log-dir "$out/$name" \
      --report-json "$out/$name.json" --set train.steps="$steps" "$@" >"$out/$name.out" 2>&1
  }
  # The C++ data pool reuses data_pool_batches pre-made batches; train_dlrm.py --pool the same.
  launch python --set "worker.command=[$py, examples/train_dlrm.py, --device, $dev, --pool, $pool]" ||
    { status=1; tail -20 "$out/python.out"; tail -20 "$out/python"/worker-0*.log 2>/dev/null; }
  launch cpp --set "worker.command=[]" || { status=1; tail -20 "$out/cpp.out"; }
  "$py" bench/reference/dlrm_torch.py --batch 16384 --json "$out/reference.json" >"$out/reference.log" 2>&1 ||
    { status=1; tail -20 "$out/reference.log"; }
  "$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def report(name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            return json.load(f)
    except Exception as e:  # noqa: BLE001 - a missing run is printed as such
        return {"error": str(e)}
py, cpp = report("python"), report("cpp")
try:
    ref = next(r for r in json.load(open(os.path.join(out, "reference.json"))) if r.get("batch") == 16384)
except Exception as e:  # noqa: BLE001
    ref = {"error": str(e)}
rows = [("train_dlrm.py (osprey.torch)", py), ("osprey-worker (C++ GPU worker)", cpp),
        ("PyTorch reference, all tables on the GPU", ref)]
base = cpp.get("samples_per_sec")
print(f"{'run':44} {'samples/s':>12} {'vs C++':>8} {'AUC':>7}")
for name, r in rows:
    sps = r.get("samples_per_sec")
    if sps is None:
        print(f"{name:44} {'-':>12}   ({r.get('error', 'no samples_per_sec in the report')})")
        continue
    rel = f"{100 * sps / base:.0f}%" if base else "-"
    auc = r.get("auc")
    print(f"{name:44} {sps:12.0f} {rel:>8} {auc if isinstance(auc, str) else (f'{auc:.4f}' if auc else '-'):>7}")
PY
fi
exit $status
