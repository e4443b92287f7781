#!/usr/bin/env python3
"""Writes BENCHMARKS.md from the files deploy/bench/run.sh left in its work folder.

Usage: report.py WORK_DIR OUT. Every figure comes from those files; nothing is typed in.
Figures are medians over the rounds, with each round listed; a ratio is the ratio of the
two medians; "holds" compares it with the issue's target.
"""

import glob
import json
import os
import platform
import re
import sys

from figures import fmt, holds, med, ratio, redis_benchmark, series, wrk

work, out = sys.argv[1], sys.argv[2]
params = json.load(open(f"{work}/params.json"))
rounds = params["rounds"]
R = range(1, rounds + 1)
# Section 2's rounds, and the DUPLICATE passes made with them (fewer in runs before them).
RJ = range(1, params.get("reject_rounds", rounds) + 1)


def load(name):
    return json.load(open(f"{work}/{name}"))


def loads(pattern):
    return [load(pattern.format(r)) for r in R]


def pairs(rows, a, b):
    """'a/b' of every row, comma-separated."""
    return ", ".join(f"{row[a]:,}/{row[b]:,}" for row in rows)


def p(report, key, q):
    value = report.get(key)
    return value[q] if value else None


lines = []
w = lines.append


def cpu_table(label, records, per_sec_list, unit):
    """Per process: cores busy and context switches/s (medians over the rounds), and CPU µs
    and context switches per `unit` at the rate measured in the same round. `records` hold
    `cores` and `switches` maps (process → value), as the bench tools write them."""
    keys = []
    for record in records:
        for key in (record or {}).get("cores", {}):
            if key not in keys:
                keys.append(key)

    def at(record, kind, key):
        return ((record or {}).get(kind) or {}).get(key)

    def per_op(kind, key, scale):
        return med([at(r, kind, key) * scale / rate if at(r, kind, key) is not None and rate else None
                    for r, rate in zip(records, per_sec_list)])

    w(f"| {label}: process | cores busy | CPU per {unit} (µs) | context switches per {unit} |")
    w("|---|---|---|---|")
    for key in sorted(keys, key=lambda k: (k == "machine", k)):
        busy = med([at(r, "cores", key) for r in records])
        name = {"self": "the load tool / the bench process", "machine": "**the whole machine**"}.get(key, key)
        w(f"| {name} | {fmt(busy, 2)} | {fmt(per_op('cores', key, 1e6), 0)} | {fmt(per_op('switches', key, 1), 1)} |")
    w("")


def cpu_of(path):
    return json.load(open(path)) if os.path.exists(path) else None

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
# Written by run.sh when the measurements ended (a report made again later must not take
# the load of that later moment).
load_end = (open(f"{work}/loadavg-end").read().strip() if os.path.exists(f"{work}/loadavg-end")
            else " ".join(open("/proc/loadavg").read().split()[:3]))
load_start = open(f"{work}/loadavg-start").read().strip() if os.path.exists(f"{work}/loadavg-start") else "?"
w("# Benchmarks")
w("")
w("Produced by `make bench` (`deploy/bench/run.sh`, then `deploy/bench/report.py`): the local stack,")
w("the release binaries, loopback only, every pair measured in the same run in alternating rounds.")
w("Figures are medians of the rounds (each round listed); a ratio is the ratio of two medians.")
w("The machine is shared and small: load tool, services, Redis, MariaDB and the broker share its")
w("cores, so the load average at the start and the end is given to judge the noise by.")
w("")
w(f"- machine: {os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}")
w(f"- command: `make bench` (ROUNDS={rounds}, REJECT_ROUNDS={len(RJ)}); the services started by `deploy/local/services.sh` "
  "with `SECKILL_RATE_LIMIT__USER_PER_SEC`/`USER_BURST` raised to 1,000,000 (wrk re-uses 1,000 buyers) "
  "and `SECKILL_RATE_LIMIT__GLOBAL_PER_SEC` to 10,000,000 (the refusal path runs above its default)")
idle_start = open(f"{work}/idle-start").read().strip() if os.path.exists(f"{work}/idle-start") else None
w(f"- load average at the start: {load_start}; at the end: {load_end}"
  + (f"; CPU idle over the 2 s before the run: {idle_start} %" if idle_start else ""))
w("")

# ------------------------------------------------------------------ summary table
lua = [redis_benchmark(f"{work}/lua-{r}.csv") for r in R]
lua_reserved = [int(open(f"{work}/lua-{r}.reserved").read()) for r in R]
purchase = loads("purchase-{}.json")
dup = [wrk(f"{work}/dup-{r}.txt") for r in RJ]
rej_gw = [wrk(f"{work}/reject-gateway-{r}.txt") for r in RJ]
rej_bare = [wrk(f"{work}/reject-bare-{r}.txt") for r in RJ]
latency = loads("latency-{}.json")
# Section 3b, past capacity (absent from runs before it): the gateway with its in-flight cap
# (default) and without one (none).
overload = {cap: [load(f"overload-{cap}-{r}.json") if os.path.exists(f"{work}/overload-{cap}-{r}.json") else None
                  for r in R]
            for cap in ("default", "none")}
overload_measured = all(overload["default"]) and all(overload["none"])
sale10k = loads("sale10k-{}.json")
conns_fresh, conns_loaded = load("conns-fresh.json"), load("conns-loaded.json")
streams = load("streams.json")
sends = [json.loads(l) for l in open(f"{work}/sends.jsonl") if l.strip()]
pools = {}
for path in sorted(glob.glob(f"{work}/sends-pool-*.jsonl")):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    if rows:
        pools[rows[0]["producers"]] = rows
sends_pool = [r for rows in pools.values() for r in rows]
# Transactional messages of several orders each, as the gateway batches winners.
sends_batched = [json.loads(l) for l in open(f"{work}/sends-batched.jsonl") if l.strip()]
batched_orders_med = med([r["orders_per_sec"] for r in sends_batched])
batched_per_message = sends_batched[0]["orders_per_message"] if sends_batched else None
batched_in_flight = sends_batched[0]["concurrency"] if sends_batched else None
drain = loads("drain-{}.json")
drain_alt = loads("drain-alt-{}.json")
batched = loads("batched-{}.json")
single = loads("single-{}.json")
reconcile = open(f"{work}/reconcile.txt").read().strip()

