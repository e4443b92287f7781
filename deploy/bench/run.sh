#!/usr/bin/env bash
# `make bench`: measures each stage of a purchase against its ceiling, in one run, and writes
# BENCHMARKS.md (deploy/bench/report.py). Each pair is measured in alternating rounds
# (ROUNDS, default 3) and reported as medians:
#   1. a sale through the three release services (sale-sim, BUYERS buyers on STOCK units);
#   2. pre_deduct.lua under redis-benchmark (EVALSHA, 50 clients, unpipelined) against the
#      gateway's purchases/s before sell-out (sale-sim, tokens first, stock that never runs
#      out), and the gateway's purchases that stop at pre_deduct (re-used tokens, wrk);
#   3. the gateway's rejections after sell-out against a bare actix-web handler, both under
#      wrk with the same script (deploy/bench/purchase.lua) and the same connections, in
#      REJECT_ROUNDS rounds (default 5: a pass is 10 s, and a few more of them steady a
#      ratio of two fast paths), the side that goes first alternating;
#   4. p99 purchase latency, open loop at half the measured purchase rate;
#   5. units/s of a 10,000-unit sale, first request to the last order in MySQL;
#   6. the gateway's RSS with 1,000 keep-alive connections open (fresh, and after the load),
#      and with EVENT_STREAMS (5,000) order-event streams open: RSS, how fast a cancel
#      reaches them, and how fast the returned units sell again after a sell-out;
#      then past capacity: an open loop at 2.5 times the half rate, the in-flight cap on/off,
#      and the product read again OVERLOAD_SETTLE_SECS (15) later for units left reserved;
#   7. transactional against plain sends of one OrderPublisher, at 8/32/64 in flight, a
#      pool of publishers, and transactional messages of 16 orders (the gateway's batching);
#   8. order-consumer-svc draining DRAIN_ORDERS queued orders into MySQL, against
#      Db::write_orders in batches of consumer.batch_size from consumer.concurrency tasks,
#      and against one transaction per order;
#   9. reconcile-svc --once over a consistent sale of FLOWS units (deploy/bench/reconcile.sh);
#   9b. the cost of redis.wait_replicas: one gateway with WAIT off against on, a replica
#      following the stack's Redis (deploy/bench/wait-cost.sh);
#   9c. CPU per sold unit, process by process, against each part's floor, and the latency
#      curve (deploy/bench/cost.sh);
#  10. with PROFILE=1 (default) and a working perf: flame graphs of the gateway (purchases,
#      rejections) and of the consumer (drain) into docs/bench/.
# Needs the local stack up and the release binaries built (the make target does both). The
# services are started here, with the per-buyer rate limit raised (wrk reuses 1,000 buyers
# at tens of thousands of requests/s); the bench refuses to run while they are already up.
# Everything it writes to the shared servers has a name of its own: databases
# seckill_bench*, Redis prefixes bench-*, topics and groups seckill-bench-*. The services'
# sales (sections 1-3, 7, 8) use the database seckill_bench_sales and the prefix
# bench-sales, emptied before the run and after it: a run leaves neither flows nor orders
# behind.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=deploy/bench/lib.sh
source "${here}/lib.sh"
rounds="${ROUNDS:-3}"
reject_rounds="${REJECT_ROUNDS:-5}"
buyers="${BUYERS:-20000}"
stock="${STOCK:-1000}"
flows="${FLOWS:-1000000}"
drain_orders="${DRAIN_ORDERS:-100000}"
single_orders="${SINGLE_ORDERS:-5000}"
# A second drain alongside the first: the same orders queued the way the gateway sends a
# crowd's winners, several to a transactional message.
gateway_per_message="${GATEWAY_PER_MESSAGE:-16}"
# About 5 s of purchases a round: rounds of 8,000 (under 2 s) spread from 3,000 to 4,700/s.
purchase_buyers="${PURCHASE_BUYERS:-24000}"
lua_requests="${LUA_REQUESTS:-300000}"
# Under the gateway's default orders.max_watchers (10,000).
event_streams="${EVENT_STREAMS:-5000}"
profile="${PROFILE:-1}"
out="${BENCH_OUT:-${repo}/BENCHMARKS.md}"
svg_dir="${BENCH_SVG_DIR:-${repo}/docs/bench}"
cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
inferno="${cache}/tools/inferno/bin"
bare_listen="127.0.0.1:18090"

