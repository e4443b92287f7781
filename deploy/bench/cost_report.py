#!/usr/bin/env python3
"""The Markdown of deploy/bench/cost.sh, from the files it left in its work folder, and the
latency curve as an SVG.

Usage: cost_report.py WORK_DIR ROUNDS "LEVELS" SVG_PATH. Every figure comes from those
files. CPU per operation is a process's CPU seconds over a window (cores busy × the window)
divided by the operations in it; figures are medians over the rounds, each round listed; a
ratio is the ratio of two medians.
"""

import glob
import json
import os
import re
import sys

from figures import commandstats, cpu_us, fmt, holds, med, metric_growth, per_op, ratio, series, wrk

work, rounds, levels, svg_path = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
# Named from where the report is read (the repository, for make bench), else by its name.
shown_svg = os.path.relpath(svg_path)
if shown_svg.startswith(".."):
    shown_svg = os.path.basename(svg_path)
R = range(1, rounds + 1)
# The processes of the system, in the order of a purchase; the load tool ("self" in the
# CPU records) is shown apart and never in a total.
PARTS = ["gateway", "redis", "broker", "consumer", "mariadb"]


def load(name):
    return json.load(open(f"{work}/{name}"))


# ------------------------------------------------------------------------- the sale
sales = [load(f"sale-{r}.json") for r in R]
sale_cpu = [load(f"sale-{r}.cpu.json") for r in R]
sold = [s["accepted"] for s in sales]
unit_cost = {p: [cpu_us(c, p, n) for c, n in zip(sale_cpu, sold)] for p in PARTS + ["self"]}
total_rounds = [sum(unit_cost[p][i] or 0 for p in PARTS) for i in range(rounds)]
units_per_sec = [s["accepted"] / s["sell_seconds"] if s.get("sell_seconds") else None for s in sales]

# ------------------------------------------------------------------------- the floors
lua_cpu = [load(f"lua-{r}.cpu.json") for r in R]
lua_calls = [int(open(f"{work}/lua-{r}.reserved").read()) for r in R]
redis_floor = [cpu_us(c, "redis", n) for c, n in zip(lua_cpu, lua_calls)]

dup = [wrk(f"{work}/dup-{r}.txt") for r in R]
dup_cpu = [load(f"dup-{r}.txt.cpu.json") for r in R]
dup_floor = [cpu_us(c, "gateway", d["requests"]) for c, d in zip(dup_cpu, dup)]
tokens = [wrk(f"{work}/tokens-{r}.txt") for r in R]
token_cpu = [load(f"tokens-{r}.txt.cpu.json") for r in R]
token_floor = [cpu_us(c, "gateway", t["requests"]) for c, t in zip(token_cpu, tokens)]

closed_runs = [load(f"closed-{r}.json") for r in R]

per_message = int(open(f"{work}/per-message").read())
sends = [json.loads(line) for line in open(f"{work}/sends.jsonl") if line.strip()]


def broker_per_order(mode, in_flight=16):
    """The broker's CPU per order in each round's sends of MODE (`plain` or `tx`) with
    IN_FLIGHT sends at once; each record covers its measured window (`seconds`) with `cores`
    over it."""
    return [s["cores"]["broker"] * 1e6 / s["orders_per_sec"] if s.get("orders_per_sec") else None
            for s in sends if s["mode"] == mode and s["concurrency"] == in_flight]


broker_floor = broker_per_order("plain")
# Not a floor: what a transactional message of the same size costs the broker (half message,
# END_TRANSACTION, the commit's second write), the part of the broker's ratio a sale cannot
# avoid by sending less.
broker_tx = broker_per_order("tx")
writes = [load(f"writes-{r}.json") for r in R]
mariadb_floor = [w["cores"].get("mariadb") * 1e6 / w["orders_per_sec"] for w in writes]
consumer_floor = [w["cores"].get("self") * 1e6 / w["orders_per_sec"] for w in writes]

floor = {
    "gateway": med([d + t if d is not None and t is not None else None for d, t in zip(dup_floor, token_floor)]),
    "redis": med(redis_floor),
    "broker": med(broker_floor),
    "consumer": med(consumer_floor),
    "mariadb": med(mariadb_floor),
}
floor_total = sum(v for v in floor.values() if v is not None)
total = med(total_rounds)