lua_med = med([x["rps"] for x in lua])
purchase_med = med([x["purchases_per_sec"] for x in purchase])
dup_med = med([x["rps"] for x in dup])
gw_rej_med = med([x["rps"] for x in rej_gw])
bare_med = med([x["rps"] for x in rej_bare])
lat_p99 = med([p(x, "purchase_latency_ms", "p99") for x in latency])
units_per_sec = [x["accepted"] / x["sell_seconds"] if x.get("sell_seconds") else None for x in sale10k]


def sends_med(mode, concurrency, rows=sends, key="sends_per_sec"):
    return med([r[key] for r in rows if r["mode"] == mode and r["concurrency"] == concurrency])


concurrencies = sorted({r["concurrency"] for r in sends})
tx_best = max((sends_med("tx", c) or 0) for c in concurrencies)
plain_best = max((sends_med("plain", c) or 0) for c in concurrencies)
pool_meds = {k: med([r["sends_per_sec"] for r in rows]) for k, rows in pools.items()}
drain_med = med([x["orders_per_sec"] for x in drain])
drain_alt_med = med([x["orders_per_sec"] for x in drain_alt])
batched_med = med([x["orders_per_sec"] for x in batched])
single_med = med([x["orders_per_sec"] for x in single])
rss_fresh = max(conns_fresh["rss_open_kib"], conns_fresh["rss_after_second_request_kib"]) / 1024
rss_loaded = max(conns_loaded["rss_open_kib"], conns_loaded["rss_after_second_request_kib"]) / 1024
reconcile_secs = [float(m.group(1)) for m in re.finditer(r"flows: ([\d.]+) s wall", reconcile)]

w("## The stages against their targets")
w("")
w("| stage | figure (median) | measured against (median) | ratio | target | |")
w("|---|---|---|---|---|---|")
w(f"| gateway purchases/s before sell-out, over HTTP (winners: pre_deduct + transactional send) "
  f"| {fmt(purchase_med)} /s | redis-benchmark EVALSHA pre_deduct.lua: {fmt(lua_med)} ops/s "
  f"| {fmt(ratio(purchase_med, lua_med), 3)} | ≥ 0.6× | {holds(ratio(purchase_med, lua_med) and ratio(purchase_med, lua_med) >= 0.6)} |")
w(f"| — the same requests when pre_deduct refuses them (re-used token → DUPLICATE, no send) "
  f"| {fmt(dup_med)} /s | the same redis-benchmark | {fmt(ratio(dup_med, lua_med), 2)} | (≥ 0.6×) "
  f"| {holds(ratio(dup_med, lua_med) and ratio(dup_med, lua_med) >= 0.6)} |")
w(f"| gateway rejections/s after sell-out (sold-out flag) | {fmt(gw_rej_med)} /s "
  f"| bare actix-web handler, same wrk script: {fmt(bare_med)} /s | {fmt(ratio(gw_rej_med, bare_med), 2)} "
  f"| ≥ 0.8× | {holds(ratio(gw_rej_med, bare_med) and ratio(gw_rej_med, bare_med) >= 0.8)} |")
w(f"| p99 purchase latency, open loop at 50 % of the max purchase rate ({params['half_rate']}/s) "
  f"| {fmt(lat_p99, 1)} ms | — | | < 10 ms | {holds(lat_p99 is not None and lat_p99 < 10)} |")
w(f"| transactional sends/s (one publisher, best of {'/'.join(map(str, concurrencies))} in flight) "
  f"| {fmt(tx_best)} /s | plain sends/s, same client: {fmt(plain_best)} /s "
  f"| {fmt(ratio(tx_best, plain_best), 2)} | find the bottleneck; report | see below |")
for k, pool_med in pool_meds.items():
    w(f"| — a pool of {k} publishers (64 in flight) | {fmt(pool_med)} /s | one publisher: {fmt(tx_best)} /s "
      f"| {fmt(ratio(pool_med, tx_best), 2)} | | |")
w(f"| — orders/s in transactional messages of {batched_per_message} orders ({batched_in_flight} in flight), "
  f"as the gateway batches | {fmt(batched_orders_med)} /s | plain sends/s (one order each): {fmt(plain_best)} /s "
  f"| {fmt(ratio(batched_orders_med, plain_best), 2)} | | |")
w(f"| consumer orders/s draining {params['drain_orders']:,} queued orders into MariaDB | {fmt(drain_med)} /s "
  f"| Db::write_orders, batches of {params['batch_size']}, {params['consumer_concurrency']} tasks: {fmt(batched_med)} /s "
  f"| {fmt(ratio(drain_med, batched_med), 2)} | ≥ 0.7× | {holds(ratio(drain_med, batched_med) and ratio(drain_med, batched_med) >= 0.7)} |")
w(f"| — against one transaction per order | {fmt(drain_med)} /s | {fmt(single_med)} /s "
  f"| {fmt(ratio(drain_med, single_med), 1)} | ≥ 10× | {holds(ratio(drain_med, single_med) and ratio(drain_med, single_med) >= 10)} |")
w(f"| — the same orders queued {params['gateway_per_message']} to a message, as the gateway sends a crowd's "
  f"winners (still ≤ {params['batch_size']} orders per transaction) | {fmt(drain_alt_med)} /s | raw batched: {fmt(batched_med)} /s "
  f"| {fmt(ratio(drain_alt_med, batched_med), 2)} | ≥ 0.7× | {holds(ratio(drain_alt_med, batched_med) and ratio(drain_alt_med, batched_med) >= 0.7)} |")
w(f"| — — against one transaction per order | {fmt(drain_alt_med)} /s | {fmt(single_med)} /s "
  f"| {fmt(ratio(drain_alt_med, single_med), 1)} | ≥ 10× | {holds(ratio(drain_alt_med, single_med) and ratio(drain_alt_med, single_med) >= 10)} |")
