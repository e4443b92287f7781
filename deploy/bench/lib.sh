# shellcheck shell=bash
# shellcheck disable=SC2154 # `here` is set by the sourcing script.
# Shared by the bench scripts that drive the release services on the local stack (run.sh,
# cost.sh): where things are, the services' sales (their own database and Redis prefix, so a
# run leaves nothing behind), and the helpers that start them, load them and read how busy
# each process was. Sourced, never run; the sourcing script sets `here` and `set -euo
# pipefail` first.

repo="$(cd "${here}/../.." && pwd)"
bin_dir="${BIN_DIR:?BIN_DIR is the folder of the release binaries}"
wrk_secs="${WRK_SECS:-10}"
wrk_conns="${WRK_CONNS:-64}"
run_dir="${SECKILL_RUN_DIR:-${repo}/.run}"
services="${repo}/deploy/local/services.sh"
# Local mode: the services and the bench tool sign and check with config/local.toml's keys.
export SECKILL_ENV="${SECKILL_ENV:-local}"
gateway="http://127.0.0.1:8080"
redis_port="${SECKILL_STACK_REDIS_PORT:-16379}"
mysql_port="${SECKILL_STACK_MYSQL_PORT:-13306}"
mysql_base="mysql://seckill:seckill@127.0.0.1:${mysql_port}"
sales_database=seckill_bench_sales
sales_prefix="bench-sales"
stamp="$(date +%s)"
# A product id of its own for every sale of every run: a put of an id that has orders is a
# restock, not a fresh sale. Its argument (stage digits, round) names the sale within the run.
product_of() { echo "$((stamp * 1000 + $1))"; }
# BENCH_WORK keeps the raw outputs (wrk, redis-benchmark, JSON, folded stacks) there.
work="${BENCH_WORK:-$(mktemp -d)}"
mkdir -p "$work"
bench="${bin_dir}/seckill-bench"

log() { printf 'bench: %s\n' "$*" >&2; }
die() {
  printf 'bench: error: %s\n' "$*" >&2
  exit 1
}

# Drops the services' sales: their flows from Redis and their database. Kept, every run's
# would grow Redis by hundreds of MB (it rewrites its append-only file, a fork copying the
# whole dataset on the same cores, each time the file doubles) and MySQL by about a quarter
# of a million orders; and removing only the flows would leave orders the local reconcile
# reports as orphans. Idempotent: also run on exit, whatever the run got to.
forget_sales() {
  redis-cli -p "$redis_port" --scan --pattern "{${sales_prefix}:*" |
    xargs -r redis-cli -p "$redis_port" UNLINK >/dev/null
  mysql -h 127.0.0.1 -P "$mysql_port" -u seckill -pseckill \
    -e "DROP DATABASE IF EXISTS \`${sales_database}\`"
}

gateway_pid() { cat "${run_dir}/gateway-svc.pid"; }

# watch_args NAME...: `--watch NAME=PID` for each named service or stack component that runs,
# for `seckill-bench cpu|sends|drain|write-orders` to report how busy it was.
watch_args() {
  local name f
  for name in "$@"; do
    case "$name" in
      gateway | consumer) f="${run_dir}/${name/consumer/order-consumer}-svc.pid" ;;
      *) f="${run_dir}/stack/${name}/${name}.pid" ;;
    esac
    [[ -s $f ]] && printf -- '--watch\n%s=%s\n' "$name" "$(<"$f")"
  done
  return 0
}

metric() { # metric NAME_WITH_LABELS: the gateway's current value (0 when absent)
  curl -fsS "${gateway}/metrics" | awk -v m="$1" '$1 == m { v = $2 } END { print v + 0 }'
}

rate_limited() {
  echo "$(($(metric 'seckill_rate_limited_total{scope="user"}') + $(metric 'seckill_rate_limited_total{scope="global"}')))"
}

# wrk_run OUT URL TOKENS PRODUCT [WATCH...]: one wrk pass with the purchase script; with
# WATCH arguments, how busy they and the machine were goes to OUT.cpu.json.
wrk_run() {
  local out="$1" url="$2" tokens="$3" product="$4"
  shift 4
  BENCH_TOKENS="$tokens" BENCH_PRODUCT="$product" "$bench" cpu --out "${out}.cpu.json" "$@" -- \
    wrk -t2 -c"$wrk_conns" -d"${wrk_secs}s" --latency -s "${here}/purchase.lua" "$url" >"$out"
}