out = []
w = out.append
w(f"`deploy/bench/cost.sh` (ROUNDS={rounds}). The sale: `sale-sim --buyers {sales[0]['stock']} "
  f"--stock {sales[0]['stock']} --concurrency 200`, every buyer a token then a purchase, so "
  "that the stock sells out and every unit sold took the winner's whole path; its CPU runs "
  "from the first request to the last order in MySQL. The load tool (sale-sim, or the "
  "floor's own client) is shown apart and left out of every total.")
w("")
w("| process | CPU per sold unit (µs) | rounds | its floor (µs) | measured as | ratio |")
w("|---|---|---|---|---|---|")
floor_how = {
    "gateway": "token path + DUPLICATE path, CPU per request each (wrk)",
    "redis": "EVALSHA pre_deduct.lua under redis-benchmark, CPU per call",
    "broker": f"plain sends of {per_message} orders a message (the sales' mean), CPU per order",
    "consumer": "the client of Db::write_orders (the consumer's own transaction), CPU per order",
    "mariadb": "MariaDB under those batched writes, CPU per order",
}
for p in PARTS:
    cost = med(unit_cost[p])
    w(f"| {p} | {fmt(cost)} | {series(unit_cost[p])} | {fmt(floor[p])} | {floor_how[p]} | "
      f"{fmt(ratio(cost, floor[p]), 2)} |")
w(f"| **the system** | **{fmt(total)}** | {series(total_rounds)} | **{fmt(floor_total)}** | the sum of the floors | "
  f"**{fmt(ratio(total, floor_total), 2)}** |")
w(f"| the load tool (not in the total) | {fmt(med(unit_cost['self']))} | {series(unit_cost['self'])} | | | |")
w("")
w(f"Units sold a second per core of the system: {fmt(ratio(1e6, total))} "
  f"(1 s / {fmt(total)} µs). The sale itself: {fmt(med(units_per_sec))} units/s from the first "
  f"request to the last order in MySQL (rounds {series(units_per_sec)}; "
  f"sold {', '.join(f'{n:,}' for n in sold)}; "
  f"invariant violations {sum(len(s['violations']) for s in sales)}).")
w("")


def counted(r, side, name):
    """How much NAME grew over sale R in SIDE's metrics (gateway: metrics, consumer: consumer)."""
    return metric_growth(f"{work}/sale-{r}.{side}-before", f"{work}/sale-{r}.{side}-after", name)


per_message_rounds = [ratio(counted(r, "metrics", "seckill_orders_per_message_sum"),
                            counted(r, "metrics", "seckill_orders_per_message_count")) for r in R]
per_batch_rounds = [ratio(counted(r, "consumer", "seckill_orders_written_total"),
                          counted(r, "consumer", "seckill_consumer_batch_size_count")) for r in R]
w(f"How the orders travelled in the sales: {series(per_message_rounds, 1)} orders per "
  f"transactional message, {series(per_batch_rounds, 1)} orders per consumer batch (one MySQL "
  "transaction, one mark_confirmed call, one deadline message each), by round.")
w("")

w("| floor | rounds (µs) |")
w("|---|---|")
w(f"| gateway, DUPLICATE path, per request | {series(dup_floor, 1)} ({series([d['rps'] for d in dup])} requests/s) |")
w(f"| gateway, token path, per request | {series(token_floor, 1)} ({series([t['rps'] for t in tokens])} requests/s) |")
w(f"| Redis, per EVALSHA | {series(redis_floor, 1)} ({', '.join(f'{n:,}' for n in lua_calls)} calls, every one reserving) |")
w(f"| broker, per order in plain sends of {per_message} | {series(broker_floor, 1)} |")
if broker_tx:
    w(f"| (not a floor) broker, per order in transactional sends of {per_message}, the same "
      f"client, committed at once | {series(broker_tx, 1)}: {fmt(ratio(med(broker_tx), floor['broker']), 2)} "
      "times the plain sends |")
w(f"| consumer's client, per order written | {series(consumer_floor, 1)} |")
w(f"| MariaDB, per order written | {series(mariadb_floor, 1)} |")
w("")