w(f"| reconcile audit of {params['flows']:,} flows, one product | {fmt(med(reconcile_secs), 1)} s | — | | < 60 s, memory bounded "
  f"| {holds(bool(reconcile_secs) and med(reconcile_secs) < 60)} |")
w(f"| gateway RSS at 1,000 open keep-alive connections, fresh gateway | {fmt(rss_fresh, 1)} MiB | — | | < 64 MiB | {holds(rss_fresh < 64)} |")
w(f"| — the same after all the load of this run | {fmt(rss_loaded, 1)} MiB | — | | < 64 MiB | {holds(rss_loaded < 64)} |")
w(f"| gateway RSS with {streams['streams']:,} order-event streams open | {fmt(streams['rss_open_kib'] / 1024, 1)} MiB "
  f"| RSS at 1,000 connections: {fmt(rss_fresh, 1)} MiB | {fmt(streams['kib_per_stream'], 1)} KiB a stream | bounded; report | |")
w(f"| — a cancel reaching every stream of its order, p99 (max) | {fmt(streams['delivery_ms_p99'], 1)} ms "
  f"({fmt(streams['delivery_ms_max'], 1)} ms) | — | {streams['delivered']:,} of {streams['streams']:,} delivered | < 1,000 ms "
  f"| {holds(streams['missed'] == 0 and streams['delivery_ms_max'] is not None and streams['delivery_ms_max'] < 1000)} |")
w(f"| — a returned unit sold again on a gateway whose sold-out flag was set | {fmt(streams['sold_again_after_ms'], 1)} ms "
  f"| the flag's epoch check: every 1,000 ms | | < 1,000 ms | {holds(streams['sold_again_after_ms'] < 1000)} |")
w(f"| units/s one gateway sells in a 10,000-unit sale, first request → last order in MySQL "
  f"| {fmt(med(units_per_sec))} units/s | — | | (measure) | |")
if overload_measured:
    def p99_of(cap):
        return med([p(x, "purchase_latency_ms", "p99") for x in overload[cap]])

    w(f"| past capacity (§3b, open loop at {params['overload_rate']:,}/s): p99 of every answer, with the "
      f"gateway's in-flight cap | {fmt(p99_of('default'), 1)} ms | without the cap: {fmt(p99_of('none'), 1)} ms "
      f"| {fmt(ratio(p99_of('default'), p99_of('none')), 3)} | (measure) | |")
w("")

# ------------------------------------------------------------------ details
w("## CPU per sold unit, against each part's floor; the latency curve")
w("")
w(open(f"{work}/cost.md").read().rstrip())
w("")

w("## 1. Pre-deduct: the gateway against redis-benchmark")
w("")
w(f"`redis-benchmark -c 50 -n {params['lua_requests']:,} -r 10^9 EVALSHA <sha of lua/pre_deduct.lua> 5 <the five keys> "
  "bench-__rand_int__ __rand_int__ 1` (unpipelined) against the stack's Redis, on a product loaded by "
  "`seckill-bench load-product` (10^9 units, a per-user limit of 10^6, so every call reserves); "
  "the units reserved are read back after each round to show every call took the whole script. "
  f"Then `sale-sim --tokens-first --buyers {params['purchase_buyers']:,} --stock 10000000 --concurrency 64`: "
  "every buyer's token first, then the purchases, all winners, so each is a pre_deduct **and** a "
  "transactional send with confirm.lua as its local transaction. Alternating, one of each per round.")
w("")
w("| figure | median | rounds |")
w("|---|---|---|")
w(f"| redis-benchmark EVALSHA pre_deduct.lua, ops/s | {fmt(lua_med)} | {series([x['rps'] for x in lua])} |")
w(f"| — p50 / p99 latency (ms) | {fmt(med([x['p50'] for x in lua]), 2)} / {fmt(med([x['p99'] for x in lua]), 2)} | |")
w(f"| — units reserved per round (= requests) | | {series(lua_reserved)} |")
w(f"| gateway purchases/s (all accepted) | {fmt(purchase_med)} | {series([x['purchases_per_sec'] for x in purchase])} |")
w(f"| — accepted / purchases | | {pairs(purchase, 'accepted', 'purchases')} |")
w(f"| — purchase latency p50 / p99 (ms) | {fmt(med([p(x, 'purchase_latency_ms', 'p50') for x in purchase]), 1)} / "
  f"{fmt(med([p(x, 'purchase_latency_ms', 'p99') for x in purchase]), 1)} | |")
w(f"| gateway purchases/s refused by pre_deduct (DUPLICATE), wrk -c{params['wrk_conns']} | {fmt(dup_med)} | {series([x['rps'] for x in dup])} |")
w(f"| — non-2xx / requests (every answer a 409) | | {pairs(dup, 'non2xx', 'requests')} |")
w(f"| ratio purchases / EVALSHA | {fmt(ratio(purchase_med, lua_med), 3)} | |")
w(f"| ratio DUPLICATE path / EVALSHA | {fmt(ratio(dup_med, lua_med), 2)} | |")
w("")
dup_flows = open(f"{work}/dup-tokens.txt.flows").read().strip()
dup_probe = open(f"{work}/dup-probe.json").read().strip()
w(f"The DUPLICATE row is the gateway's purchase path up to and including pre_deduct.lua (HTTP, "
  f"identity, rate limits, token check, the script) without the send: 1,000 pre-signed tokens "
  f"(`seckill-bench sign-tokens`) each used once first (the winners; flows afterwards: "
  f"{dup_flows}), then re-sent by wrk. The answer to a re-sent one: `{dup_probe}`.")
w("")


def scrape(path):
    values = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        try:
            values[name] = float(value)
        except ValueError:
            pass
    return values


def quantile(q, buckets):
    """histogram_quantile over (upper bound, cumulative count) pairs, as Prometheus does it."""
    buckets = sorted(buckets)
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = upper, count
    return lower


