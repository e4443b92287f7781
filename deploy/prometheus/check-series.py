#!/usr/bin/env python3
"""Keeps the series names of the code, the dashboards and the alert rules in step
(run by `make lint-observability`).

- Every series the services emit (a "seckill_…" name passed to a metrics macro in
  crates/*/src) is listed in platform::ops::SERIES, with its HELP text, and every listed
  series is emitted somewhere.
- Every seckill_* series the dashboards (deploy/grafana/*.json) and the rules
  (deploy/prometheus/*.yml) read exists (histograms also as _bucket, _sum, _count).
- Names follow the Prometheus conventions: counters end in _total, durations in _seconds.

Run from the repository root.
"""

import glob
import re
import sys

SERIES_FILE = "crates/platform/src/ops.rs"
NAME = r"seckill_[a-z0-9_]+"


def listed_series():
    text = open(SERIES_FILE, encoding="utf-8").read()
    block = text[text.index("pub const SERIES"):]
    block = block[: block.index("];")]
    return dict(re.findall(rf'\(\s*"({NAME})",\s*"([^"]+)"', block))


def emitted_series():
    """Names given to metrics macros (counter!, gauge!, histogram!) in the services."""
    emitted = {}
    for path in glob.glob("crates/*/src/**/*.rs", recursive=True):
        text = open(path, encoding="utf-8").read()
        for match in re.finditer(rf'(counter|gauge|histogram)!\(\s*"({NAME})"', text):
            emitted.setdefault(match.group(2), set()).add((match.group(1), path))
    return emitted


def referenced_series():
    referenced = {}
    for path in sorted(glob.glob("deploy/grafana/*.json") + glob.glob("deploy/prometheus/*.yml")):
        for name in re.findall(NAME, open(path, encoding="utf-8").read()):
            referenced.setdefault(name, set()).add(path)
    return referenced


def main():
    errors = []
    listed = listed_series()
    emitted = emitted_series()
    for name, sites in sorted(emitted.items()):
        if name not in listed:
            errors.append(f"{name} is emitted ({sorted(p for _, p in sites)}) but not listed in {SERIES_FILE}")
        kinds = {kind for kind, _ in sites}
        if "counter" in kinds and not name.endswith("_total"):
            errors.append(f"counter {name} does not end in _total")
        if name.endswith("_total") and kinds != {"counter"}:
            errors.append(f"{name} ends in _total but is a {sorted(kinds)}")
    for name in sorted(listed):
        if name not in emitted:
            errors.append(f"{name} is listed in {SERIES_FILE} but never emitted")
    histograms = {n for n, sites in emitted.items() if any(k == "histogram" for k, _ in sites)}
    known = set(listed)
    for name in histograms:
        known |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    for name, paths in sorted(referenced_series().items()):
        if name not in known:
            errors.append(f"{name} (in {sorted(paths)}) is no series the services export")
    for error in errors:
        print(f"check-series: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"check-series: {len(listed)} series, emitted, listed and referenced consistently: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
