#!/usr/bin/env bash
# Makes `promtool` available for `make lint-observability`: Debian ships it in the
# `prometheus` package (its service is kept from starting by ensure-tools.sh).
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/../local/ensure-tools.sh" promtool:prometheus