# ------------------------------------------------------------------------- short of saturation
# Each floor is its part at saturation, where a wake-up serves many requests. The same work
# with fewer requests at once, measured in the same run, says how much of a ratio is that.
sparse_conns = sorted(int(m.group(1)) for m in
                      (re.search(r"dup-c(\d+)-1\.txt$", f) for f in glob.glob(f"{work}/dup-c*-1.txt")) if m)
if sparse_conns:
    w("What the same work costs when fewer requests arrive at once (not floors: each floor above is "
      "its part at saturation). The DUPLICATE path under wrk with fewer connections, right after "
      "the floor's run in each round, and the broker's transactional sends with fewer in flight. "
      "A machine shared with others drifts between rounds, so each ratio is the median of the "
      "rounds' own ratios to their floor:")
    w("")
    w("| part, work | at once | CPU per request or order (µs), median (rounds) | / its floor, median of the rounds' |")
    w("|---|---|---|---|")

    def row(what, at_once, values, floors):
        per_round = [ratio(v, f) for v, f in zip(values, floors)]
        w(f"| {what} | {at_once} | {fmt(med(values), 1)} ({series(values, 1)}) | "
          f"{fmt(med(per_round), 2)} ({series(per_round, 2)}) |")

    sparse = {}
    for conns in sparse_conns:
        runs = [wrk(f"{work}/dup-c{conns}-{r}.txt") for r in R]
        cpu = [load(f"dup-c{conns}-{r}.txt.cpu.json") for r in R]
        sparse[conns] = [(cpu_us(c, "gateway", d["requests"]), cpu_us(c, "redis", d["requests"]))
                         for c, d in zip(cpu, runs)]
    for conns in sparse_conns:
        row("gateway, DUPLICATE path", f"{conns} connections", [g for g, _ in sparse[conns]], dup_floor)
    row("gateway, DUPLICATE path (its floor)", f"{dup[0]['connections']} connections", dup_floor, dup_floor)
    # A refused pre_deduct is cheaper than the floor's reserving one: Redis is held to its own
    # cost in the floor's DUPLICATE run instead.
    redis_dup = [cpu_us(c, "redis", d["requests"]) for c, d in zip(dup_cpu, dup)]
    for conns in sparse_conns:
        row("Redis, a DUPLICATE request's pre_deduct", f"{conns} connections",
            [r for _, r in sparse[conns]], redis_dup)
    row("Redis, a DUPLICATE request's pre_deduct", f"{dup[0]['connections']} connections",
        redis_dup, redis_dup)
    for in_flight in (1, 4, 16):
        tx = broker_per_order("tx", in_flight)
        if tx:
            row(f"broker, transactional sends of {per_message}, per order", f"{in_flight} in flight",
                tx, broker_floor)
    sale_request = [c / 2 if c is not None else None for c in unit_cost["gateway"]]
    row("gateway, in the sale (a token and a purchase per sold unit), per request", "200 buyers",
        sale_request, dup_floor)
    # The closed loop keeps as many purchases at once as the floor has connections, and
    # issues every token before the first purchase: what is left above the floor there is
    # the winner's own work (its share of the message), not how sparsely requests arrive.
    closed_request = [cpu_us(load(f"closed-{r}.cpu.json"), "gateway", 2 * run["accepted"])
                      for r, run in zip(R, closed_runs)]
    row("gateway, the closed loop (every token, then every purchase), per request", "64 buyers",
        closed_request, dup_floor)
    w("")

# ------------------------------------------------------------------------- what a sold unit asks of Redis
w("What a sold unit asked of Redis in the sales (`INFO commandstats`, the difference over each "
  "sale, per unit sold). Redis counts the commands a script calls as well as the script, and "
  "an EVALSHA's time includes theirs: the clients' own round trips are the EVALSHAs (pre_deduct "
  "per buyer; confirm and mark_confirmed once per message or batch) and one HMGET per token "
  "issued. `µs in` is Redis's time inside the command; the rest of its CPU is reading, "
  "parsing and answering:")
w("")
w("| command | calls per sold unit | µs in the command per sold unit |")
w("|---|---|---|")
deltas = []
for r, n in zip(R, sold):
    before = commandstats(f"{work}/sale-{r}.commands-before")
    after = commandstats(f"{work}/sale-{r}.commands-after")
    deltas.append({c: (calls - before.get(c, (0, 0))[0], usec - before.get(c, (0, 0))[1], n)
                   for c, (calls, usec) in after.items()})
