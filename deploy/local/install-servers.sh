#!/usr/bin/env bash
# Installs Debian's redis-server and mariadb-server when they are missing, and openssl for
# the stack's TLS certificates (tls-certs.sh).
# Only the binaries are used: the project starts its own instances on loopback.
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/ensure-tools.sh" \
  redis-server redis-cli:redis-tools mariadbd:mariadb-server mariadb:mariadb-client \
  flock:util-linux openssl
