#!/usr/bin/env bash
# Validates the Kubernetes manifests of DIR (default: this directory) offline against the
# Kubernetes API schemas with `kubernetes-validate --strict` (from deploy/venv.sh): every
# manifest file (kustomizations, components' patches and CRD-based objects excepted: no schema),
# and, when `kubectl` is on PATH, the kustomize renderings of the base and of the base with each
# component. Exit 0 when all validate, 1 otherwise (kubernetes-validate's errors printed).
#   env: OSPREY_VENV (see deploy/venv.sh); K8S_VERSION (default: the tool's newest)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(cd "${1:-$HERE}" && pwd)
VENV=$(bash "$HERE/../venv.sh" | tail -n 1)
KV=("$VENV/bin/kubernetes-validate" --strict --quiet)
[ -n "${K8S_VERSION:-}" ] && KV+=(-k "$K8S_VERSION")

# Patches are partial objects; the PodMonitor is a Prometheus Operator CRD (no bundled schema).
files=()
while IFS= read -r f; do
  case $(basename "$f") in
    kustomization.yaml|servers-store.yaml|podmonitor.yaml) continue ;;
  esac
  files+=("$f")
done < <(find "$DIR" -name '*.yaml' | sort)
[ ${#files[@]} -gt 0 ] || { echo "validate.sh: no manifests in $DIR" >&2; exit 1; }
echo "validate.sh: ${#files[@]} manifest files in $DIR"
rc=0
"${KV[@]}" "${files[@]}" || rc=1

if command -v kubectl >/dev/null; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for comp in "" $(ls "$DIR/components"); do
    mkdir -p "$tmp/o-$comp"
    { echo "apiVersion: kustomize.config.k8s.io/v1beta1"; echo "kind: Kustomization"
      rel=$(realpath --relative-to="$tmp/o-$comp" "$DIR")
      echo "resources: [$rel]"
      [ -n "$comp" ] && echo "components: [$rel/components/$comp]"; } >"$tmp/o-$comp/kustomization.yaml"
    if ! kubectl kustomize "$tmp/o-$comp" >"$tmp/render-$comp.yaml"; then
      echo "validate.sh: kustomize build failed (component '${comp:-none}')" >&2; rc=1; continue
    fi
    # kubernetes-validate reads one object per document; the PodMonitor has no schema.
    "${KV[@]}" --no-warn "$tmp/render-$comp.yaml" || rc=1
    echo "validate.sh: kustomize rendering (component '${comp:-none}') checked"
  done
else
  echo "validate.sh: kubectl not on PATH: kustomize renderings not checked (files only)"
fi
[ "$rc" -eq 0 ] && echo "validate.sh: OK"
exit "$rc"