commands = sorted({c for d in deltas for c in d if d[c][0] > 0 and c != "info"},
                  key=lambda c: -med([d.get(c, (0, 0, 1))[0] / d.get(c, (0, 0, 1))[2] for d in deltas]))
calls_total = []
for c in commands:
    calls = med([d[c][0] / d[c][2] if c in d else 0 for d in deltas])
    usec = med([d[c][1] / d[c][2] if c in d else 0 for d in deltas])
    w(f"| {c} | {fmt(calls, 2)} | {fmt(usec, 1)} |")
for d in deltas:
    calls_total.append(sum(v[0] / v[2] for c, v in d.items() if c != "info"))
scripts = med([sum(v[1] / v[2] for c, v in d.items() if c.startswith("eval")) for d in deltas])
w(f"| **all, the scripts' own commands included** | **{fmt(med(calls_total), 2)}** | "
  f"**{fmt(scripts, 1)}** in the scripts, of Redis's {fmt(med(unit_cost['redis']))} µs of CPU |")
w("")
w("Read and write system calls (`/proc/PID/io` syscr + syscw) and context switches per sold unit:")
w("")
w("| process | read/write syscalls per sold unit | context switches per sold unit |")
w("|---|---|---|")
for p in PARTS:
    w(f"| {p} | {fmt(med([per_op(c, 'syscalls', p, n) for c, n in zip(sale_cpu, sold)]), 1)} | "
      f"{fmt(med([per_op(c, 'switches', p, n) for c, n in zip(sale_cpu, sold)]), 1)} |")
w("")

# ------------------------------------------------------------------------- the latency curve
closed = [run["purchases_per_sec"] for run in closed_runs]
closed_rate = int(open(f"{work}/closed-rate").read())
w(f"The latency curve: the closed-loop purchase rate (`sale-sim --tokens-first --concurrency 64`, "
  f"every purchase a winner) was {fmt(closed_rate)}/s (median of {series(closed)}); then "
  "`sale-sim --rate R` at each share of it, open loop, every purchase leaving at its "
  "scheduled moment and its latency counted from that moment (no coordinated omission). "
  f"Drawn in `{shown_svg}`.")
w("")
w("| share of the closed-loop rate | purchases/s asked | achieved | p50 (ms) | p99 (ms) | p99.9 (ms) | p99 rounds (ms) |")
w("|---|---|---|---|---|---|---|")
curve = []
for level in levels:
    runs = [load(f"curve-{level}-{r}.json") for r in R]
    lat = [x.get("purchase_latency_ms") or {} for x in runs]
    point = {
        "level": int(level),
        "asked": med([x.get("target_rate") for x in runs]),
        "achieved": med([x.get("purchases_per_sec") for x in runs]),
        "p50": med([l.get("p50") for l in lat]),
        "p99": med([l.get("p99") for l in lat]),
        "p999": med([l.get("p999") for l in lat]),
    }
    curve.append(point)
    w(f"| {level} % | {fmt(point['asked'])} | {fmt(point['achieved'])} | {fmt(point['p50'], 1)} | "
      f"{fmt(point['p99'], 1)} | {fmt(point['p999'], 1)} | {series([l.get('p99') for l in lat], 1)} |")
w("")


def at(level, key):
    return next((p[key] for p in curve if p["level"] == level), None)


paused_levels = sorted({int(os.path.basename(f).split("-")[1]) for f in glob.glob(f"{work}/paused-*-1.json")})
paused = {}
if paused_levels:
    w("The same rates with the write path paused (order-consumer-svc stopped, the orders waiting "
      "in the broker, written once it is back): the purchase path's own tail, as with the "
      "consumers and MySQL on other nodes.")
    w("")
    w("| share of the closed-loop rate | purchases/s asked | p50 (ms) | p99 (ms) | p99.9 (ms) | p99 rounds (ms) |")
    w("|---|---|---|---|---|---|")
    for level in paused_levels:
        runs = [load(f"paused-{level}-{r}.json") for r in R]
        lat = [x.get("purchase_latency_ms") or {} for x in runs]
        paused[level] = med([l.get("p99") for l in lat])
        w(f"| {level} % | {fmt(med([x.get('target_rate') for x in runs]))} | "
          f"{fmt(med([l.get('p50') for l in lat]), 1)} | {fmt(paused[level], 1)} | "
          f"{fmt(med([l.get('p999') for l in lat]), 1)} | {series([l.get('p99') for l in lat], 1)} |")
    w("")


