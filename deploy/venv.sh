#!/usr/bin/env bash
# Makes (or reuses) the Python virtual environment of the deploy tools and plots, and prints its
# path on the last line: kubernetes-validate (offline Kubernetes schema validation of deploy/k8s,
# schemas bundled) and matplotlib (osprey plot, osprey bench --plot). Idempotent: a venv that
# already imports both is reused without touching PyPI.
#   env: OSPREY_VENV (default: $HOME/.cache/osprey/venv)
# Needs python3-venv (deploy/install-deps.sh). Output of pip goes to $VENV/pip.log, printed on
# failure.
set -euo pipefail
VENV=${OSPREY_VENV:-${HOME:-/tmp}/.cache/osprey/venv}
check() {
  "$VENV/bin/python" -c 'import kubernetes_validate, matplotlib' >/dev/null 2>&1
}
if [ -x "$VENV/bin/python" ] && check; then
  echo "$VENV"
  exit 0
fi
mkdir -p "$(dirname "$VENV")"
# Tests run in parallel: one makes the venv, the others wait for it (flock, util-linux).
exec 9>"$VENV.lock"
flock 9
if [ -x "$VENV/bin/python" ] && check; then
  echo "$VENV"
  exit 0
fi
python3 -m venv --clear "$VENV" >&2
LOG=$VENV/pip.log
if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    'kubernetes-validate>=1.28' 'matplotlib>=3.6' >"$LOG" 2>&1; then
  echo "venv.sh: pip install failed; output of $LOG:" >&2
  cat "$LOG" >&2
  exit 1
fi
check || { echo "venv.sh: $VENV does not import kubernetes_validate and matplotlib" >&2; exit 1; }
echo "$VENV"