probe() { # probe OUT TOKENS PRODUCT: the answer to the first buyer's purchase, for the report
  local user token
  read -r user token <"$2"
  curl -sS -X POST "${gateway}/api/v1/products/$3/purchase" -H 'Content-Type: application/json' \
    -H "X-User-Id: ${user}" -d "{\"token\":\"${token}\",\"quantity\":1}" >"$1"
}

sale() { # sale OUT ARGS...: sale-sim against the gateway, JSON report into OUT, and how
  # busy the services, the stack and the machine were into OUT.cpu.json. With
  # `unwritten_expected=1 sale ...` (the consumer stopped on purpose), the orders sale-sim
  # then finds missing from MySQL are what was asked for, and not logged as a fault.
  local report="$1" watched
  shift
  mapfile -t watched < <(watch_args gateway consumer redis mariadb broker)
  "$bench" cpu --out "${report%.json}.cpu.json" "${watched[@]}" -- \
    "${bin_dir}/sale-sim" --gateway "$gateway" --json --no-progress "$@" >"$report" || {
    local status=$?
    ((status == 1)) || die "sale-sim could not run ($*)"
    [[ ${unwritten_expected:-0} == 1 ]] ||
      log "sale-sim reported violations ($*): see BENCHMARKS.md"
  }
}

# What keeps the sales' payment deadlines out of every measurement: each sold unit's order
# is given one, due a quarter of an hour later, and expiring a whole sale's orders at once
# keeps the consumer and MariaDB busy for seconds. Due in a later stage or run (or in the
# next services started on this stack), those expiries would be counted as that sale's
# cost. The sales' orders are dropped with the sales (forget_sales), so they never need to
# expire: the bench's deadlines go to a topic of their own that no expirer reads, and the
# bench's consumer runs none.
bench_deadlines=(SECKILL_CONSUMER__EXPIRE_ORDERS=false
  SECKILL_ROCKETMQ__DEADLINE_TOPIC=seckill-bench-deadline)

# start_services [NAME=VALUE...]: the services on the sales' database and prefix, with the
# rate limits raised (the instance-wide one too: the refusal path runs above its default of
# 100,000/s), the bench's deadlines kept apart, and any further settings given.
start_services() {
  env SECKILL_RATE_LIMIT__USER_PER_SEC=1000000 SECKILL_RATE_LIMIT__USER_BURST=1000000 \
    SECKILL_RATE_LIMIT__GLOBAL_PER_SEC=10000000 "${bench_deadlines[@]}" \
    SECKILL_MYSQL__URL="${mysql_base}/${sales_database}" SECKILL_REDIS__KEY_PREFIX="$sales_prefix" \
    "$@" "$services" start >&2
}

# sign_tokens PRODUCT FIRST_USER OUT: 1,000 purchase tokens for the product's current sale,
# which the tool reads where the services keep it (their key prefix).
sign_tokens() {
  SECKILL_CONFIG_DIR="${repo}/config" SECKILL_REDIS__KEY_PREFIX="$sales_prefix" \
    "$bench" sign-tokens --product "$1" --users 1000 --first-user "$2" --out "$3"
}

# duplicate_tokens PRODUCT TOKENS: a product that never sells out, and 1,000 purchase tokens
# for it (buyers 1001-2000) each used once, so that every later purchase with one of them is
# refused DUPLICATE by pre_deduct: the gateway's purchase path without the send. The flows
# the first uses left go to TOKENS.flows.
duplicate_tokens() {
  local product="$1" tokens="$2" flows=0
  sale "${tokens}.setup.json" --buyers 1 --stock 100000000 --product "$product"
  sign_tokens "$product" 1001 "$tokens"
  for pass in 1 2 3; do # first use of each token: 1,000 winners, each sent to the broker
    wrk_run "${tokens}.warm-${pass}.txt" "$gateway" "$tokens" "$product"
    flows="$(curl -fsS -H 'Authorization: Bearer dev-admin-token' \
      "${gateway}/admin/v1/products/${product}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["flows"])')"
    ((flows >= 1001)) && break
  done
  echo "$flows" >"${tokens}.flows"
}