def stage_table(before_path, after_path):
    """Mean, p50 and p99 of each purchase stage between two scrapes of the gateway."""
    before, after = scrape(before_path), scrape(after_path)
    w("| stage | mean (ms) | p50 (ms) | p99 (ms) | calls |")
    w("|---|---|---|---|---|")
    for label, base, labels in (
        ("HTTP request, POST …/purchase (whole handler)", "seckill_http_request_duration_seconds",
         'method="POST",route="/api/v1/products/{product_id}/purchase"'),
        ("pre_deduct.lua", "seckill_lua_seconds", 'script="pre_deduct"'),
        ("transactional send (half message, local transaction, END_TRANSACTION)", "seckill_send_seconds", ""),
        ("— confirm.lua, the local transaction", "seckill_lua_seconds", 'script="confirm"'),
    ):
        sel = "{" + labels + "}" if labels else ""
        total_sum = after.get(f"{base}_sum{sel}", 0) - before.get(f"{base}_sum{sel}", 0)
        total_count = after.get(f"{base}_count{sel}", 0) - before.get(f"{base}_count{sel}", 0)
        prefix = f"{base}_bucket{{" + (labels + "," if labels else "") + 'le="'
        buckets = []
        for name, value in after.items():
            if name.startswith(prefix):
                le = name[len(prefix):-2]
                upper = float("inf") if le == "+Inf" else float(le)
                buckets.append((upper, value - before.get(name, 0)))
        mean = 1000 * total_sum / total_count if total_count else None
        p50, p99 = (quantile(q, buckets) for q in (0.5, 0.99))
        w(f"| {label} | {fmt(mean, 2)} | {fmt(p50 and 1000 * p50, 2)} | {fmt(p99 and 1000 * p99, 1)} "
          f"| {int(total_count):,} |")
    w("")


w("Where a winning purchase spends its time, from the gateway's own histograms over the "
  f"{rounds} purchase rounds (p50 and p99 interpolated within the histogram's buckets, as "
  "Prometheus' histogram_quantile does; the send includes the local transaction, confirm.lua):")
w("")
stage_table(f"{work}/purchase-metrics-before.txt", f"{work}/purchase-metrics-after.txt")

w(f"How busy each process and the machine ({os.cpu_count()} cores) were while sale-sim ran (whole run: "
  "tokens, purchases, the wait for the last order); CPU per buyer = cores × run time / buyers:")
w("")
purchase_cpu = [json.load(open(f"{work}/purchase-{r}.cpu.json")) for r in R]
cpu_table("purchases", purchase_cpu,
          [x["buyers"] / c["wall_s"] for x, c in zip(purchase, purchase_cpu)], "buyer")
w("## 2. Rejections after sell-out: the gateway against a bare actix-web handler")
w("")
w(f"`wrk -t2 -c{params['wrk_conns']} -d{params['wrk_secs']}s -s deploy/bench/purchase.lua`: POST "
  "…/purchase with 1,000 valid tokens of a sold-out product in turn (the gateway answers 409 "
  "SOLD_OUT from its local flag, after identity and the instance-wide rate limit; the flag comes before the token's HMAC), and the same "
  "requests to `seckill-bench bare-http`, an actix-web app with the one route answering the same "
  "409 body (same default worker count). One of each per round, the side that goes first "
  f"alternating, {len(RJ)} rounds.")
w("")
w("| figure | median | rounds |")
w("|---|---|---|")
w(f"| gateway rejections/s | {fmt(gw_rej_med)} | {series([x['rps'] for x in rej_gw])} |")
w(f"| — latency p50 / p99 (ms) | {fmt(med([x['p50'] for x in rej_gw]), 2)} / {fmt(med([x['p99'] for x in rej_gw]), 2)} | |")
w(f"| bare actix-web handler, req/s | {fmt(bare_med)} | {series([x['rps'] for x in rej_bare])} |")
w(f"| — latency p50 / p99 (ms) | {fmt(med([x['p50'] for x in rej_bare]), 2)} / {fmt(med([x['p99'] for x in rej_bare]), 2)} | |")
w(f"| ratio | {fmt(ratio(gw_rej_med, bare_med), 2)} | |")
sold_out_count = open(f"{work}/reject-sold-out-count").read().strip()
so_probe = open(f"{work}/so-probe.json").read().strip()
limited_count = open(f"{work}/reject-rate-limited-count").read().strip()
w("")
w(f"Every answer was a rejection: the gateway counted {int(sold_out_count):,} `sold_out` purchases "
  f"and {int(limited_count):,} per-buyer rate-limit refusals over the {len(RJ)} gateway passes "
  f"(wrk: {pairs(rej_gw, 'non2xx', 'requests')} non-2xx/requests). The gateway's answer: `{so_probe}`.")
w("")

w("How busy each side was during the passes (wrk is the load tool, on the same cores):")
w("")
cpu_table("gateway rejections", [cpu_of(f"{work}/reject-gateway-{r}.txt.cpu.json") for r in RJ],
          [x["rps"] for x in rej_gw], "request")
cpu_table("bare handler", [cpu_of(f"{work}/reject-bare-{r}.txt.cpu.json") for r in RJ],
          [x["rps"] for x in rej_bare], "request")
cpu_table("DUPLICATE path (section 1)", [cpu_of(f"{work}/dup-{r}.txt.cpu.json") for r in RJ],
          [x["rps"] for x in dup], "request")

w("## 3. Purchase latency at half the maximum rate")
w("")
w(f"`sale-sim --rate {params['half_rate']} --buyers {params['half_rate'] * 10:,} --stock 10000000`: "
  "half the median purchases/s of section 1, open loop — every purchase leaves at its scheduled "
  "moment whatever the others do, and its latency counts from that moment (no coordinated omission). "
  "All of them are winners: pre_deduct and the transactional send.")
w("")
w("| figure | median | rounds |")
w("|---|---|---|")
w(f"| purchases/s achieved | {fmt(med([x['purchases_per_sec'] for x in latency]))} | {series([x['purchases_per_sec'] for x in latency])} |")
for q in ("p50", "p90", "p99", "max"):
    w(f"| latency {q} (ms) | {fmt(med([p(x, 'purchase_latency_ms', q) for x in latency]), 1)} | {series([p(x, 'purchase_latency_ms', q) for x in latency], 1)} |")
w("")

w("The same stages, from the gateway's histograms over the open-loop rounds:")
w("")
stage_table(f"{work}/latency-metrics-before.txt", f"{work}/latency-metrics-after.txt")

