#!/usr/bin/env bash
# shellcheck disable=SC2119 # start_services takes settings only when a side needs them.
# What a sold unit costs in CPU, process by process, against each part's own floor, every
# figure measured in the same run (ROUNDS rounds, default 3, reported as medians), and the
# purchase latency curve. Prints a Markdown section (deploy/bench/cost_report.py) and draws
# the curve into COST_SVG (default docs/bench/latency-curve.svg). Usage (the local stack up,
# the release binaries in BIN_DIR, the services stopped: this starts them as make bench does):
#   BIN_DIR=target/release deploy/bench/cost.sh
#
# Each round, in this order:
#   - a sale that sells out: UNITS buyers (10,000) for as many units, each a token then a
#     purchase, 200 at once (sale-sim), from the first request to the last order in MySQL.
#     Over it: each process's CPU and read/write system calls, the Redis commands it ran
#     (INFO commandstats), and how the orders travelled (per message, per consumer batch);
#   - Redis's floor: redis-benchmark running EVALSHA pre_deduct.lua, no gateway in the way;
#   - the gateway's floors, under wrk: the DUPLICATE path (a purchase refused by pre_deduct,
#     nothing sent) and the token path; then the DUPLICATE path again with SPARSE_CONNS
#     (4 16) connections, the gateway's and Redis's CPU per request when fewer arrive at
#     once (not floors: what a request costs short of saturation, for the report);
#   - the closed-loop purchase rate (64 in flight, every buyer's token first), for the curve
#     and, beside the gateway's floor, its CPU per request there.
# Then, the services stopped: the broker's floor (plain sends of the sales' mean message
# size, 16 in flight; transactional sends of that size beside them, alternating, and again
# with 1 and 4 in flight, for reference), MariaDB's and the consumer's (Db::write_orders in
# the consumer's batches and tasks). Last, the services again and the curve: open loop at
# LEVELS % (10 25 50 75 90) of the median closed-loop rate, CURVE_SECS (8) s each, levels
# rising in one round and falling in the next; then PAUSED_LEVELS % (25 50) with the
# consumer stopped, the purchase path's own tail. Latency counts from each purchase's
# scheduled moment.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=deploy/bench/lib.sh
source "${here}/lib.sh"
rounds="${ROUNDS:-3}"
units="${UNITS:-10000}"
lua_requests="${LUA_REQUESTS:-300000}"
closed_buyers="${CLOSED_BUYERS:-24000}"
read -r -a sparse_conns <<<"${SPARSE_CONNS:-4 16}"
read -r -a levels <<<"${LEVELS:-10 25 50 75 90}"
curve_secs="${CURVE_SECS:-8}"
read -r -a paused_levels <<<"${PAUSED_LEVELS:-25 50}"
catch_up_secs="${CATCH_UP_SECS:-10}"
svg="${COST_SVG:-${repo}/docs/bench/latency-curve.svg}"
floor_database=seckill_bench_floor
consumer_ops="http://127.0.0.1:8081"

"${repo}/deploy/local/ensure-tools.sh" wrk redis-benchmark:redis-tools redis-cli:redis-tools \
  mysql:mariadb-client curl python3 >&2
if "$services" status 2>/dev/null | grep -q ' running '; then
  die "services from ${run_dir} are running: cost.sh starts them with its own settings"
fi

cleanup() {
  "$services" stop >/dev/null 2>&1 || true
  forget_sales 2>/dev/null || true
  mysql -h 127.0.0.1 -P "$mysql_port" -u seckill -pseckill \
    -e "DROP DATABASE IF EXISTS \`${floor_database}\`" 2>/dev/null || true
  [[ -n ${BENCH_WORK:-} ]] || rm -rf "$work"
}
trap cleanup EXIT

commandstats() { redis-cli -p "$redis_port" INFO commandstats >"$1"; }

forget_sales
start_services
mapfile -t gateway_watch < <(watch_args gateway)
mapfile -t redis_watch < <(watch_args redis)

dup_product="$(product_of 150)"
duplicate_tokens "$dup_product" "${work}/dup-tokens.txt"
lua_sha="$(redis-cli -p "$redis_port" SCRIPT LOAD "$(<"${repo}/lua/pre_deduct.lua")")"

