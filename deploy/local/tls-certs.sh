#!/usr/bin/env bash
# Makes the local stack's TLS material, once, in DIR (stack.sh passes its run folder's
# tls/): a CA, a server certificate for 127.0.0.1 and localhost that Redis and MariaDB
# present, and a client certificate (CN seckill-client) for the servers that ask for one.
# PEM files: ca.pem, server.pem + server.key, client.pem + client.key. Valid ten years;
# delete DIR to make new ones. Only for the local stack and its tests: the keys are
# unencrypted, and anyone who can read DIR can pose as either side.
#
# Usage: tls-certs.sh DIR
set -euo pipefail

dir="${1:?the folder for the certificates}"
[[ -s ${dir}/client.key ]] && exit 0
command -v openssl >/dev/null || {
  echo "tls-certs: openssl is missing (apt-get install openssl)" >&2
  exit 1
}
mkdir -p "$dir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

quiet() { "$@" >"${work}/openssl.log" 2>&1 || {
  cat "${work}/openssl.log" >&2
  exit 1
}; }

quiet openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=seckill local CA" \
  -keyout "${work}/ca.key" -out "${work}/ca.pem"
# sign NAME SUBJECT EXTENSIONS: NAME.pem and NAME.key, signed by the CA.
sign() {
  quiet openssl req -newkey rsa:2048 -nodes -subj "$2" \
    -keyout "${work}/$1.key" -out "${work}/$1.csr"
  printf '%s\n' "$3" >"${work}/$1.ext"
  quiet openssl x509 -req -in "${work}/$1.csr" -CA "${work}/ca.pem" -CAkey "${work}/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "${work}/$1.ext" -out "${work}/$1.pem"
}
sign server "/CN=localhost" "subjectAltName = IP:127.0.0.1, DNS:localhost
basicConstraints = CA:FALSE
extendedKeyUsage = serverAuth"
sign client "/CN=seckill-client" "basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth"

# The MySQL driver reads a client key only as PKCS#1 ("BEGIN RSA PRIVATE KEY"); OpenSSL 3
# writes PKCS#8. Redis's client takes either.
quiet openssl rsa -in "${work}/client.key" -traditional -out "${work}/client.rsa.key"
mv "${work}/client.rsa.key" "${work}/client.key"
# The servers run as this user and read their keys themselves.
chmod 600 "${work}"/*.key
cp "${work}/ca.pem" "${work}/server.pem" "${work}/server.key" "${work}/client.pem" "$dir/"
# Last: its presence says the set is complete.
cp "${work}/client.key" "$dir/"