if overload_measured:
    settle_secs = params.get('overload_settle_secs', 15)
    w("## 3b. Past capacity: the gateway's in-flight cap")
    w("")
    w(f"`sale-sim --rate {params['overload_rate']} --buyers {params['overload_rate'] * 6:,}`: an open loop "
      "at 2.5 times the rate of section 3 — above what the crowd of section 1 reached — for 6 s, "
      "against a freshly started gateway with its cap on the purchases under way "
      "(`rate_limit.purchases_in_flight`, default 1,024: past it a purchase is answered 429 "
      "`RATE_LIMITED` at once, having changed nothing) and without one (the setting at 10^8). "
      "Alternating, one of each per round. sale-sim gives up on an answer after 10 s "
      "(`NO_RESPONSE`/`TIMEOUT`); the gateway answers `UNAVAILABLE` when Redis does not answer "
      "pre_deduct within `redis.timeout_ms` (1 s). \"Orders for buyers told otherwise\": orders in "
      "MySQL, after the drain, beyond the purchases answered 202. \"Units reserved with no order\": "
      "the product's flow records less its orders, read from the admin API "
      f"{settle_secs} s after sale-sim's report (purchases it gave up on may still be on their way to an order until then): what "
      "reconcile would later turn into orders or give back.")
    w("")

    def outcome(x, code):
        return x["outcomes"].get(code, 0)

    def told_otherwise(x):
        return x["orders_in_mysql"] - x["accepted"]

    def rss_mib(cap, r):
        path = f"{work}/overload-{cap}-{r}.rss-kib"
        return int(open(path).read()) / 1024 if os.path.exists(path) else None

    def reserved_later(cap, r):
        """Flow records still without an order overload_settle_secs after sale-sim's report."""
        path = f"{work}/overload-{cap}-{r}.later.json"
        if not os.path.exists(path):
            return None
        later = json.load(open(path))
        return later["flows"] - later["orders"]

    w("| figure | with the cap (median) | rounds | without (median) | rounds |")
    w("|---|---|---|---|---|")
    rows = [
        ("purchases/s, first sent to last answered", lambda cap, r, x: x["purchases_per_sec"], 0),
        ("answered 202 (accepted)", lambda cap, r, x: x["accepted"], 0),
        ("answered 429 RATE_LIMITED (the cap)", lambda cap, r, x: outcome(x, "RATE_LIMITED"), 0),
        ("answered 503 UNAVAILABLE (Redis too slow)", lambda cap, r, x: outcome(x, "UNAVAILABLE"), 0),
        ("no answer within 10 s", lambda cap, r, x: outcome(x, "NO_RESPONSE") + outcome(x, "TIMEOUT"), 0),
        ("any other answer (e.g. actix-web's 408: request not read within 5 s)",
         lambda cap, r, x: sum(x["outcomes"].values()) - sum(
             outcome(x, code) for code in ("ACCEPTED", "RATE_LIMITED", "UNAVAILABLE", "NO_RESPONSE", "TIMEOUT")), 0),
        ("latency of every answer, p50 (ms)", lambda cap, r, x: p(x, "purchase_latency_ms", "p50"), 1),
        ("latency of every answer, p99 (ms)", lambda cap, r, x: p(x, "purchase_latency_ms", "p99"), 1),
        ("latency of the accepted, p99 (ms)", lambda cap, r, x: p(x, "accepted_latency_ms", "p99"), 1),
        ("orders for buyers told otherwise", lambda cap, r, x: told_otherwise(x), 0),
        (f"units reserved with no order, {settle_secs} s later",
         lambda cap, r, x: reserved_later(cap, r), 0),
        ("gateway RSS after the round (MiB)", lambda cap, r, x: rss_mib(cap, r), 1),
    ]
    for label, get, digits in rows:
        cells = []
        for cap in ("default", "none"):
            values = [get(cap, r, x) for r, x in zip(R, overload[cap])]
            cells += [fmt(med(values), digits), series(values, digits)]
        w(f"| {label} | " + " | ".join(cells) + " |")
    w("")
    def units_add_up(x):
        return (x["redis_stock"] + x["flows"] == x["stock"]
                and x["mysql_stock"] + x["orders_in_mysql"] == x["stock"])

    off = [f"{cap} {r}" for cap in overload for r, x in zip(R, overload[cap]) if not units_add_up(x)]
    beyond = [told_otherwise(x) for cap in overload for x in overload[cap]]
    if any(beyond):
        told = ("Orders beyond the accepted ones are buyers who were told `UNAVAILABLE` or got "
                "no answer while their purchase went on: they get the unit.")
    else:
        told = ("No buyer told otherwise has an order: a pre-deduct Redis did not answer in time "
                "is given back before the 503 (docs/architecture.md: decisions).")
    w("Units in every round: Redis stock + flow records = the stock loaded, and MySQL stock + "
      f"orders = the stock loaded: {'yes' if not off else 'no, in ' + ', '.join(off)}. Nothing "
      f"is sold that pre_deduct did not reserve. {told}")
    w("")

w("## 4. Transactional against plain sends of the same client")
w("")
w("`seckill-bench sends`: one `OrderPublisher` (the gateway's sizing: a client runtime with a "
  "blocking pool of 64) sends order messages from N tasks for 5 s after 1 s of warm-up; the "
  "transactional sends' local transaction commits at once, so Redis is not in the way. `half` is "
  "the time from the call to the local transaction starting (half message stored, then the "
  "hand-off to the client's blocking pool), `end` from there to the call returning (local "
  "transaction, then the one-way END_TRANSACTION). Modes alternate within each round.")
w("")
w("| in flight | tx sends/s | plain sends/s | tx / plain | tx p50 / p99 (ms) | tx half p50 / p99 | tx end p50 / p99 | plain p50 / p99 |")
w("|---|---|---|---|---|---|---|---|")


def pq(mode, c, key, q, rows=sends):
    return med([r[key][q] for r in rows if r["mode"] == mode and r["concurrency"] == c and r.get(key)])


