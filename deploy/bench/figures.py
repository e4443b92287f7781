"""Helpers of the bench reports (report.py, cost_report.py) and of cost.sh's steps: medians,
number formats, and the figures read from the load tools' outputs and the services'
metrics."""

import csv
import re
import statistics


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=0):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def series(values, digits=0):
    return ", ".join(fmt(v, digits) for v in values)


def holds(ok):
    if ok is None:
        return "not measured"
    return "**holds**" if ok else "**missed**"


def ratio(a, b):
    return a / b if a is not None and b else None


def wrk(path):
    """Requests/s, total requests, connections, non-2xx count and latency percentiles of one
    wrk run."""
    text = open(path).read()
    result = {"rps": None, "requests": None, "connections": None, "non2xx": 0, "errors": None,
              "p50": None, "p99": None}
    if m := re.search(r"(\d+) connections", text):
        result["connections"] = int(m.group(1))
    if m := re.search(r"Requests/sec:\s+([\d.]+)", text):
        result["rps"] = float(m.group(1))
    if m := re.search(r"(\d+) requests in", text):
        result["requests"] = int(m.group(1))
    if m := re.search(r"Non-2xx or 3xx responses: (\d+)", text):
        result["non2xx"] = int(m.group(1))
    if m := re.search(r"Socket errors: (.*)", text):
        result["errors"] = m.group(1).strip()
    for p in ("50", "99"):
        if m := re.search(rf"^\s+{p}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", text, re.M):
            value, unit = float(m.group(1)), m.group(2)
            result[f"p{p}"] = value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    return result


def redis_benchmark(path):
    rows = list(csv.DictReader(open(path)))
    row = rows[-1]
    return {"rps": float(row["rps"]), "p50": float(row.get("p50_latency_ms", "nan")),
            "p99": float(row.get("p99_latency_ms", "nan"))}


def cpu_us(record, process, operations):
    """µs of `process`'s CPU per operation over the window `record` covers."""
    cores = (record.get("cores") or {}).get(process)
    seconds = record.get("wall_s")
    return cores * seconds * 1e6 / operations if cores is not None and seconds and operations else None


def per_op(record, kind, process, operations):
    """`kind` (switches, syscalls: per second) of `process` per operation."""
    rate = (record.get(kind) or {}).get(process)
    seconds = record.get("wall_s")
    return rate * seconds / operations if rate is not None and seconds and operations else None


def commandstats(path):
    """{command: (calls, µs in the command)} from INFO commandstats."""
    stats = {}
    for m in re.finditer(r"^cmdstat_(\S+?):calls=(\d+),usec=(\d+)", open(path).read(), re.M):
        stats[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return stats


def metric_growth(before_path, after_path, name):
    """How much the Prometheus sample NAME (with its labels, if any) grew between two scrapes
    of /metrics; a sample absent from a scrape counts as 0."""
    values = []
    for path in (before_path, after_path):
        found = re.search(rf"^{re.escape(name)} (\S+)$", open(path).read(), re.M)
        values.append(float(found.group(1)) if found else 0.0)
    return values[1] - values[0]
