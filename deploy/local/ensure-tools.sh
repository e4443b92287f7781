#!/usr/bin/env bash
# Installs the Debian packages behind missing commands.
#
#   ensure-tools.sh COMMAND[:PACKAGE]...     e.g. ensure-tools.sh make curl flock:util-linux
#
# Does nothing when every command is there; otherwise apt-get installs the packages
# (PACKAGE defaults to COMMAND), which needs root. Only the tools are wanted: policy-rc.d
# keeps a package's own system service (redis, mariadb, prometheus) from starting.
set -euo pipefail

missing=()
for spec in "$@"; do
  command -v "${spec%%:*}" >/dev/null || missing+=("${spec#*:}")
done
((${#missing[@]} == 0)) && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "missing ${missing[*]}: install them (apt-get install ${missing[*]}) or run as root" >&2
  exit 1
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Another apt-get (a second install script, the host's own updates) may hold dpkg's lock:
# wait for it rather than fail.
apt_wait=(-o DPkg::Lock::Timeout=600)
apt-get "${apt_wait[@]}" update -qq
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
fi
trap '[[ $created_policy == 1 ]] && rm -f "$policy"' EXIT
apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