for c in concurrencies:
    tx, plain = sends_med("tx", c), sends_med("plain", c)
    w(f"| {c} | {fmt(tx)} ({series([r['sends_per_sec'] for r in sends if r['mode'] == 'tx' and r['concurrency'] == c])}) "
      f"| {fmt(plain)} ({series([r['sends_per_sec'] for r in sends if r['mode'] == 'plain' and r['concurrency'] == c])}) "
      f"| {fmt(ratio(tx, plain), 2)} "
      f"| {fmt(pq('tx', c, 'total_ms', 'p50'), 1)} / {fmt(pq('tx', c, 'total_ms', 'p99'), 1)} "
      f"| {fmt(pq('tx', c, 'half_ms', 'p50'), 1)} / {fmt(pq('tx', c, 'half_ms', 'p99'), 1)} "
      f"| {fmt(pq('tx', c, 'end_ms', 'p50'), 1)} / {fmt(pq('tx', c, 'end_ms', 'p99'), 1)} "
      f"| {fmt(pq('plain', c, 'total_ms', 'p50'), 1)} / {fmt(pq('plain', c, 'total_ms', 'p99'), 1)} |")
c = batched_in_flight
w(f"| {batched_per_message} orders per message, {c} in flight: orders/s | {fmt(batched_orders_med)} "
  f"({series([r['orders_per_sec'] for r in sends_batched])}) | | | "
  f"{fmt(pq('tx', c, 'total_ms', 'p50', sends_batched), 1)} / {fmt(pq('tx', c, 'total_ms', 'p99', sends_batched), 1)} "
  f"| {fmt(pq('tx', c, 'half_ms', 'p50', sends_batched), 1)} / {fmt(pq('tx', c, 'half_ms', 'p99', sends_batched), 1)} "
  f"| {fmt(pq('tx', c, 'end_ms', 'p50', sends_batched), 1)} / {fmt(pq('tx', c, 'end_ms', 'p99', sends_batched), 1)} | |")
errors = sum(r["errors"] for r in sends + sends_pool + sends_batched)
for k, rows in pools.items():
    c = rows[0]["concurrency"]
    w(f"| pool of {k} publishers, {c} in flight | {fmt(pool_meds[k])} ({series([r['sends_per_sec'] for r in rows])}) | | | "
      f"{fmt(pq('tx', c, 'total_ms', 'p50', rows), 1)} / {fmt(pq('tx', c, 'total_ms', 'p99', rows), 1)} "
      f"| {fmt(pq('tx', c, 'half_ms', 'p50', rows), 1)} / {fmt(pq('tx', c, 'half_ms', 'p99', rows), 1)} "
      f"| {fmt(pq('tx', c, 'end_ms', 'p50', rows), 1)} / {fmt(pq('tx', c, 'end_ms', 'p99', rows), 1)} | |")
w("")
w(f"Failed sends in all windows: {errors}.")
w("")
w("How busy the sender, the broker and the machine were in the windows at the highest concurrency:")
w("")
top = max(concurrencies)
for mode in ("tx", "plain"):
    rows = [r for r in sends if r["mode"] == mode and r["concurrency"] == top]
    cpu_table(f"{mode}, {top} in flight", rows, [r["sends_per_sec"] for r in rows], "send")
for k, rows in pools.items():
    cpu_table(f"tx, pool of {k}", rows, [r["sends_per_sec"] for r in rows], "send")
cpu_table(f"tx, {batched_per_message} orders per message", sends_batched,
          [r["orders_per_sec"] for r in sends_batched], "order")

w(f"## 5. The consumer: draining {params['drain_orders']:,} queued orders into MariaDB")
w("")
w(f"Per round, each on a freshly created database `seckill_bench_drain` (same migrations): "
  f"`seckill-bench publish-orders` queues {params['drain_orders']:,} plain order messages on a topic of "
  f"their own with no consumer running, then `seckill-bench drain` starts the release "
  f"order-consumer-svc (its settings: batch {params['batch_size']}, {params['consumer_concurrency']} at once) "
  "on that topic with a new group and times it from the first order in MySQL to the last "
  "(progress read from the product's stock row, a primary-key read). Then `seckill-bench write-orders` "
  f"writes as many orders with `Db::write_orders` directly — the consumer's own transaction — in "
  f"batches of {params['batch_size']} from {params['consumer_concurrency']} tasks, and "
  f"{params['single_orders']:,} orders one transaction each from as many tasks. The second "
  f"drain queues the same number of orders {params['gateway_per_message']} to a message; the "
  f"consumer still writes at most {params['batch_size']} orders per transaction, the raw "
  "batches' size.")
w("")
w("| figure | median | rounds |")
w("|---|---|---|")
w(f"| order-consumer-svc orders/s | {fmt(drain_med)} | {series([x['orders_per_sec'] for x in drain])} |")
w(f"| — from its start to the first order (s) | {fmt(med([x['start_to_first_order_s'] for x in drain]), 2)} | {series([x['start_to_first_order_s'] for x in drain], 2)} |")
w(f"| — from its start to the last order (s) | {fmt(med([x['total_s'] for x in drain]), 2)} | {series([x['total_s'] for x in drain], 2)} |")
w(f"| order-consumer-svc, the same orders queued {params['gateway_per_message']} to a message (as the gateway sends a crowd's winners), orders/s "
  f"| {fmt(med([x['orders_per_sec'] for x in drain_alt]))} | {series([x['orders_per_sec'] for x in drain_alt])} |")
w(f"| Db::write_orders, batches of {params['batch_size']}, orders/s | {fmt(batched_med)} | {series([x['orders_per_sec'] for x in batched])} |")
w(f"| one transaction per order, orders/s | {fmt(single_med)} | {series([x['orders_per_sec'] for x in single])} |")
w(f"| consumer / raw batched | {fmt(ratio(drain_med, batched_med), 2)} | |")
w(f"| consumer / one per order | {fmt(ratio(drain_med, single_med), 1)} | |")
w(f"| consumer, {params['gateway_per_message']} orders per message / raw batched | {fmt(ratio(drain_alt_med, batched_med), 2)} | |")
w(f"| consumer, {params['gateway_per_message']} orders per message / one per order | {fmt(ratio(drain_alt_med, single_med), 1)} | |")
w(f"| raw batched / one per order | {fmt(ratio(batched_med, single_med), 1)} | |")
publish = [load(f"drain-{r}-publish.json") for r in R]
w(f"| (queueing the backlog: plain sends/s) | {fmt(med([x['sends_per_sec'] for x in publish]))} | {series([x['sends_per_sec'] for x in publish])} |")
w("")

