#!/usr/bin/env bash
# Times `reconcile-svc --once` over a finished sale of FLOWS units of one product (default
# 1,000,000), on a database and key prefix of its own, and prints one line:
#   reconcile FLOWS flows: S s wall, M MiB peak RSS, exit E
# Needs the local stack up and the release binaries built (make bench does both).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
bin_dir="${BIN_DIR:?BIN_DIR is the folder of the release binaries}"
flows="${FLOWS:-1000000}"
product=900000001

"${repo}/deploy/local/ensure-tools.sh" /usr/bin/time:time

export SECKILL_CONFIG_DIR="${repo}/config" SECKILL_ENV="${SECKILL_ENV:-local}"
export SECKILL_MYSQL__URL="mysql://seckill:seckill@127.0.0.1:13306/seckill_bench"
export SECKILL_REDIS__KEY_PREFIX="bench"
export SECKILL_RECONCILE__GRACE_SECS=0
export RUST_LOG=warn

"${bin_dir}/seckill-bench" seed-reconcile --flows "$flows" --product "$product" >&2

measure="$(mktemp)"
trap 'rm -f "$measure"' EXIT
status=0
/usr/bin/time -f '%e %M' -o "$measure" \
  "${bin_dir}/reconcile-svc" --once --product "$product" >"${measure}.report" || status=$?
read -r wall rss_kib <"$measure"
tail -n 3 "${measure}.report" >&2
rm -f "${measure}.report"
printf 'reconcile %s flows: %s s wall, %s MiB peak RSS, exit %s\n' \
  "$flows" "$wall" "$((rss_kib / 1024))" "$status"
