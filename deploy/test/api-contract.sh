#!/usr/bin/env bash
# `make test`'s API contract step: the services from the debug build (deploy/local/
# services.sh), then deploy/test/schemathesis.sh against their gateway; the services are
# stopped however that ends. The local stack must be up (make stack).
#
# The services run apart from a `make run` on the same machine and from its data: their own
# run folder (.run/contract), ports (SECKILL_CONTRACT_PORT, default 18380, and the next two),
# database (seckill_contract), Redis key prefix and topic. The per-buyer rate limit is
# raised: schemathesis is one buyer sending hundreds of requests, and at 5 a second it would
# test little but the 429. The run takes about ten seconds once the debug build is there.
#
# Environment: SECKILL_CONTRACT_BIN_DIR (default $CARGO_TARGET_DIR/debug), and those of
# schemathesis.sh (SECKILL_CONTRACT_MAX_EXAMPLES, SECKILL_CONTRACT_SEED, ...).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
target_dir="${CARGO_TARGET_DIR:-${cache}/target}"
port="${SECKILL_CONTRACT_PORT:-18380}"
[[ $port =~ ^[0-9]+$ ]] || {
  echo "api-contract: error: SECKILL_CONTRACT_PORT is not a port: ${port}" >&2
  exit 2
}

export BIN_DIR="${SECKILL_CONTRACT_BIN_DIR:-${target_dir}/debug}"
export SECKILL_RUN_DIR="${repo}/.run/contract"
export SECKILL_GATEWAY__LISTEN="127.0.0.1:${port}"
export SECKILL_CONSUMER__LISTEN="127.0.0.1:$((port + 1))"
export SECKILL_RECONCILE__LISTEN="127.0.0.1:$((port + 2))"
export SECKILL_MYSQL__URL="mysql://seckill:seckill@127.0.0.1:13306/seckill_contract"
export SECKILL_REDIS__KEY_PREFIX="skcontract"
export SECKILL_ROCKETMQ__TOPIC="seckill-contract-order"
export SECKILL_ROCKETMQ__PRODUCER_GROUP="seckill-contract-gateway"
export SECKILL_ROCKETMQ__CONSUMER_GROUP="seckill-contract-order-consumer"
export SECKILL_AUTH__MODE="header"
export SECKILL_RATE_LIMIT__USER_PER_SEC="100000"
export SECKILL_RATE_LIMIT__USER_BURST="100000"
# A reload waits up to this long for the order backlog; kept short so that a slow drain
# does not make the run wait on it.
export SECKILL_GATEWAY__RELOAD_DRAIN_SECS="5"
export SECKILL_GATEWAY_URL="http://${SECKILL_GATEWAY__LISTEN}"

services="${repo}/deploy/local/services.sh"
stop() { "$services" stop || true; }
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Installed before the services start, so that a first install does not keep them waiting.
"${here}/schemathesis.sh" --install >/dev/null
"$services" start
"${here}/schemathesis.sh"
