#!/usr/bin/env bash
# Compares two gateway builds in one run, in alternating rounds: on the two paths that do not
# wait for the broker — rejections after sell-out (the sold-out flag) and purchases refused
# by pre_deduct (re-used tokens, DUPLICATE) — and on the winners' path, pre_deduct and the
# transactional send: purchases/s with 64 in flight (sale-sim --tokens-first) and the p50 /
# p99 of purchases sent open loop at RATE/s (sale-sim --rate). A bare actix-web handler runs
# the rejection script too, for the ratio. Usage (the local stack up, nothing else on port
# 8080):
#   deploy/bench/ab-gateway.sh BEFORE_GATEWAY_BINARY AFTER_GATEWAY_BINARY
# The other binaries (consumer, sale-sim, seckill-bench) come from $BIN_DIR (default: the
# release build). ROUNDS (4) rounds of WRK_SECS (8) s each; WINNERS=0 leaves the winners'
# path out. OVERLOAD_RATE=N adds rounds past capacity, as make bench's section 3b without
# the in-flight cap: 6 s open loop at N/s, then the drain, counting the answers and the units
# left reserved with no order (what reconcile would later turn into orders). BEFORE_ENV and
# AFTER_ENV (space-separated NAME=VALUE) give one side settings of its own, so one binary can
# be compared against itself with a setting on and off. KEEP_GOING=1 lets a sale whose
# invariants broke (sale-sim exit 1) count anyway, its violations printed at the end: for a
# build older than the order lifecycle, which cannot read the order statuses the current
# consumer writes, so that sale-sim's sampled orders stay "queued" to it. Prints each
# figure per round.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
before="${1:?the gateway binary before the change}"
after="${2:?the gateway binary after the change}"
bin_dir="${BIN_DIR:-${CARGO_TARGET_DIR:-${HOME}/.cache/seckill/target}/release}"
rounds="${ROUNDS:-4}"
wrk_secs="${WRK_SECS:-8}"
winners="${WINNERS:-1}"
rate="${RATE:-2600}"
overload_rate="${OVERLOAD_RATE:-0}"
work="$(mktemp -d)"
gateway="http://127.0.0.1:8080"
bare="127.0.0.1:18090"

"${repo}/deploy/local/ensure-tools.sh" wrk curl python3 >&2

export SECKILL_CONFIG_DIR="${repo}/config" SECKILL_ENV="${SECKILL_ENV:-local}" RUST_LOG=warn
# As in make bench: wrk re-uses 1,000 buyers at tens of thousands of requests/s.
export SECKILL_RATE_LIMIT__USER_PER_SEC=1000000 SECKILL_RATE_LIMIT__USER_BURST=1000000 \
  SECKILL_RATE_LIMIT__GLOBAL_PER_SEC=10000000