w("How busy each process was, from the first order to the last:")
w("")
cpu_table("consumer drain", drain, [x["orders_per_sec"] for x in drain], "order")
cpu_table(f"consumer drain, {params['gateway_per_message']} orders per message",
          drain_alt, [x["orders_per_sec"] for x in drain_alt], "order")
cpu_table("raw batched", batched, [x["orders_per_sec"] for x in batched], "order")
cpu_table("one per order", single, [x["orders_per_sec"] for x in single], "order")

w("## 6. Gateway memory at 1,000 open connections")
w("")
w("`seckill-bench conns --count 1000`: 1,000 TCP connections, each sends `GET /healthz` with "
  "keep-alive and reads the answer; VmRSS of the gateway is read while all are open, then each "
  "connection asks once more (to show it was still open). Once on the fresh gateway, once after "
  "all the load above.")
w("")
w("| when | RSS before (MiB) | RSS with 1,000 open (MiB) | after a 2nd request on each (MiB) | still open | peak RSS of the process (MiB) | threads |")
w("|---|---|---|---|---|---|---|")
for name, c in (("fresh", conns_fresh), ("after the load", conns_loaded)):
    w(f"| {name} | {c['rss_before_kib'] / 1024:.1f} | {c['rss_open_kib'] / 1024:.1f} | "
      f"{c['rss_after_second_request_kib'] / 1024:.1f} | {c['still_open_after_measure']} | {c['hwm_kib'] / 1024:.1f} "
      f"| {c.get('threads', '–')} |")
w("")

w("### Order-event streams")
w("")
w(f"`seckill-bench streams --orders 100 --count {streams['streams']}`: a product of 100 units is sold to 100 "
  "buyers (each order confirmed), one buyer more is refused `SOLD_OUT` (the gateway's sold-out flag is set), "
  f"then {streams['streams']:,} `GET /api/v1/orders/{{token}}/events` streams are opened over the 100 orders and "
  "held. Every order is then cancelled at once; each stream's delay runs from the cancels being sent to its "
  "`cancelled` event, and the refused buyer tries again until a returned unit sells.")
w("")
w("| streams | opened in (ms) | RSS before (MiB) | RSS open (MiB) | KiB a stream | delivered | missed | ended after the event "
  "| delay p50 / p99 / max (ms) | sold again after (ms) |")
w("|---|---|---|---|---|---|---|---|---|---|")
w(f"| {streams['streams']:,} | {streams['opened_ms']} | {streams['rss_before_kib'] / 1024:.1f} | {streams['rss_open_kib'] / 1024:.1f} "
  f"| {streams['kib_per_stream']:.1f} | {streams['delivered']:,} | {streams['missed']} | {streams['ended_after_final']:,} "
  f"| {fmt(streams['delivery_ms_p50'], 1)} / {fmt(streams['delivery_ms_p99'], 1)} / {fmt(streams['delivery_ms_max'], 1)} "
  f"| {fmt(streams['sold_again_after_ms'], 1)} |")
w("")

w("## 7. A 10,000-unit sale through one gateway")
w("")
w("`sale-sim --buyers 20000 --stock 10000 --concurrency 200`: each buyer a token then a purchase; "
  "from the crowd's first request until MySQL held every accepted order (polled every 100 ms).")
w("")
w("| figure | median | rounds |")
w("|---|---|---|")
w(f"| units/s, first request → last order in MySQL | {fmt(med(units_per_sec))} | {series(units_per_sec)} |")
w(f"| first request → last order (s) | {fmt(med([x['sell_seconds'] for x in sale10k]), 2)} | {series([x['sell_seconds'] for x in sale10k], 2)} |")
w(f"| crowd duration (s) | {fmt(med([x['sale_seconds'] for x in sale10k]), 2)} | {series([x['sale_seconds'] for x in sale10k], 2)} |")
w(f"| accepted / stock | | {pairs(sale10k, 'accepted', 'stock')} |")
w(f"| invariant violations | {sum(len(x['violations']) for x in sale10k)} | |")
w("")

sales = loads("sale-{}.json")
w(f"## 8. Sale through the three services ({params['buyers']:,} buyers, {params['stock']:,} units)")
w("")
w(f"`sale-sim --buyers {params['buyers']} --stock {params['stock']} --concurrency 200`.")
w("")
w("| figure | median | rounds |")
w("|---|---|---|")
w(f"| requests/s over the crowd (tokens + purchases) | {fmt(med([s['requests_per_sec'] for s in sales]))} | {series([s['requests_per_sec'] for s in sales])} |")
w(f"| crowd duration (s) | {fmt(med([s['sale_seconds'] for s in sales]), 2)} | {series([s['sale_seconds'] for s in sales], 2)} |")
w(f"| purchase latency p50 / p99 (ms) | {fmt(med([p(s, 'purchase_latency_ms', 'p50') for s in sales]), 1)} / {fmt(med([p(s, 'purchase_latency_ms', 'p99') for s in sales]), 1)} | |")
w(f"| accepted purchase latency p99 (ms) | {fmt(med([p(s, 'accepted_latency_ms', 'p99') for s in sales]), 1)} | |")
w(f"| time to drain: first purchase → last order in MySQL (s) | {fmt(med([s['drain_seconds'] for s in sales]), 2)} | {series([s['drain_seconds'] for s in sales], 2)} |")
w(f"| accepted / stock | | {pairs(sales, 'accepted', 'stock')} |")
w(f"| invariant violations (all rounds) | {sum(len(s['violations']) for s in sales)} | |")
w("")

w("## 9. Reconcile audit")
w("")
w(f"`deploy/bench/reconcile.sh`: `seckill-bench seed-reconcile --flows {params['flows']}` writes a "
  "consistent, sold-out sale (flows in Redis, orders and stock_flow in MySQL), then "
  "`reconcile-svc --once --product …` runs under `/usr/bin/time`.")
