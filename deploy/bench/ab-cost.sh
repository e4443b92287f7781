#!/usr/bin/env bash
# Compares what a sold unit and an issued token cost in CPU under two settings of the same
# release binaries, in alternating rounds (before, after, before, after, ...): for each side
# the services start with its settings, then
#   - a warm-up sale of 200 units, then a sale that sells out (UNITS buyers for as many
#     units, each a token then a purchase, CROWD at once, 200 unless a side sets its own):
#     CPU per sold unit of the gateway, Redis and the whole system, from the first request
#     to the last order in MySQL, and the Redis commands per sold unit;
#   - the token path under wrk: tokens/s, and the gateway's and Redis's CPU per token.
# Usage (the local stack up, the services stopped):
#   BEFORE_ENV='NAME=VALUE ...' AFTER_ENV='NAME=VALUE ...' deploy/bench/ab-cost.sh
# ROUNDS (3) rounds of each side; UNITS (10,000); WRK_SECS (10); BEFORE_CROWD and
# AFTER_CROWD, how many buyers each side's sale keeps in flight (CROWD, 200). A side's
# settings may name its own BIN_DIR, to compare two builds. Prints a Markdown table
# (deploy/bench/ab_cost_report.py): each figure's median and rounds per side, and after /
# before.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export BIN_DIR="${BIN_DIR:-${CARGO_TARGET_DIR:-${HOME}/.cache/seckill/target}/release}"
# shellcheck source=deploy/bench/lib.sh
source "${here}/lib.sh"
rounds="${ROUNDS:-3}"
units="${UNITS:-10000}"
read -r -a before_env <<<"${BEFORE_ENV:-}"
read -r -a after_env <<<"${AFTER_ENV:-}"
before_crowd="${BEFORE_CROWD:-${CROWD:-200}}"
after_crowd="${AFTER_CROWD:-${CROWD:-200}}"

"${repo}/deploy/local/ensure-tools.sh" wrk redis-cli:redis-tools curl python3 >&2
trap '"$services" stop >/dev/null 2>&1 || true; forget_sales 2>/dev/null || true; [[ -n ${BENCH_WORK:-} ]] || rm -rf "$work"' EXIT

forget_sales
for round in $(seq 1 "$rounds"); do
  for side in before after; do
    if [[ $side == before ]]; then
      settings=("${before_env[@]}") product="$(product_of "$((round * 10 + 1))")"
      crowd="$before_crowd" warm_product="$(product_of "$((round * 10 + 3))")"
    else
      settings=("${after_env[@]}") product="$(product_of "$((round * 10 + 2))")"
      crowd="$after_crowd" warm_product="$(product_of "$((round * 10 + 4))")"
    fi
    start_services "${settings[@]}"
    # A consumer just started owns no queue until its first rebalance, about a second
    # later: a sale right away would measure that wait, not the purchase path.
    sale "${work}/${side}-${round}.warm.json" --buyers 200 --stock 200 --product "$warm_product"
    log "round ${round}/${rounds}, ${side} (${settings[*]:-defaults}): a ${units}-unit sale, ${crowd} at once"
    redis-cli -p "$redis_port" INFO commandstats >"${work}/${side}-${round}.commands-before"
    sale "${work}/${side}-${round}.json" --buyers "$units" --stock "$units" --product "$product" \
      --concurrency "$crowd"
    redis-cli -p "$redis_port" INFO commandstats >"${work}/${side}-${round}.commands-after"
    log "round ${round}/${rounds}, ${side}: the token path (wrk)"
    mapfile -t watched < <(watch_args gateway redis)
    BENCH_PRODUCT="$product" "$bench" cpu --out "${work}/${side}-${round}.tokens.cpu.json" \
      "${watched[@]}" -- wrk -t2 -c"$wrk_conns" -d"${wrk_secs}s" --latency \
      -s "${here}/tokens.lua" "$gateway" >"${work}/${side}-${round}.tokens.txt"
    "$services" stop >&2
  done
done

python3 "${here}/ab_cost_report.py" "$work" "$rounds"
