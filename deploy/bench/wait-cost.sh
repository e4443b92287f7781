#!/usr/bin/env bash
# The cost of `redis.wait_replicas`: one gateway binary against itself, with the setting off
# and with it at 1, in alternating rounds (deploy/bench/ab-gateway.sh), while a replica of the
# local stack's Redis of this script's own follows the primary. With the setting on, every
# winning pre-deduct waits for the replica's acknowledgement before the message is sent; the
# refusals never wait. Prints a Markdown section: the figures of each round, the medians and
# the ratio on/off. Usage (the local stack up, the release binaries built, nothing on 8080):
#   deploy/bench/wait-cost.sh
# ROUNDS (3), WRK_SECS (8) and RATE (2600) as in ab-gateway.sh; WAIT_REPLICA_PORT (16390) is
# the replica's port, WAIT_TIMEOUT_MS (1000) the setting's timeout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
bin_dir="${BIN_DIR:-${CARGO_TARGET_DIR:-${HOME}/.cache/seckill/target}/release}"
primary_port="${SECKILL_STACK_REDIS_PORT:-16379}"
replica_port="${WAIT_REPLICA_PORT:-16390}"
wait_timeout_ms="${WAIT_TIMEOUT_MS:-1000}"
rounds="${ROUNDS:-3}"
work="$(mktemp -d)"
replica_pid=""

"${repo}/deploy/local/ensure-tools.sh" redis-server redis-cli:redis-tools python3 >&2

cleanup() {
  if [[ -n $replica_pid ]]; then
    kill "$replica_pid" 2>/dev/null || true
    wait "$replica_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# A replica that keeps nothing on disk: what is measured is the primary waiting for its
# acknowledgement, not the replica's own persistence.
redis-server --bind 127.0.0.1 --port "$replica_port" --dir "$work" --save '' \
  --appendonly no --replicaof 127.0.0.1 "$primary_port" >"${work}/replica.log" 2>&1 &
replica_pid=$!
for _ in $(seq 1 300); do
  redis-cli -p "$replica_port" info replication 2>/dev/null | grep -q '^master_link_status:up' && break
  sleep 0.2
done
redis-cli -p "$replica_port" info replication | grep -q '^master_link_status:up' || {
  echo "wait-cost: the replica never caught up with the primary:" >&2
  tail -n 20 "${work}/replica.log" >&2
  exit 1
}

gateway="${bin_dir}/gateway-svc"
ROUNDS="$rounds" BEFORE_ENV="SECKILL_REDIS__WAIT_REPLICAS=0" \
  AFTER_ENV="SECKILL_REDIS__WAIT_REPLICAS=1 SECKILL_REDIS__WAIT_TIMEOUT_MS=${wait_timeout_ms}" \
  "${here}/ab-gateway.sh" "$gateway" "$gateway" >"${work}/ab.txt"

python3 - "${work}/ab.txt" "$rounds" "$wait_timeout_ms" <<'PY'
import statistics, sys

figures = {}
for line in open(sys.argv[1]):
    name, _, values = line.partition(":")
    figures[name.strip()] = [float(v) for v in values.split()]
rounds, timeout = sys.argv[2], sys.argv[3]

def med(name):
    return statistics.median(figures[name])

def row(label, key, digits):
    off, on = med(f"{key}-before"), med(f"{key}-after")
    each = lambda side: " ".join(f"{v:.{digits}f}" for v in figures[f"{key}-{side}"])
    print(f"| {label} | {off:.{digits}f} | {on:.{digits}f} | {on / off:.2f} | {each('before')} / {each('after')} |")

print(f"`deploy/bench/wait-cost.sh` (ROUNDS={rounds}): one release gateway against itself, "
      "`redis.wait_replicas` 0 against 1 "
      f"(`redis.wait_timeout_ms` {timeout}), alternating which goes first, with a replica of "
      "the stack's Redis on the same machine (no persistence of its own). Each winning "
      "pre-deduct then waits for the replica's acknowledgement before the message is sent.")
print()
print("| figure | WAIT off | WAIT on (1 replica) | on / off | rounds (off / on) |")
print("|---|---|---|---|---|")
row("purchases/s, 64 in flight (winners)", "purchases", 0)
row("purchase p50 (ms), open loop", "p50", 1)
row("purchase p99 (ms), open loop", "p99", 1)
row("DUPLICATE refusals/s (never wait)", "duplicate", 0)
row("rejections after sell-out/s (never reach Redis)", "reject", 0)
PY