w("")
w("```")
w(reconcile)
w("```")
w("")

w("## 9b. Waiting for a Redis replica (`redis.wait_replicas`)")
w("")
w(open(f"{work}/wait-cost.md").read().rstrip())
w("")

# ------------------------------------------------------------------ profiles
perf_ok = open(f"{work}/perf_ok").read().strip() == "1"
w("## 10. Where the time goes: profiles")
w("")
if not perf_ok:
    w("perf could not record on this machine during the run: no profiles.")
else:
    w("`perf record -F 499 --call-graph dwarf -p <pid>` (cpu-clock: the VM has no hardware counters) "
      "for 8 s during a dedicated run of the load (not one of the measured rounds), folded and "
      "drawn with inferno. Shares are of the process's sampled CPU time, all threads. The SVGs "
      "are interactive (open them in a browser; click to zoom).")
    w("")
    # Each sample goes to the crate of its innermost Rust frame (a frame named path::to::fn)
    # that is not a utility the others all go through (std, core, alloc, hashbrown, bytes):
    # kernel and libc frames below it (syscalls, malloc) count for the crate that called them.
    families = [
        ("async runtime, sockets (tokio, mio; their syscalls)", r"^(tokio|mio|tokio_util)$"),
        ("HTTP server (actix-*)", r"^actix"),
        ("route matching (regex, from actix-router)", r"^regex"),
        ("Redis client (redis, deadpool, combine)", r"^(redis|deadpool|deadpool_redis|combine)$"),
        ("RocketMQ client (rocketmq_*)", r"^rocketmq"),
        ("MySQL client (mysql_async, mysql_common, diesel*)", r"^(mysql_async|mysql_common|diesel|diesel_async)$"),
        ("tracing, spans (tracing*, opentelemetry*)", r"^(tracing|tracing_core|tracing_subscriber|tracing_opentelemetry|opentelemetry|opentelemetry_sdk|sharded_slab)$"),
        ("metrics (metrics*)", r"^metrics"),
        ("JSON (serde_json)", r"^serde_json$"),
        ("token check, rate limits (hmac, sha2, base64, governor)", r"^(hmac|sha2|base64|governor|subtle)$"),
        ("seckill's own crates", r"^(gateway_svc|order_consumer_svc|platform|stock_cache|order_queue|order_store|domain)$"),
        ("thread park / wake-up (parking_lot: blocking-pool and lock hand-offs)", r"^parking_lot"),
        ("log lines (tracing_subscriber fmt, nu_ansi_term)", r"^nu_ansi_term$"),
        ("std, core, alloc (allocation, formatting, hashing)", r"^(std|core|alloc|hashbrown|bytes)$"),
    ]
    transparent = {"std", "core", "alloc", "hashbrown", "bytes"}

    def crate_of(frame):
        m = re.match(r"^[<&]*(?:dyn )?([a-z_][a-z0-9_]*)::", frame)
        return m.group(1) if m else None

    for name, title in (("gateway-purchase", "gateway-svc selling: purchases before sell-out"),
                        ("gateway-reject", "gateway-svc rejecting: after sell-out"),
                        ("consumer-drain", "order-consumer-svc draining the backlog")):
        folded = f"{work}/{name}.folded"
        if not os.path.exists(folded):
            w(f"### {title}: no profile (perf failed)")
            w("")
            continue
        stacks = []
        for line in open(folded):
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack:
                stacks.append((stack.split(";"), int(count)))
        total = sum(c for _, c in stacks) or 1
        w(f"### {title}")
        w("")
        # cpu-clock samples are weighted by their period in ns: the total is CPU time.
        wall = "its whole life (start-up, drain, stop)" if name == "consumer-drain" else "8 s"
        w(f"[{params['svg_dir']}/{name}.svg]({params['svg_dir']}/{name}.svg) — {total / 1e9:.2f} s of CPU "
          f"sampled over {wall}.")
        w("")
        threads = {}
        for frames, count in stacks:
            thread = re.sub(r"[-_:|]?\d+$", "", frames[0])
            threads[thread] = threads.get(thread, 0) + count
        w("| thread (by name) | share |")
        w("|---|---|")
        for thread, count in sorted(threads.items(), key=lambda kv: -kv[1])[:8]:
            w(f"| `{thread}` | {100 * count / total:.1f} % |")
        w("")
        by_family, by_crate, unattributed = {}, {}, 0
        for frames, count in stacks:
            crates = [c for c in map(crate_of, reversed(frames)) if c]
            crate = next((c for c in crates if c not in transparent), crates[0] if crates else None)
            if crate is None:
                unattributed += count
                continue
            by_crate[crate] = by_crate.get(crate, 0) + count
            family = next((label for label, rx in families if re.search(rx, crate)), f"other: {crate}")
            by_family[family] = by_family.get(family, 0) + count
        w("| where the CPU went (innermost Rust crate of each sample) | share |")
        w("|---|---|")
        for family, count in sorted(by_family.items(), key=lambda kv: -kv[1])[:12]:
            w(f"| {family} | {100 * count / total:.1f} % |")
        if unattributed:
            w(f"| no Rust frame (kernel or libc only) | {100 * unattributed / total:.1f} % |")
        w("")
        leaves = {}
        for frames, count in stacks:
            leaf = re.sub(r"::h[0-9a-f]{16}$", "", frames[-1])
            leaves[leaf] = leaves.get(leaf, 0) + count
        w("| hottest functions (self time) | share |")
        w("|---|---|")
        for leaf, count in sorted(leaves.items(), key=lambda kv: -kv[1])[:10]:
            w(f"| `{leaf[:110]}` | {100 * count / total:.1f} % |")
        w("")

analysis = os.path.join(os.path.dirname(os.path.abspath(__file__)), "analysis.md")
if os.path.exists(analysis):
    w(open(analysis).read().rstrip())
    w("")

open(out, "w").write("\n".join(lines).rstrip("\n") + "\n")
print(f"bench: wrote {out}", file=sys.stderr)