pids=()
gateway_pid=""
cleanup() {
  [[ -n $gateway_pid ]] && kill "$gateway_pid" 2>/dev/null
  ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The side that goes first changes every round, so that a machine busier for whichever runs
# second weighs on both sides (with a fixed order it once took a quarter off the second
# side's figures, on a path neither build had changed: BENCHMARKS.md's analysis).
sides() { # sides ROUND
  if (($1 % 2)); then echo before after; else echo after before; fi
}
binary_of() { # binary_of SIDE: the gateway binary of the side `before` or `after`
  if [[ $1 == after ]]; then echo "$after"; else echo "$before"; fi
}
env_of() { # env_of SIDE: the side's own settings, NAME=VALUE words
  if [[ $1 == after ]]; then echo "${AFTER_ENV:-}"; else echo "${BEFORE_ENV:-}"; fi
}

start_gateway() { # start_gateway BINARY [NAME=VALUE...]
  env "${@:2}" "$1" >>"${work}/gateway.log" 2>&1 &
  gateway_pid=$!
  for _ in $(seq 1 100); do
    curl -fs "${gateway}/readyz" >/dev/null && return
    sleep 0.1
  done
  echo "ab-gateway: $1 did not become ready (log: ${work}/gateway.log)" >&2
  exit 1
}
stop_gateway() {
  kill "$gateway_pid"
  wait "$gateway_pid" || true
  gateway_pid=""
}
wrk_rate() { # wrk_rate TOKENS PRODUCT URL: requests/s of one wrk pass with the purchase script
  BENCH_TOKENS="$1" BENCH_PRODUCT="$2" wrk -t2 -c64 -d"${wrk_secs}s" -s "${here}/purchase.lua" "$3" |
    awk '/Requests\/sec/ { print $2 }'
}

# sale OUT ARGS...: a sale of a fresh product (stock that never runs out), its JSON report to OUT.
sale() {
  local out="$1" status=0
  shift
  "${bin_dir}/sale-sim" --gateway "$gateway" --json --no-progress --stock 100000000 "$@" >"$out" || status=$?
  ((status == 0)) && return 0
  local violations
  violations="$(python3 -c 'import json, sys
print(json.load(open(sys.argv[1])).get("violations"))' "$out" 2>&1)"
  if ((status == 1)) && [[ ${KEEP_GOING:-0} == 1 ]]; then
    echo "${side:-?}: sale-sim $*: ${violations}" >>"${work}/violations.txt"
    return 0
  fi
  echo "ab-gateway: sale-sim $* failed: ${violations}" >&2
  exit 1
}
field() { # field JSON KEY [KEY]: one figure of a sale-sim report, rounded
  python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v = v[k]
print(round(v, 1))' "$@"
}

# The services migrate the schema but do not create the database (a bench run may have just
# dropped it).
BIN_DIR="$bin_dir" "${repo}/deploy/local/services.sh" migrate >"${work}/migrate.log" 2>&1 || {
  echo "ab-gateway: the migration failed:" >&2
  cat "${work}/migrate.log" >&2
  exit 1
}
"${bin_dir}/order-consumer-svc" >"${work}/consumer.log" 2>&1 &
pids+=($!)
stamp="$(date +%s)"
sold_out=$((stamp * 10 + 1))
duplicate=$((stamp * 10 + 2))
start_gateway "$after"
"${bin_dir}/sale-sim" --gateway "$gateway" --no-progress --buyers 2 --stock 1 --product "$sold_out" >/dev/null || true
"${bin_dir}/sale-sim" --gateway "$gateway" --no-progress --buyers 1 --stock 100000000 --product "$duplicate" >/dev/null || true
"${bin_dir}/seckill-bench" sign-tokens --product "$sold_out" --users 1000 --first-user 1 --out "${work}/sold-out.txt"
"${bin_dir}/seckill-bench" sign-tokens --product "$duplicate" --users 1000 --first-user 1001 --out "${work}/duplicate.txt"
# First use of each token: the winners (sent to the broker); afterwards every use is DUPLICATE.
wrk_rate "${work}/duplicate.txt" "$duplicate" "$gateway" >/dev/null
stop_gateway
"${bin_dir}/seckill-bench" bare-http --listen "$bare" >/dev/null 2>&1 &
pids+=($!)
sleep 1

declare -A figures
for round in $(seq 1 "$rounds"); do
  for side in $(sides "$round"); do
    binary="$(binary_of "$side")"
    # shellcheck disable=SC2046 # env_of's words are NAME=VALUE settings, split on purpose
    start_gateway "$binary" $(env_of "$side")
    # One refusal from Redis raises this gateway's sold-out flag.
    read -r user token <"${work}/sold-out.txt"
    curl -s -o /dev/null -X POST "${gateway}/api/v1/products/${sold_out}/purchase" \
      -H 'Content-Type: application/json' -H "X-User-Id: ${user}" \
      -d "{\"token\":\"${token}\",\"quantity\":1}"
    figures[reject-$side]+="$(wrk_rate "${work}/sold-out.txt" "$sold_out" "$gateway") "
    figures[duplicate-$side]+="$(wrk_rate "${work}/duplicate.txt" "$duplicate" "$gateway") "
    stop_gateway
  done
  figures[reject-bare]+="$(wrk_rate "${work}/sold-out.txt" "$sold_out" "http://${bare}") "
  echo "ab-gateway: round ${round}/${rounds} done" >&2
done

# The winners in rounds of their own: the orders they leave the consumer and the broker to
# write must not fall into a refusal pass of the other side.
for round in $(seq 1 "$((winners ? rounds : 0))"); do
  for side in $(sides "$round"); do
    binary="$(binary_of "$side")"
    # shellcheck disable=SC2046 # env_of's words are NAME=VALUE settings, split on purpose
    start_gateway "$binary" $(env_of "$side")
    sale "${work}/warm.json" --buyers 3000 --concurrency 64 --tokens-first
    sale "${work}/closed.json" --buyers 16000 --concurrency 64 --tokens-first
    figures[purchases-$side]+="$(field "${work}/closed.json" purchases_per_sec) "
    sale "${work}/open.json" --buyers "$((rate * 10))" --concurrency 64 --rate "$rate"
    figures[p50-$side]+="$(field "${work}/open.json" purchase_latency_ms p50) "
    figures[p99-$side]+="$(field "${work}/open.json" purchase_latency_ms p99) "
    stop_gateway
  done
  echo "ab-gateway: winners' round ${round}/${rounds} done" >&2
done

# Past capacity, without the in-flight cap: sale-sim reports the violations such a round
# makes (buyers not answered), so its exit status is not the verdict here.
# The product's flows and orders are read again SETTLE_SECS (15) after sale-sim's report:
# purchases whose buyer it gave up on may still be on their way to an order then.
overload() { # overload OUT: one round against the running gateway; OUT.state: the product later
  "${bin_dir}/sale-sim" --gateway "$gateway" --json --no-progress --stock 100000000 \
    --buyers "$((overload_rate * 6))" --concurrency 64 --rate "$overload_rate" \
    --drain-timeout-secs 120 >"$1" || true
  sleep "${SETTLE_SECS:-15}"
  curl -fsS -H "Authorization: Bearer ${SECKILL_ADMIN__TOKEN:-dev-admin-token}" \
    "${gateway}/admin/v1/products/$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["product_id"])' "$1")" \
    >"$1.state"
}
overloaded=(accepted unavailable unanswered reserved_without_order orders_beyond_accepted)
for round in $(seq 1 "$((overload_rate > 0 ? rounds : 0))"); do
  for side in $(sides "$round"); do
    binary="$(binary_of "$side")"
    # shellcheck disable=SC2046 # as above
    start_gateway "$binary" SECKILL_RATE_LIMIT__PURCHASES_IN_FLIGHT=100000000 $(env_of "$side")
    overload "${work}/overload.json"
    read -r -a counts < <(python3 -c 'import json, sys
x, later = json.load(open(sys.argv[1])), json.load(open(sys.argv[1] + ".state"))
o = x["outcomes"]
print(x["accepted"], o.get("UNAVAILABLE", 0), o.get("NO_RESPONSE", 0) + o.get("TIMEOUT", 0),
      later["flows"] - later["orders"], later["orders"] - x["accepted"])' "${work}/overload.json")
    for i in "${!overloaded[@]}"; do
      figures[${overloaded[i]}-$side]+="${counts[i]} "
    done
    stop_gateway
  done
  echo "ab-gateway: past-capacity round ${round}/${rounds} done" >&2
done

names=(reject-before reject-after reject-bare duplicate-before duplicate-after)
((winners)) && names+=(purchases-before purchases-after p50-before p50-after p99-before p99-after)
if ((overload_rate > 0)); then
  for name in "${overloaded[@]}"; do
    names+=("${name}-before" "${name}-after")
  done
fi
for name in "${names[@]}"; do
  echo "${name}: ${figures[$name]}"
done
if [[ -s ${work}/violations.txt ]]; then
  echo "violations (KEEP_GOING=1):"
  sort "${work}/violations.txt" | uniq -c
fi