bare_pid=""
cleanup() {
  [[ -n $bare_pid ]] && kill "$bare_pid" 2>/dev/null
  "$services" stop >/dev/null 2>&1 || true
  forget_sales 2>/dev/null || true
  [[ -n ${BENCH_WORK:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
cut -d' ' -f1-3 /proc/loadavg >"${work}/loadavg-start"
# How idle the machine is just before the run (others' builds and tests make noise).
python3 - >"${work}/idle-start" <<'PY'
import time
def ticks():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return v[3] + v[4], sum(v)
(i0, t0), _ = ticks(), time.sleep(2)
i1, t1 = ticks()
print(f"{100 * (i1 - i0) / max(t1 - t0, 1):.0f}")
PY

"${repo}/deploy/local/ensure-tools.sh" wrk redis-benchmark:redis-tools redis-cli:redis-tools \
  mysql:mariadb-client curl python3 perf:linux-perf /usr/bin/time:time
for b in seckill-bench sale-sim gateway-svc order-consumer-svc reconcile-svc seckill-migrate; do
  [[ -x ${bin_dir}/${b} ]] || die "${bin_dir}/${b} is missing: build first (make build)"
done
if "$services" status 2>/dev/null | grep -q ' running '; then
  die "services from ${run_dir} are running: the bench starts them with its own settings (make stop first)"
fi
# 1,000 connections held open, plus the load tools' own.
ulimit -n "$(ulimit -Hn)"

# The consumer's batch size and concurrency, as the services read them.
read -r batch_size consumer_concurrency < <(python3 - "${repo}/config/default.toml" <<'PY'
import os, sys, tomllib
consumer = tomllib.load(open(sys.argv[1], "rb"))["consumer"]
print(os.environ.get("SECKILL_CONSUMER__BATCH_SIZE", consumer["batch_size"]),
      os.environ.get("SECKILL_CONSUMER__CONCURRENCY", consumer["concurrency"]))
PY
)

perf_ok=0
if [[ $profile == 1 ]]; then
  if perf record -e cpu-clock -o "${work}/probe.data" -- true >/dev/null 2>&1; then
    perf_ok=1
    if [[ ! -x ${inferno}/inferno-flamegraph ]]; then
      log "installing inferno (flame graphs) into ${inferno%/bin}"
      cargo install inferno --locked --root "${inferno%/bin}" >&2
    fi
    mkdir -p "$svg_dir"
  else
    log "perf cannot record here: no profiles (see BENCHMARKS.md)"
  fi
fi
echo "$perf_ok" >"${work}/perf_ok"

# profile NAME PID SECONDS TITLE: samples PID's stacks for SECONDS (0: until it exits; DWARF
# unwinding, as the release build keeps line tables but no frame pointers) and writes
# docs/bench/NAME.svg and the folded stacks report.py summarises.
profile() {
  local name="$1" pid="$2" secs="$3" title="$4" data="${work}/$1.perf" until=()
  ((secs > 0)) && until=(-- sleep "$secs")
  timeout -s INT 600 perf record -F 499 --call-graph dwarf,16384 -p "$pid" -o "$data" \
    "${until[@]}" >/dev/null 2>"${work}/$1.perf.log" || {
    log "perf record of ${name} failed: $(tail -n 2 "${work}/$1.perf.log")"
    return 0
  }
  perf script -i "$data" 2>/dev/null | "${inferno}/inferno-collapse-perf" >"${work}/${name}.folded"
  rm -f "$data"
  if [[ ! -s ${work}/${name}.folded ]]; then
    log "perf recorded no stacks of ${name}"
    rm -f "${work}/${name}.folded"
    return 0
  fi
  # Frames narrower than a pixel are left out: the SVG stays a few hundred KiB.
  "${inferno}/inferno-flamegraph" --title "$title" --width 1600 --minwidth 1 \
    <"${work}/${name}.folded" >"${svg_dir}/${name}.svg" || log "no flame graph of ${name}"
}

# ---------------------------------------------------------------- the gateway's stages
forget_sales # an interrupted run's
start_services

log "gateway RSS with 1000 connections (fresh)"
"$bench" conns --addr 127.0.0.1:8080 --count 1000 --pid "$(gateway_pid)" >"${work}/conns-fresh.json"

log "gateway with ${event_streams} order-event streams open (100 orders), then every order cancelled"
"$bench" streams --addr 127.0.0.1:8080 --pid "$(gateway_pid)" --product "$(product_of 990)" \
  --orders 100 --count "$event_streams" >"${work}/streams.json"

for round in $(seq 1 "$rounds"); do
  log "sale round ${round}/${rounds} (${buyers} buyers, ${stock} units)"
  sale "${work}/sale-${round}.json" --buyers "$buyers" --stock "$stock" \
    --product "$(product_of "1${round}")" --concurrency 200
done

curl -fsS "${gateway}/metrics" >"${work}/purchase-metrics-before.txt"
lua_sha="$(redis-cli -p "$redis_port" SCRIPT LOAD "$(<"${repo}/lua/pre_deduct.lua")")"
for round in $(seq 1 "$rounds"); do
  log "pre-deduct round ${round}/${rounds}: redis-benchmark EVALSHA pre_deduct.lua"
  product="$(product_of "6${round}")"
  read -r -a keys < <(SECKILL_CONFIG_DIR="${repo}/config" "$bench" load-product \
    --prefix bench-lua --product "$product" --stock 1000000000 --per-user-limit 1000000)
  redis-benchmark -p "$redis_port" -c 50 -n "$lua_requests" -r 1000000000 --csv \
    EVALSHA "$lua_sha" 5 "${keys[@]}" "bench-__rand_int__" "__rand_int__" 1 \
    >"${work}/lua-${round}.csv"
  left="$(redis-cli -p "$redis_port" GET "${keys[1]}")"
  echo "$((1000000000 - left))" >"${work}/lua-${round}.reserved"
  redis-cli -p "$redis_port" UNLINK "${keys[@]}" >/dev/null

  log "pre-deduct round ${round}/${rounds}: gateway purchases before sell-out"
  sale "${work}/purchase-${round}.json" --buyers "$purchase_buyers" --stock 10000000 \
    --product "$(product_of "2${round}")" --concurrency 64 --tokens-first
done

curl -fsS "${gateway}/metrics" >"${work}/purchase-metrics-after.txt"

log "purchases that stop at pre_deduct: re-used tokens (DUPLICATE), wrk"
dup_product="$(product_of 50)"
duplicate_tokens "$dup_product" "${work}/dup-tokens.txt"
probe "${work}/dup-probe.json" "${work}/dup-tokens.txt" "$dup_product"

log "rejections after sell-out: the gateway against a bare actix-web handler (wrk)"
so_product="$(product_of 51)"
sale "${work}/soldout-setup.json" --buyers 2 --stock 1 --product "$so_product"
sign_tokens "$so_product" 1 "${work}/so-tokens.txt"
probe "${work}/so-probe.json" "${work}/so-tokens.txt" "$so_product"
"$bench" bare-http --listen "$bare_listen" 2>"${work}/bare-http.log" &
bare_pid=$!
for _ in $(seq 1 50); do
  curl -s -o /dev/null -X POST "http://${bare_listen}/api/v1/products/1/purchase" && break
  sleep 0.1
done
sold_out_before="$(metric 'seckill_purchases_total{outcome="sold_out"}')"
limited_before="$(rate_limited)"
mapfile -t gateway_watch < <(watch_args gateway redis)
reject_gateway() {
  wrk_run "${work}/reject-gateway-${1}.txt" "$gateway" "${work}/so-tokens.txt" "$so_product" \
    "${gateway_watch[@]}"
}
reject_bare() {
  wrk_run "${work}/reject-bare-${1}.txt" "http://${bare_listen}" "${work}/so-tokens.txt" \
    "$so_product" --watch "bare-http=${bare_pid}"
}
for round in $(seq 1 "$reject_rounds"); do
  log "rejection round ${round}/${reject_rounds}"
  # Whichever side went first in one round goes second in the next: a machine that grows
  # busier or quieter during a round favours neither.
  if ((round % 2)); then
    reject_gateway "$round"
    reject_bare "$round"
  else
    reject_bare "$round"
    reject_gateway "$round"
  fi
  wrk_run "${work}/dup-${round}.txt" "$gateway" "${work}/dup-tokens.txt" "$dup_product" \
    "${gateway_watch[@]}"
done
echo "$(($(metric 'seckill_purchases_total{outcome="sold_out"}') - sold_out_before))" \
  >"${work}/reject-sold-out-count"
echo "$(($(rate_limited) - limited_before))" \
  >"${work}/reject-rate-limited-count"

half_rate="$(python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rates = [json.load(open(f"{work}/purchase-{r}.json"))["purchases_per_sec"] for r in range(1, rounds + 1)]
print(round(statistics.median(rates) / 2))
PY
)"
curl -fsS "${gateway}/metrics" >"${work}/latency-metrics-before.txt"
for round in $(seq 1 "$rounds"); do
  log "latency round ${round}/${rounds}: open loop at ${half_rate} purchases/s"
  sale "${work}/latency-${round}.json" --buyers "$((half_rate * 10))" --stock 10000000 \
    --product "$(product_of "3${round}")" --concurrency 64 --rate "$half_rate"
done

curl -fsS "${gateway}/metrics" >"${work}/latency-metrics-after.txt"

for round in $(seq 1 "$rounds"); do
  log "10,000-unit sale round ${round}/${rounds}"
  sale "${work}/sale10k-${round}.json" --buyers 20000 --stock 10000 \
    --product "$(product_of "4${round}")" --concurrency 200
done

if ((perf_ok)); then
  log "profile: the gateway selling (purchases before sell-out)"
  # Once the tokens are issued and the purchases have begun; some 14 s of them at the rate
  # measured above, so that the 8 s of sampling fall inside.
  accepted_before="$(metric 'seckill_purchases_total{outcome="accepted"}')"
  {
    for _ in $(seq 1 600); do
      (($(metric 'seckill_purchases_total{outcome="accepted"}') > accepted_before)) && break
      sleep 0.1
    done
    profile gateway-purchase "$(gateway_pid)" 8 "gateway-svc: purchases before sell-out (sale-sim --tokens-first, 64 in flight)"
  } &
  perf_job=$!
  sale "${work}/profile-purchase.json" --buyers "$((half_rate * 2 * 14))" --stock 10000000 \
    --product "$(product_of 52)" --concurrency 64 --tokens-first
  wait "$perf_job" || true
  log "profile: the gateway rejecting (sold out)"
  profile gateway-reject "$(gateway_pid)" 8 "gateway-svc: rejections after sell-out (wrk, ${wrk_conns} connections)" &
  perf_job=$!
  wrk_run "${work}/profile-reject.txt" "$gateway" "${work}/so-tokens.txt" "$so_product"
  wait "$perf_job" || true
fi

log "gateway RSS with 1000 connections (after the load)"
"$bench" conns --addr 127.0.0.1:8080 --count 1000 --pid "$(gateway_pid)" >"${work}/conns-loaded.json"

# Past capacity: an open loop at 2.5 times the half rate (above what the crowd reached),
# for 6 s, against a fresh gateway with its in-flight cap (the default) and without one
# (a cap no crowd reaches), alternating. Last of the gateway's stages: what an overload
# leaves in memory is not the RSS measured above.
overload_rate=$((half_rate * 5 / 2))
overload_settle_secs="${OVERLOAD_SETTLE_SECS:-15}"
for round in $(seq 1 "$rounds"); do
  for cap in default none; do
    log "past capacity round ${round}/${rounds}: open loop at ${overload_rate}/s, in-flight cap ${cap}"
    "$services" stop >&2
    # A product of its own for each: the buyers' user ids are the same in both.
    if [[ $cap == none ]]; then
      product="$(product_of "11${round}")"
      start_services SECKILL_RATE_LIMIT__PURCHASES_IN_FLIGHT=100000000
    else
      product="$(product_of "10${round}")"
      start_services
    fi
    sale "${work}/overload-${cap}-${round}.json" --buyers "$((overload_rate * 6))" --stock 100000000 \
      --product "$product" --concurrency 64 --rate "$overload_rate" --drain-timeout-secs 120
    awk '/^VmRSS/ { print $2 }' "/proc/$(gateway_pid)/status" >"${work}/overload-${cap}-${round}.rss-kib"
    # Purchases whose buyer sale-sim gave up on may still be on their way to an order: the
    # product is read again a while later, for the units it then still holds reserved with
    # no order (what reconcile would turn into orders).
    sleep "$overload_settle_secs"
    curl -fsS -H 'Authorization: Bearer dev-admin-token' "${gateway}/admin/v1/products/${product}" \
      >"${work}/overload-${cap}-${round}.later.json"
  done
done

kill "$bare_pid" 2>/dev/null || true
wait "$bare_pid" 2>/dev/null || true
bare_pid=""
"$services" stop >&2
forget_sales

# ---------------------------------------------------------------- waiting for a replica
# ab-gateway.sh starts its own gateway and consumer: on the sales' database and prefix, so
# forget_sales takes their flows and orders away too.
log "redis.wait_replicas off against on, a replica following the stack's Redis (${rounds} rounds)"
SECKILL_MYSQL__URL="${mysql_base}/${sales_database}" SECKILL_REDIS__KEY_PREFIX="$sales_prefix" \
  BIN_DIR="$bin_dir" ROUNDS="$rounds" "${here}/wait-cost.sh" >"${work}/wait-cost.md"
forget_sales

# ---------------------------------------------------------------- CPU per sold unit
# cost.sh starts the services again, on the sales' database and prefix, and stops them; its
# raw outputs go to a folder of their own (its names overlap those above).
log "CPU per sold unit against each part's floor, and the latency curve (${rounds} rounds)"
BENCH_WORK="${work}/cost" COST_SVG="${svg_dir}/latency-curve.svg" ROUNDS="$rounds" \
  "${here}/cost.sh" >"${work}/cost.md"
forget_sales

# ---------------------------------------------------------------- the broker: sends
mapfile -t broker_watch < <(watch_args broker)
log "transactional against plain sends (8/32/64 in flight, one publisher)"
SECKILL_CONFIG_DIR="${repo}/config" RUST_LOG=warn "$bench" sends "${broker_watch[@]}" --rounds "$rounds" \
  --concurrency 8,32,64 --modes tx,plain --group "seckill-bench-sender-${stamp}" \
  >"${work}/sends.jsonl"
for producers in 2 4; do
  log "transactional sends through a pool of ${producers} publishers (64 in flight)"
  SECKILL_CONFIG_DIR="${repo}/config" RUST_LOG=warn "$bench" sends "${broker_watch[@]}" \
    --rounds "$rounds" --concurrency 64 --modes tx --producers "$producers" \
    --group "seckill-bench-pool-${producers}-${stamp}" >"${work}/sends-pool-${producers}.jsonl"
done
log "transactional sends of 16 orders each (8 in flight), as the gateway batches winners"
SECKILL_CONFIG_DIR="${repo}/config" RUST_LOG=warn "$bench" sends "${broker_watch[@]}" \
  --rounds "$rounds" --concurrency 8 --modes tx --orders-per-message 16 \
  --group "seckill-bench-batched-${stamp}" >"${work}/sends-batched.jsonl"

# ---------------------------------------------------------------- the consumer: drain
drain_env() { # drain_env ROUND: the consumer's and the tools' settings for one drain
  export SECKILL_CONFIG_DIR="${repo}/config"
  export SECKILL_MYSQL__URL="${mysql_base}/seckill_bench_drain"
  export SECKILL_REDIS__KEY_PREFIX="bench-drain"
  export SECKILL_ROCKETMQ__TOPIC="seckill-bench-drain-${stamp}-$1"
  export SECKILL_ROCKETMQ__CONSUMER_GROUP="seckill-bench-drain-${stamp}-$1"
  export SECKILL_ROCKETMQ__PRODUCER_GROUP="seckill-bench-drain-pub-${stamp}-$1"
  export SECKILL_CONSUMER__LISTEN="127.0.0.1:18481"
  export RUST_LOG=warn
}

mapfile -t db_watch < <(watch_args mariadb broker redis)

# drain_round NAME ROUND [PROFILE]: queue drain_orders messages, then time the consumer.
drain_round() {
  local name="$1" product pid_file="${work}/$1.pid"
  product="$(product_of "7$2")"
  (
    drain_env "$name"
    "$bench" prepare-product --product "$product" --stock 100000000 --fresh
    "$bench" publish-orders --product "$product" --orders "$drain_orders" \
      --orders-per-message "${PER_MESSAGE:-1}" >"${work}/${name}-publish.json"
    "$bench" drain "${db_watch[@]}" --consumer "${bin_dir}/order-consumer-svc" --product "$product" \
      --orders "$drain_orders" --pid-file "$pid_file" --log "${work}/${name}.log" \
      >"${work}/${name}.json" &
    drain_job=$!
    if [[ ${3:-} == profile ]]; then
      for _ in $(seq 1 100); do [[ -s $pid_file ]] && break; sleep 0.05; done
      # From its start to its exit, once the drain is done: start-up is mostly waiting.
      profile consumer-drain "$(<"$pid_file")" 0 "order-consumer-svc: draining ${drain_orders} queued orders (batch ${batch_size}, ${consumer_concurrency} at once)"
    fi
    wait "$drain_job" || die "the drain ${name} failed (log: $(tail -n 5 "${work}/${name}.log"))"
  )
}

for round in $(seq 1 "$rounds"); do
  log "drain round ${round}/${rounds}: order-consumer-svc, ${drain_orders} queued orders"
  drain_round "drain-${round}" "$round"
  log "drain round ${round}/${rounds}: order-consumer-svc, the orders queued ${gateway_per_message} to a message"
  PER_MESSAGE="$gateway_per_message" drain_round "drain-alt-${round}" "$((round + 3))"
  log "drain round ${round}/${rounds}: Db::write_orders, batches of ${batch_size}, ${consumer_concurrency} tasks"
  (
    drain_env "batched-${round}"
    "$bench" prepare-product --product "$(product_of "8${round}")" --stock 100000000 --fresh
    "$bench" write-orders "${db_watch[@]}" --product "$(product_of "8${round}")" --orders "$drain_orders" --batch "$batch_size" \
      --tasks "$consumer_concurrency" >"${work}/batched-${round}.json"
  )
  log "drain round ${round}/${rounds}: one transaction per order (${single_orders} orders)"
  (
    drain_env "single-${round}"
    "$bench" prepare-product --product "$(product_of "9${round}")" --stock 100000000 --fresh
    "$bench" write-orders "${db_watch[@]}" --product "$(product_of "9${round}")" --orders "$single_orders" --batch 1 \
      --tasks "$consumer_concurrency" >"${work}/single-${round}.json"
  )
done
if ((perf_ok)); then
  log "profile: the consumer draining"
  drain_round drain-profile 9 profile
fi

# ---------------------------------------------------------------- reconcile
log "reconcile audit of ${flows} flows"
BIN_DIR="$bin_dir" FLOWS="$flows" "${here}/reconcile.sh" >"${work}/reconcile.txt"

cut -d' ' -f1-3 /proc/loadavg >"${work}/loadavg-end"
cat >"${work}/params.json" <<JSON
{"rounds": ${rounds}, "reject_rounds": ${reject_rounds}, "buyers": ${buyers}, "stock": ${stock}, "flows": ${flows},
 "drain_orders": ${drain_orders}, "single_orders": ${single_orders},
 "purchase_buyers": ${purchase_buyers}, "lua_requests": ${lua_requests},
 "wrk_secs": ${wrk_secs}, "wrk_conns": ${wrk_conns}, "half_rate": ${half_rate},
 "overload_rate": ${overload_rate}, "overload_settle_secs": ${overload_settle_secs},
 "batch_size": ${batch_size}, "consumer_concurrency": ${consumer_concurrency},
 "gateway_per_message": ${gateway_per_message},
 "svg_dir": "$(realpath --relative-to="$(dirname "$out")" "$svg_dir")"}
JSON
python3 "${here}/report.py" "$work" "$out"
