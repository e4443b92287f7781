#!/usr/bin/env bash
# Installs Debian's redis-server and mariadb-server when they are missing.
# Only the binaries are used: the project starts its own instances on loopback.
set -euo pipefail

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v mariadbd >/dev/null || missing+=(mariadb-server)
command -v mariadb >/dev/null || missing+=(mariadb-client)
command -v flock >/dev/null || missing+=(util-linux)
(( ${#missing[@]} == 0 )) && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "missing ${missing[*]}: install them (apt-get install ${missing[*]}) or run as root" >&2
  exit 1
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The packages' own system services are not wanted; policy-rc.d keeps them from starting.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
fi
trap '[[ $created_policy == 1 ]] && rm -f "$policy"' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
