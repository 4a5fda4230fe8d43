#!/usr/bin/env bash
# Installs, from Debian 12 packages, every build and test dependency of Osprey that is missing.
# Idempotent: packages already present are not touched, and apt-get runs only when something is
# missing. Run as root (or through sudo). Used by the README's two commands and by .ci/run.
# Prints one line per step; apt's and dpkg's output goes to a log file ($INSTALL_LOG, default
# /tmp/osprey-install-deps.log) that is printed only when a step fails.
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev  # libFuzzer and the ASan/UBSan runtimes (deploy/fuzz.sh)
  libzmq3-dev cppzmq-dev
  libssl-dev  # common/zmq_seal: AES-256-GCM of the CURVE sealed data plane (libcrypto)
  libsodium-dev  # bench/security/cipher_cost.cc: libzmq CURVE's cipher, measured directly
  libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libhiredis-dev redis-server
  libibverbs-dev librdmacm-dev
  python3 procps
  prometheus-cpp-dev prometheus  # common/metrics' exposer; Prometheus + promtool for its tests
  # python3-venv (below): also deploy/venv.sh: kubernetes-validate and matplotlib from PyPI
  slurmctld slurmd slurm-client munge  # the one-node Slurm cluster of tests/deploy/slurm_test.sh
  python3-venv python3-dev python3-numpy python3-torch  # the osprey Python package (deploy/python-env.sh)
  libopenblas0-pthread  # BLAS for numpy/torch: Debian's default reference BLAS is ~20x slower
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

LOG=${INSTALL_LOG:-/tmp/osprey-install-deps.log}
: >"$LOG"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

# step DESCRIPTION COMMAND...: prints the step, runs it with its output in $LOG; on failure
# prints the log and exits with the command's status.
step() {
  local what=$1
  shift
  echo "install-deps: $what"
  local rc=0
  "$@" >>"$LOG" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "install-deps: FAILED ($what, exit $rc); output of $LOG:" >&2
    cat "$LOG" >&2
    exit "$rc"
  fi
}

step "apt-get update" $SUDO apt-get update
step "installing ${#missing[@]} packages: ${missing[*]}" \
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-deps: done (log: $LOG)"
