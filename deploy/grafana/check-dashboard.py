#!/usr/bin/env python3
"""Checks the Grafana dashboards in deploy/grafana/ (run by `make lint-observability`).

- The JSON parses and has what Grafana needs to import it: uid, title, schemaVersion,
  panels, templating; unique panel ids; grid positions inside the 24 columns.
- Every query panel has targets with a refId (unique in the panel), an expr, and the
  dashboard's datasource variable; every $variable a query uses is defined.
- Every expr is valid PromQL: with promtool on the PATH, the exprs (Grafana's variables
  replaced by sample values) are written as recording rules and `promtool check rules`
  parses them.
- The sale dashboard covers what it is for: requests and outcomes per second, stock per
  product in Redis and MySQL, p99 latencies, the consumer's throughput and lag, reconcile;
  after the sale, payments, cancels and expiries, units returned, refunds due, time to
  pay, expiry lag and open watchers.

Usage: check-dashboard.py [DASHBOARD.json...]   (default: deploy/grafana/*.json)
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
}
PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "bargauge", "table", "text", "heatmap", "barchart"}
# What the sale dashboard must show (issue: observability, point 4).
SALE_DASHBOARD_NEEDS = {
    "requests per second": r"rate\(seckill_http_requests_total",
    "outcomes per second": r"rate\(seckill_purchases_total",
    "stock in Redis and MySQL": r"seckill_stock_left",
    "p99 latency": r"histogram_quantile\(0\.99, .*_seconds_bucket",
    "consumer throughput": r"seckill_orders_written_total",
    "consumer lag": r"seckill_consumer_order_age_seconds_bucket",
    "reconcile results": r"seckill_reconcile_discrepancies_total",
    "reconcile repairs": r"seckill_reconcile_repairs_total",
    "stock drift": r"seckill_reconcile_drift_units",
    # After the sale: the order lifecycle (payment window, cancel, expiry, payments).
    "payments by outcome": r"sum by \(outcome\) \(rate\(seckill_payments_total",
    "orders ended unpaid": r"seckill_orders_ended_total",
    "units returned": r"seckill_units_returned_total",
    "refunds due": r"seckill_refunds_due",
    "time to pay p50": r"histogram_quantile\(0\.5, .*seckill_time_to_pay_seconds_bucket",
    "time to pay p99": r"histogram_quantile\(0\.99, .*seckill_time_to_pay_seconds_bucket",
    "expiry lag p99": r"histogram_quantile\(0\.99, .*seckill_expiry_lag_seconds_bucket",
    "open watchers": r"seckill_order_watchers",
}


def fail(errors, path, message):
    errors.append(f"{path}: {message}")


def check_dashboard(path, errors, exprs):
    try:
        with open(path, encoding="utf-8") as f:
            dashboard = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(errors, path, f"not valid JSON: {e}")
        return
    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        if key not in dashboard:
            fail(errors, path, f"missing top-level key {key!r}")
    if not isinstance(dashboard.get("panels"), list) or not dashboard["panels"]:
        fail(errors, path, "no panels")
        return
    variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        fail(errors, path, "no `datasource` variable: the dashboard must not pin a datasource uid")

    ids = set()
    all_exprs = []
    for panel in dashboard["panels"]:
        title = panel.get("title") or f"panel {panel.get('id')}"
        where = f"{path} [{title}]"
        pid = panel.get("id")
        if not isinstance(pid, int) or pid in ids:
            fail(errors, where, f"panel id {pid!r} is missing or repeated")
        ids.add(pid)
        if panel.get("type") not in PANEL_TYPES:
            fail(errors, where, f"unknown panel type {panel.get('type')!r}")
        if not panel.get("title"):
            fail(errors, where, "a panel without a title")
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")):
            fail(errors, where, f"gridPos needs integer h, w, x, y: {grid}")
        elif grid["x"] < 0 or grid["w"] < 1 or grid["x"] + grid["w"] > 24:
            fail(errors, where, f"gridPos outside the 24 columns: {grid}")
        if panel.get("type") in ("row", "text"):
            continue
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            fail(errors, where, "the panel's datasource is not ${datasource}")
        targets = panel.get("targets") or []
        if not targets:
            fail(errors, where, "a query panel without targets")
        refs = [t.get("refId") for t in targets]
        if None in refs or len(set(refs)) != len(refs):
            fail(errors, where, f"refIds missing or repeated: {refs}")
        for target in targets:
            expr = target.get("expr", "")
            if not expr.strip():
                fail(errors, where, "a target without an expr")
                continue
            for used in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expr):
                if f"${used}" not in GRAFANA_VARIABLES and used not in variables:
                    fail(errors, where, f"${used} is not a dashboard variable")
            all_exprs.append(expr)
            exprs.append((where, expr))

    if os.path.basename(path) == "seckill-sale.json":
        text = "\n".join(all_exprs)
        for need, pattern in SALE_DASHBOARD_NEEDS.items():
            if not re.search(pattern, text):
                fail(errors, path, f"shows no {need} (no query matches /{pattern}/)")


def substitute(expr):
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    expr = re.sub(r"\$\{?product\}?", ".*", expr)
    return expr


def check_promql(exprs, errors):
    """Valid PromQL, as promtool parses recording rules."""
    promtool = shutil.which("promtool")
    if promtool is None:
        print("check-dashboard: promtool not found; PromQL syntax not checked", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        rules = os.path.join(tmp, "dashboard-queries.yml")
        with open(rules, "w", encoding="utf-8") as f:
            f.write("groups:\n  - name: dashboard_queries\n    rules:\n")
            for i, (_, expr) in enumerate(exprs):
                f.write(f"      - record: dashboard:query_{i}\n")
                f.write(f"        expr: {json.dumps(substitute(expr))}\n")
        result = subprocess.run([promtool, "check", "rules", rules], capture_output=True, text=True)
        if result.returncode != 0:
            detail = (result.stdout + result.stderr).strip()
            for i in sorted({int(n) for n in re.findall(r"dashboard:query_(\d+)", detail)}):
                where, expr = exprs[i]
                fail(errors, where, f"invalid PromQL: {expr}")
            fail(errors, "promtool", detail)


def main():
    paths = sys.argv[1:] or sorted(glob.glob(os.path.join(os.path.dirname(__file__), "*.json")))
    if not paths:
        print("check-dashboard: no dashboards found", file=sys.stderr)
        return 1
    errors, exprs = [], []
    for path in paths:
        check_dashboard(path, errors, exprs)
    check_promql(exprs, errors)
    for error in errors:
        print(f"check-dashboard: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"check-dashboard: {len(paths)} dashboard(s), {len(exprs)} queries: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
