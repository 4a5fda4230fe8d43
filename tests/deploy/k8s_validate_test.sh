#!/usr/bin/env bash
# deploy/k8s validates (kubernetes-validate --strict, and kustomize renderings where kubectl
# exists), and a deliberately broken copy does not: an unknown field and a wrong type, each in its
# own copy, each refused with the file named.
# The ConfigMap's job config is a valid job: `osprey launch` runs it here for 50 steps (the
# coordinator, host and keys overridden for loopback).
#   usage: k8s_validate_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
SRC=$1
BIN=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "k8s_validate_test: FAILED: $*" >&2; exit 1; }

bash "$SRC/deploy/k8s/validate.sh" "$SRC/deploy/k8s" || fail "the manifests do not validate"

# An unknown field (a typo'd key), which only --strict catches.
cp -r "$SRC/deploy/k8s" "$tmp/typo"
sed -i 's/^  podManagementPolicy: Parallel/  podManagmentPolicy: Parallel/' "$tmp/typo/servers.yaml"
grep -q podManagmentPolicy "$tmp/typo/servers.yaml" || fail "could not plant the typo"
if bash "$SRC/deploy/k8s/validate.sh" "$tmp/typo" >"$tmp/typo.out" 2>&1; then
  cat "$tmp/typo.out"; fail "a manifest with an unknown field validated"
fi
grep -q "servers.yaml" "$tmp/typo.out" || { cat "$tmp/typo.out"; fail "the error does not name servers.yaml"; }

# A wrong type.
cp -r "$SRC/deploy/k8s" "$tmp/type"
sed -i 's/^  completions: 2 /  completions: two /' "$tmp/type/workers.yaml"
grep -q "completions: two" "$tmp/type/workers.yaml" || fail "could not plant the wrong type"
if bash "$SRC/deploy/k8s/validate.sh" "$tmp/type" >"$tmp/type.out" 2>&1; then
  cat "$tmp/type.out"; fail "a manifest with a string for an integer validated"
fi
grep -q "workers.yaml" "$tmp/type.out" || { cat "$tmp/type.out"; fail "the error does not name workers.yaml"; }
VENV=$(bash "$SRC/deploy/venv.sh" | tail -n 1)
"$VENV/bin/python" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["job.yaml"])' \
  "$SRC/deploy/k8s/configmap.yaml" >"$tmp/job.yaml" || fail "cannot read job.yaml from the ConfigMap"
# startup_timeout_ms: the pods' 10 minutes would outlast the launcher's stall timeout, so a node
# that cannot register would never say why; here it fails within a minute, naming its error.
if ! "$BIN/osprey" launch "$tmp/job.yaml" --quiet --log-dir "$tmp/job" \
  --set cluster.coordinator=tcp://127.0.0.1:0 --set cluster.host=127.0.0.1 --set cluster.startup_timeout_ms=60000 \
  --set security.keys_dir= --set train.steps=50 --set train.eval_samples=2000 >"$tmp/launch.out" 2>&1; then
  tail -n 30 "$tmp/launch.out"
  for log in "$tmp"/job/*.log; do echo "---- $log"; tail -n 15 "$log"; done
  fail "the ConfigMap's job config does not run"
fi
grep -q "held-out AUC" "$tmp/launch.out" || fail "the ConfigMap's job printed no report"

# components/redis: the servers' flags are a valid redis store config for the ConfigMap's job (an
# unknown key would stop every server pod at start). redis-inspect loads the job with them and
# fails only at connecting, naming the endpoint (the pod's DNS name does not resolve here).
args=$(sed -nE 's/^ *value: "(--set store\..*)"$/\1/p' "$SRC/deploy/k8s/components/redis/servers-store.yaml")
[ -n "$args" ] || fail "no OSPREY_SERVER_ARGS in components/redis/servers-store.yaml"
# shellcheck disable=SC2086  # the flags are words
if "$BIN/osprey" redis-inspect --config "$tmp/job.yaml" $args >"$tmp/inspect.out" 2>&1; then
  fail "redis-inspect reached a Redis at the pod's name"
fi
if grep -q "unknown key" "$tmp/inspect.out"; then
  cat "$tmp/inspect.out"; fail "components/redis passes flags the redis store config refuses"
fi
grep -q "osprey-redis-0.osprey-redis:6379" "$tmp/inspect.out" ||
  { cat "$tmp/inspect.out"; fail "redis-inspect did not try the component's endpoint"; }
echo "k8s_validate_test: OK (manifests validate; both broken copies refused; the ConfigMap's job runs; components/redis's flags load)"
