#!/usr/bin/env bash
# `make demo` after the stack is up and the release binaries are built: start the
# services, run a simulated sale, print the reconcile report, and stop the services
# again whatever happens.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
bin_dir="${BIN_DIR:-${CARGO_TARGET_DIR:-${cache}/target}/release}"
# Local mode, for reconcile-svc below as for the services (see services.sh).
export SECKILL_ENV="${SECKILL_ENV:-local}"
# A payment window of seconds, not the production 15 minutes, so that the abandoned
# orders expire and their units sell again within the demo.
export SECKILL_ORDERS__PAYMENT_WINDOW_SECS="${SECKILL_ORDERS__PAYMENT_WINDOW_SECS:-20}"

trap '"${here}/services.sh" stop' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"${here}/services.sh" start

echo
echo "== where to look =="
echo "metrics:   http://${SECKILL_GATEWAY__LISTEN:-127.0.0.1:8080}/metrics · http://${SECKILL_CONSUMER__LISTEN:-127.0.0.1:8081}/metrics · http://${SECKILL_RECONCILE__LISTEN:-127.0.0.1:8082}/metrics"
echo "traces:    ${OTEL_EXPORTER_OTLP_ENDPOINT:-not exported (set OTEL_EXPORTER_OTLP_ENDPOINT=http://<collector>:4318)}"
echo "dashboard: deploy/grafana/seckill-sale.json · alerts: deploy/prometheus/alerts.yml"

cd "$repo"
echo
echo "== simulated sale: 5000 buyers, 500 units; then winners pay, cancel or walk away (window ${SECKILL_ORDERS__PAYMENT_WINDOW_SECS} s), and a second wave buys what came back =="
sale=0
"${bin_dir}/sale-sim" --buyers 5000 --stock 500 --after-sale || sale=$?
if ((sale != 0)); then
  echo "demo: sale-sim exited with status ${sale}" >&2
fi

echo
echo "== reconcile report =="
reconcile=0
"${bin_dir}/reconcile-svc" --once || reconcile=$?
if ((reconcile == 0)); then
  echo "demo: reconcile-svc --once exited with status 0: nothing left unresolved"
else
  echo "demo: reconcile-svc --once exited with status ${reconcile}: something is left unresolved (see the report)"
fi
echo
exit "$sale"