w("| target (issue: CPU per sold unit, re-based) | measured | target | |")
w("|---|---|---|---|")
w(f"| the system's CPU per sold unit / the sum of the floors | {fmt(ratio(total, floor_total), 2)} | ≤ 1.5 | "
  f"{holds(ratio(total, floor_total) <= 1.5 if total and floor_total else None)} |")
redis_ratio = ratio(med(unit_cost["redis"]), floor["redis"])
w(f"| Redis per sold unit / per EVALSHA | {fmt(redis_ratio, 2)} | ≤ 2 | {holds(redis_ratio <= 2 if redis_ratio else None)} |")
gateway_ratio = ratio(med(unit_cost["gateway"]), 2 * med(dup_floor) if med(dup_floor) else None)
w(f"| gateway per sold unit / 2 × its DUPLICATE path per request | {fmt(gateway_ratio, 2)} | ≤ 1.3 | "
  f"{holds(gateway_ratio <= 1.3 if gateway_ratio else None)} |")
for level, target in ((25, 10), (50, 20)):
    value = at(level, "p99")
    w(f"| p99 at {level} % of the closed-loop rate (ms) | {fmt(value, 1)} | < {target} | "
      f"{holds(value < target if value is not None else None)} |")
    if level in paused:
        w(f"| — the same, the write path paused (ms) | {fmt(paused[level], 1)} | < {target} | "
          f"{holds(paused[level] < target if paused[level] is not None else None)} |")
w(f"| {sales[0]['stock']:,}-unit sale, first request → last order in MySQL (units/s) | "
  f"{fmt(med(units_per_sec))} | ≥ 9,000 | {holds(med(units_per_sec) >= 9000 if med(units_per_sec) else None)} |")
print("\n".join(out))


# ------------------------------------------------------------------------- the SVG
def draw(points, path, closed_rate):
    """p50, p99 and p99.9 against the share of the closed-loop rate, latency on a log scale."""
    import math

    width, height, left, right, top, bottom = 720, 420, 70, 150, 40, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [p[k] for p in points for k in ("p50", "p99", "p999") if p[k]]
    low = 10 ** math.floor(math.log10(min(values)))
    high = 10 ** math.ceil(math.log10(max(values)))
    x = lambda level: left + plot_w * level / 100
    y = lambda ms: top + plot_h * (1 - (math.log10(ms) - math.log10(low)) / (math.log10(high) - math.log10(low)))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="22" font-size="14">Purchase latency, open loop, against the offered rate '
             f'(share of {closed_rate:,}/s)</text>']
    decade = low
    while decade <= high:
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(decade):.1f}" y2="{y(decade):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 8}" y="{y(decade) + 4:.1f}" text-anchor="end">{decade:g} ms</text>')
        decade *= 10
    for level in range(0, 101, 10):
        parts.append(f'<line x1="{x(level):.1f}" x2="{x(level):.1f}" y1="{top}" y2="{top + plot_h}" stroke="#eee"/>')
        parts.append(f'<text x="{x(level):.1f}" y="{top + plot_h + 18}" text-anchor="middle">{level} %</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">'
                 'purchases/s asked, as a share of the closed-loop rate</text>')
    for i, (key, label, colour) in enumerate((("p50", "p50", "#1b9e77"), ("p99", "p99", "#d95f02"),
                                              ("p999", "p99.9", "#7570b3"))):
        shown = [p for p in points if p[key]]
        line = " ".join(f"{x(p['level']):.1f},{y(p[key]):.1f}" for p in shown)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in shown:
            parts.append(f'<circle cx="{x(p["level"]):.1f}" cy="{y(p[key]):.1f}" r="3" fill="{colour}">'
                         f'<title>{label} at {p["level"]} %: {p[key]:.1f} ms</title></circle>')
        legend_y = top + 20 + 20 * i
        parts.append(f'<line x1="{left + plot_w + 20}" x2="{left + plot_w + 45}" y1="{legend_y}" '
                     f'y2="{legend_y}" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{left + plot_w + 52}" y="{legend_y + 4}">{label}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


if any(p["p99"] for p in curve):
    draw(curve, svg_path, closed_rate)
