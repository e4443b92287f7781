#!/usr/bin/env bash
# `make bench`: measures what the project can already measure and writes BENCHMARKS.md.
#   1. a sale through the three release services, ROUNDS times (medians reported):
#      sale-sim with BUYERS buyers on STOCK units;
#   2. reconcile-svc --once over a consistent sale of FLOWS units (wall time, peak RSS).
# Needs the local stack up and the release binaries built (the make target does both).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
bin_dir="${BIN_DIR:?BIN_DIR is the folder of the release binaries}"
rounds="${ROUNDS:-3}"
buyers="${BUYERS:-20000}"
stock="${STOCK:-1000}"
flows="${FLOWS:-1000000}"
out="${BENCH_OUT:-${repo}/BENCHMARKS.md}"
work="$(mktemp -d)"
trap 'rm -rf "$work"; "${repo}/deploy/local/services.sh" stop >/dev/null 2>&1 || true' EXIT

"${repo}/deploy/local/services.sh" start
for round in $(seq 1 "$rounds"); do
  echo "bench: sale round ${round}/${rounds} (${buyers} buyers, ${stock} units)" >&2
  "${bin_dir}/sale-sim" --buyers "$buyers" --stock "$stock" --product "$((800000000 + round))" \
    --concurrency 200 --json --no-progress >"${work}/sale-${round}.json"
done
"${repo}/deploy/local/services.sh" stop

echo "bench: reconcile audit of ${flows} flows" >&2
BIN_DIR="$bin_dir" FLOWS="$flows" "${here}/reconcile.sh" >"${work}/reconcile.txt"

python3 - "$work" "$out" "$rounds" "$buyers" "$stock" "$flows" <<'PY'
import json, os, platform, statistics, subprocess, sys
work, out, rounds, buyers, stock, flows = sys.argv[1:]
sales = [json.load(open(f"{work}/sale-{r}.json")) for r in range(1, int(rounds) + 1)]
def med(key, sub=None):
    values = [s[key][sub] if sub else s[key] for s in sales if s.get(key) is not None]
    return statistics.median(values) if values else float("nan")
def series(key, fmt):
    return ", ".join(format(s[key], fmt) if s.get(key) is not None else "-" for s in sales)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
load = open("/proc/loadavg").read().split()[:3]
reconcile = open(f"{work}/reconcile.txt").read().strip()
violations = sum(len(s["violations"]) for s in sales)
lines = [
    "# Benchmarks",
    "",
    "Produced by `make bench` (`deploy/bench/run.sh`): the local stack, the release binaries,",
    "loopback only. Machines here are shared and noisy: figures are medians of the rounds",
    "of one run, and the load average at the end is given so a reader can judge the noise.",
    "",
    f"- machine: {os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}",
    f"- load average at the end of the run: {' '.join(load)}",
    "",
    f"## Sale through the three services ({rounds} rounds, medians)",
    "",
    f"`sale-sim --buyers {buyers} --stock {stock} --concurrency 200` against gateway-svc,",
    "order-consumer-svc and reconcile-svc started by `deploy/local/services.sh`.",
    "",
    "| figure | median | rounds |",
    "|---|---|---|",
    f"| requests/s over the crowd (tokens + purchases) | {med('requests_per_sec'):.0f} | {series('requests_per_sec', '.0f')} |",
    f"| crowd duration (s) | {med('sale_seconds'):.2f} | {series('sale_seconds', '.2f')} |",
    f"| purchase latency p50 (ms) | {med('purchase_latency_ms', 'p50'):.1f} | |",
    f"| purchase latency p99 (ms) | {med('purchase_latency_ms', 'p99'):.1f} | |",
    f"| accepted purchase latency p99 (ms) | {med('accepted_latency_ms', 'p99'):.1f} | |",
    f"| time to drain: first purchase → last order in MySQL (s) | {med('drain_seconds'):.2f} | {series('drain_seconds', '.2f')} |",
    f"| accepted / stock | {med('accepted'):.0f} / {stock} | |",
    f"| invariant violations (all rounds) | {violations} | |",
    "",
    "## Reconcile audit",
    "",
    f"`deploy/bench/reconcile.sh`: `seckill-bench seed-reconcile --flows {flows}` writes a",
    "consistent, sold-out sale (flows in Redis, orders and stock_flow in MySQL), then",
    "`reconcile-svc --once --product …` runs under `/usr/bin/time`.",
    "",
    "```",
    reconcile,
    "```",
    "",
]
open(out, "w").write("\n".join(lines))
print(f"bench: wrote {out}", file=sys.stderr)
PY
