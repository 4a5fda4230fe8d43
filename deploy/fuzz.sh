#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: request_fuzzer over a live server's request path,
# codec_fuzzer over the codec frame decoder, seal_fuzzer over the sealed data port's opening) with
# clang -fsanitize=fuzzer,address,undefined into $FUZZ_BUILD_DIR (default build-fuzz/; CUDA off,
# only the libraries they need), then runs each for FUZZ_SECONDS (default 30, so 90 s in all) from the checked-in seed corpora in
# tests/fuzz/corpus/ (new inputs go to $FUZZ_BUILD_DIR/corpus-*, never into the tree). Fails on
# any crash, sanitizer report, leak, timeout or lost reply; the input that caused it is left in
# $FUZZ_BUILD_DIR/artifacts/ -- turn it into a unit test. Called by deploy/test.sh (so CI runs it).
# Usage: deploy/fuzz.sh   (env: FUZZ_SECONDS, FUZZ_BUILD_DIR, JOBS, CLANGXX, CLANGCC)
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
JOBS=${JOBS:-$(nproc)}
CLANGXX=${CLANGXX:-clang++}
CLANGCC=${CLANGCC:-clang}
if ! command -v "$CLANGXX" >/dev/null; then
  echo "fuzz: $CLANGXX not found (deploy/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache); fi
# fuzzer-no-link instruments every library for coverage; only the targets link libFuzzer's main.
# Undefined behaviour aborts (no recover), so the fuzzer sees it as a crash. clang 14 needs
# -fsized-deallocation for the sized, aligned operator delete (see check-thread-safety.sh).
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -fsized-deallocation"
echo "fuzz: configuring $FUZZ_BUILD_DIR with $CLANGXX"
cmake -S . -B "$FUZZ_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CLANGCC" -DCMAKE_CXX_COMPILER="$CLANGXX" "${launcher[@]}" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DOSPREY_WITH_CUDA=OFF -DOSPREY_WITH_RDMA=OFF -DOSPREY_WITH_REDIS=OFF \
  -DOSPREY_BUILD_TESTS=OFF -DOSPREY_BUILD_BENCH=OFF -DOSPREY_BUILD_FUZZ=ON >/dev/null
echo "fuzz: building request_fuzzer codec_fuzzer seal_fuzzer"
cmake --build "$FUZZ_BUILD_DIR" -j "$JOBS" --target request_fuzzer codec_fuzzer seal_fuzzer -- --quiet
mkdir -p "$FUZZ_BUILD_DIR/artifacts"
status=0
for target in request codec seal; do
  work="$FUZZ_BUILD_DIR/corpus-$target"
  mkdir -p "$work"
  echo "fuzz: ${target}_fuzzer for ${FUZZ_SECONDS} s"
  # Arguments: the work corpus first (new inputs are written there), the checked-in seeds read only.
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$FUZZ_BUILD_DIR/bin/${target}_fuzzer" -max_total_time="$FUZZ_SECONDS" -max_len=4096 \
      -timeout=60 -rss_limit_mb=3072 -use_value_profile=1 -print_final_stats=1 \
      -artifact_prefix="$FUZZ_BUILD_DIR/artifacts/${target}-" "$work" "tests/fuzz/corpus/$target" \
      2> "$FUZZ_BUILD_DIR/${target}_fuzzer.log"; then
    echo "fuzz: ${target}_fuzzer FAILED; the end of its log ($FUZZ_BUILD_DIR/${target}_fuzzer.log):" >&2
    tail -n 60 "$FUZZ_BUILD_DIR/${target}_fuzzer.log" >&2
    ls -l "$FUZZ_BUILD_DIR/artifacts" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^Done" "$FUZZ_BUILD_DIR/${target}_fuzzer.log" || true
  fi
done
if [ "$status" -ne 0 ]; then exit 1; fi
echo "fuzz: ok"
