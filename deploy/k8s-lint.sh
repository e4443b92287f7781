#!/usr/bin/env bash
# `make k8s-lint` (part of `make lint`): every overlay under k8s/overlays rendered with
# `kubectl kustomize`, validated offline against the Kubernetes schemas with
# `kubernetes-validate --strict` (unknown fields are errors), then scanned with checkov, as
# is deploy/Dockerfile. A checkov finding fails the run unless the resource skips that check
# with a written reason (a `checkov.io/skipN: CHECK=reason` annotation, or a
# `# checkov:skip=CHECK:reason` comment in the Dockerfile); the skips are printed with their
# reasons. deploy/k8s-exposure.py holds the services' ops ports to their audience. The
# tools come pinned from deploy/k8s-tools.sh.
#
# Environment: SECKILL_K8S_VERSION (schemas to validate against, default 1.35.0: the kind
# node of deploy/kind/cluster.yaml), SECKILL_K8S_RENDER_DIR (where the rendered overlays
# are written, default a temporary folder that is removed afterwards).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/.." && pwd)"
k8s_version="${SECKILL_K8S_VERSION:-1.35.0}"
# Custom resources that have no schema in kubernetes-validate; anything else without a
# schema (a misspelt apiVersion or kind) is an error.
known_crds=(
  'keda.sh/v1alpha1 ScaledObject'
  'monitoring.coreos.com/v1 ServiceMonitor'
  'monitoring.coreos.com/v1 PrometheusRule'
)

log() { printf 'k8s-lint: %s\n' "$*"; }
die() {
  printf 'k8s-lint: error: %s\n' "$*" >&2
  exit 1
}

bin="$("${here}/k8s-tools.sh")"
for tool in kubectl kubernetes-validate checkov; do
  [[ -x "${bin}/${tool}" ]] || die "${tool} missing from ${bin} (deploy/k8s-tools.sh did not install it)"
done

if [[ -n ${SECKILL_K8S_RENDER_DIR:-} ]]; then
  out="$SECKILL_K8S_RENDER_DIR"
  mkdir -p "$out"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi

cd "$repo"
failed=0

# --- render -------------------------------------------------------------------------
overlays=()
for dir in k8s/overlays/*/; do
  name="$(basename "$dir")"
  if ! "${bin}/kubectl" kustomize "$dir" >"${out}/${name}.yaml"; then
    log "FAIL render k8s/overlays/${name}"
    failed=1
    continue
  fi
  overlays+=("$name")
  log "rendered k8s/overlays/${name}: $(grep -c '^kind:' "${out}/${name}.yaml") objects"
done
((${#overlays[@]} > 0)) || die "no overlay rendered"

# --- validate -----------------------------------------------------------------------
validate() {
  local file="$1" label="$2" report
  report="$("${bin}/kubernetes-validate" --strict --kubernetes-version "$k8s_version" "$file" 2>&1)" || {
    printf '%s\n' "$report" | grep -v '^INFO ' >&2
    log "FAIL validate ${label}"
    return 1
  }
  local unknown
  unknown="$(printf '%s\n' "$report" | grep "Couldn't find schema" || true)"
  local line crd allowed
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    allowed=0
    for crd in "${known_crds[@]}"; do
      [[ $line == *"kind ${crd#* } with api version ${crd%% *} "* ]] && allowed=1
    done
    if ((allowed)); then
      log "note ${label}: ${line#* * } (custom resource, no schema offline)"
    else
      printf '%s\n' "$line" >&2
      log "FAIL validate ${label}: an object with no schema (misspelt apiVersion or kind?)"
      return 1
    fi
  done <<<"$unknown"
  log "valid ${label}: $(printf '%s\n' "$report" | grep -c '^INFO .* passed') objects against Kubernetes ${k8s_version} (strict)"
}

for name in "${overlays[@]}"; do
  validate "${out}/${name}.yaml" "k8s/overlays/${name}" || failed=1
done
validate k8s/base/secret.template.yaml k8s/base/secret.template.yaml || failed=1

# --- the services' exposure ------------------------------------------------------------
for name in "${overlays[@]}"; do
  "${bin}/python3" "${here}/k8s-exposure.py" "${out}/${name}.yaml" "k8s/overlays/${name}" || failed=1
done

# --- scan ---------------------------------------------------------------------------
# Prints the summary and every failed or skipped check (with its reason), not the passes.
# --skip-download: no call to the vendor's platform; the checks ship in the package.
scan() {
  local label="$1"
  shift
  local report status=0
  log "checkov ${label}"
  report="$("${bin}/checkov" --compact --skip-download "$@" 2>&1)" || status=$?
  printf '%s\n' "$report" | awk '
    function flush() {
      if (state == "FAILED") print "FAILED " block
      else if (state == "SKIPPED") printf "skipped %s on %s: %s\n", id, resource, reason
      state = ""; block = ""
    }
    /^Check: / { flush(); block = $0; id = $2; sub(/:$/, "", id); next }
    /^\t(FAILED|SKIPPED) for resource: / {
      state = $1; sub(/^\t/, "", state); resource = $0; sub(/^.*for resource: /, "", resource); sub(/\.$/, "", resource)
    }
    /^\tSuppress comment: / { reason = $0; sub(/^\tSuppress comment: /, "", reason) }
    /^\t/ { if (block != "") block = block "\n" $0; next }
    { flush() }
    /^Passed checks: / { print }
    END { flush() }
  ' | sed 's/^/  /'
  if ((status != 0)); then
    log "FAIL checkov ${label}"
    return 1
  fi
  log "clean ${label}"
}

for name in "${overlays[@]}"; do
  scan "k8s/overlays/${name}" --framework kubernetes --file "${out}/${name}.yaml" || failed=1
done
scan deploy/Dockerfile --framework dockerfile --file deploy/Dockerfile || failed=1

if ((failed)); then
  log "FAILED"
  exit 1
fi
log "all overlays render, validate and scan clean"
