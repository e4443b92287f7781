#!/usr/bin/env python3
"""The figures of deploy/bench/ab-cost.sh, from the files it left in its work folder: each
side's sale and token path, round by round, then the medians and after / before.

Usage: ab_cost_report.py WORK_DIR ROUNDS
"""

import json
import sys

from figures import commandstats, cpu_us, fmt, med, ratio, series, wrk

work, rounds = sys.argv[1], int(sys.argv[2])
PARTS = ["gateway", "redis", "broker", "consumer", "mariadb"]


def side_figures(side, r):
    sale = json.load(open(f"{work}/{side}-{r}.json"))
    cpu = json.load(open(f"{work}/{side}-{r}.cpu.json"))
    sold = sale["accepted"]
    before = commandstats(f"{work}/{side}-{r}.commands-before")
    after = commandstats(f"{work}/{side}-{r}.commands-after")
    commands = sum(calls - before.get(c, (0, 0))[0] for c, (calls, _) in after.items() if c != "info")
    tokens = wrk(f"{work}/{side}-{r}.tokens.txt")
    tokens_cpu = json.load(open(f"{work}/{side}-{r}.tokens.cpu.json"))
    parts = [cpu_us(cpu, p, sold) for p in PARTS]
    return {
        "system per sold unit (µs)": sum(p or 0 for p in parts),
        "gateway per sold unit (µs)": parts[0],
        "Redis per sold unit (µs)": parts[1],
        "Redis commands per sold unit": commands / sold if sold else None,
        "units/s, first request to last order": sold / sale["sell_seconds"] if sale.get("sell_seconds") else None,
        "tokens/s (wrk)": tokens["rps"],
        "gateway per token (µs)": cpu_us(tokens_cpu, "gateway", tokens["requests"]),
        "Redis per token (µs)": cpu_us(tokens_cpu, "redis", tokens["requests"]),
    }


figures = {side: [side_figures(side, r) for r in range(1, rounds + 1)] for side in ("before", "after")}
print("| figure | before (median; rounds) | after (median; rounds) | after / before |")
print("|---|---|---|---|")
for name in figures["before"][0]:
    b = [f[name] for f in figures["before"]]
    a = [f[name] for f in figures["after"]]
    digits = 2 if "commands" in name else 1 if "µs" in name else 0
    print(f"| {name} | {fmt(med(b), digits)} ({series(b, digits)}) | {fmt(med(a), digits)} "
          f"({series(a, digits)}) | {fmt(ratio(med(a), med(b)), 2)} |")
