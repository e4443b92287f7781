#!/usr/bin/env bash
# Makes `promtool` available for `make lint-observability`: Debian ships it in the
# `prometheus` package. Only the tool is wanted; policy-rc.d keeps the package's own
# Prometheus service from starting while it is installed.
set -euo pipefail

command -v promtool >/dev/null && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "promtool is missing: install it (apt-get install prometheus) or run as root" >&2
  exit 1
fi
echo "installing prometheus (for promtool)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
fi
trap '[[ $created_policy == 1 ]] && rm -f "$policy"' EXIT
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