for round in $(seq 1 "$rounds"); do
  log "cost round ${round}/${rounds}: a ${units}-unit sale that sells out"
  commandstats "${work}/sale-${round}.commands-before"
  curl -fsS "${gateway}/metrics" >"${work}/sale-${round}.metrics-before"
  curl -fsS "${consumer_ops}/metrics" >"${work}/sale-${round}.consumer-before"
  sale "${work}/sale-${round}.json" --buyers "$units" --stock "$units" \
    --product "$(product_of "12${round}")" --concurrency 200
  commandstats "${work}/sale-${round}.commands-after"
  curl -fsS "${gateway}/metrics" >"${work}/sale-${round}.metrics-after"
  curl -fsS "${consumer_ops}/metrics" >"${work}/sale-${round}.consumer-after"

  log "cost round ${round}/${rounds}: Redis's floor, redis-benchmark EVALSHA pre_deduct.lua"
  read -r -a keys < <(SECKILL_CONFIG_DIR="${repo}/config" "$bench" load-product \
    --prefix bench-lua --product "$(product_of "13${round}")" --stock 1000000000 \
    --per-user-limit 1000000)
  "$bench" cpu --out "${work}/lua-${round}.cpu.json" "${redis_watch[@]}" -- \
    redis-benchmark -p "$redis_port" -c 50 -n "$lua_requests" -r 1000000000 --csv \
    EVALSHA "$lua_sha" 5 "${keys[@]}" "bench-__rand_int__" "__rand_int__" 1 \
    >"${work}/lua-${round}.csv"
  left="$(redis-cli -p "$redis_port" GET "${keys[1]}")"
  echo "$((1000000000 - left))" >"${work}/lua-${round}.reserved"
  redis-cli -p "$redis_port" UNLINK "${keys[@]}" >/dev/null

  log "cost round ${round}/${rounds}: the gateway's floors, DUPLICATE path and token path (wrk)"
  wrk_run "${work}/dup-${round}.txt" "$gateway" "${work}/dup-tokens.txt" "$dup_product" \
    "${gateway_watch[@]}" "${redis_watch[@]}"
  BENCH_PRODUCT="$dup_product" "$bench" cpu --out "${work}/tokens-${round}.txt.cpu.json" \
    "${gateway_watch[@]}" -- wrk -t2 -c"$wrk_conns" -d"${wrk_secs}s" --latency \
    -s "${here}/tokens.lua" "$gateway" >"${work}/tokens-${round}.txt"
  for conns in "${sparse_conns[@]}"; do
    log "cost round ${round}/${rounds}: the DUPLICATE path with ${conns} connections (wrk)"
    wrk_conns="$conns" wrk_run "${work}/dup-c${conns}-${round}.txt" "$gateway" \
      "${work}/dup-tokens.txt" "$dup_product" "${gateway_watch[@]}" "${redis_watch[@]}"
  done

  log "cost round ${round}/${rounds}: closed-loop purchase rate (64 in flight)"
  sale "${work}/closed-${round}.json" --buyers "$closed_buyers" --stock 10000000 \
    --product "$(product_of "14${round}")" --concurrency 64 --tokens-first
done
"$services" stop >&2

# The broker's floor carries as many orders to a message as the gateway's did in the sales.
per_message="$(python3 "${here}/cost_steps.py" orders-per-message "$work" "$rounds")"
echo "$per_message" >"${work}/per-message"
mapfile -t broker_watch < <(watch_args broker)
log "the broker's floor: plain sends of ${per_message} orders each, and transactional ones"
SECKILL_CONFIG_DIR="${repo}/config" RUST_LOG=warn "$bench" sends "${broker_watch[@]}" \
  --rounds "$rounds" --concurrency 16 --modes plain,tx --orders-per-message "$per_message" \
  --group "seckill-bench-floor-${stamp}" >"${work}/sends.jsonl"
log "the broker: transactional sends of ${per_message} orders each, 1 and 4 in flight"
SECKILL_CONFIG_DIR="${repo}/config" RUST_LOG=warn "$bench" sends "${broker_watch[@]}" \
  --rounds "$rounds" --concurrency 1,4 --modes tx --orders-per-message "$per_message" \
  --group "seckill-bench-sparse-${stamp}" >>"${work}/sends.jsonl"

read -r batch_size consumer_concurrency < <(python3 - "${repo}/config/default.toml" <<'PY'
import sys, tomllib
consumer = tomllib.load(open(sys.argv[1], "rb"))["consumer"]
print(consumer["batch_size"], consumer["concurrency"])
PY
)
mapfile -t db_watch < <(watch_args mariadb)
for round in $(seq 1 "$rounds"); do
  log "MariaDB's and the consumer's floor, round ${round}/${rounds}: Db::write_orders, batches of ${batch_size}"
  (
    export SECKILL_CONFIG_DIR="${repo}/config" RUST_LOG=warn \
      SECKILL_MYSQL__URL="${mysql_base}/${floor_database}"
    "$bench" prepare-product --product "$(product_of "15${round}")" --stock 100000000 --fresh
    "$bench" write-orders "${db_watch[@]}" --product "$(product_of "15${round}")" \
      --orders "$units" --batch "$batch_size" --tasks "$consumer_concurrency" \
      >"${work}/writes-${round}.json"
  )
done

start_services
closed_rate="$(python3 "${here}/cost_steps.py" closed-rate "$work" "$rounds")"
echo "$closed_rate" >"${work}/closed-rate"
for round in $(seq 1 "$rounds"); do
  order=("${levels[@]}")
  if ((round % 2 == 0)); then
    mapfile -t order < <(printf '%s\n' "${levels[@]}" | tac)
  fi
  for level in "${order[@]}"; do
    rate=$((closed_rate * level / 100))
    log "curve round ${round}/${rounds}: open loop at ${level} % (${rate} purchases/s)"
    sale "${work}/curve-${level}-${round}.json" --buyers "$((rate * curve_secs))" \
      --stock 10000000 --product "$(product_of "$((200 + round * 100 + level))")" --concurrency 64 \
      --rate "$rate"
  done
  # The same rates with the write path paused: the consumer stopped, the orders waiting in
  # the broker. On a host this small the consumer's and MariaDB's bursts share the cores with
  # the purchase path; here the purchase path's own tail shows, as it would with the
  # consumers and MySQL on other nodes.
  kill "$(<"${run_dir}/order-consumer-svc.pid")"
  for level in "${paused_levels[@]}"; do
    rate=$((closed_rate * level / 100))
    log "curve round ${round}/${rounds}: open loop at ${level} % (${rate} purchases/s), the consumer stopped"
    unwritten_expected=1 sale "${work}/paused-${level}-${round}.json" \
      --buyers "$((rate * curve_secs))" \
      --stock 10000000 --product "$(product_of "$((900 + round * 100 + level))")" --concurrency 64 \
      --rate "$rate" --drain-timeout-secs 1
  done
  start_services
  sleep "$catch_up_secs" # the consumer writes the waiting orders before the next round
done

python3 "${here}/cost_report.py" "$work" "$rounds" "${levels[*]}" "$svg"
