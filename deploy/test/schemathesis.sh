#!/usr/bin/env bash
# Holds a running gateway to its own OpenAPI document with schemathesis (property-based
# API testing, from PyPI): every documented operation, with inputs that fit the document and
# inputs that do not, a bounded number of each. Starts nothing: the gateway must be up
# (deploy/test/api-contract.sh starts one for `make test`; `make run` also does).
#
#   schemathesis.sh             run against $SECKILL_GATEWAY_URL
#   schemathesis.sh --install   install schemathesis when needed, print its bin folder
#
# What fails the run (settings in deploy/test/schemathesis.toml): a 5xx other than 503; a
# status, content type, header or body that the document does not give for the operation;
# malformed input accepted, or well-formed input refused with a 4xx the document does not
# explain; an undocumented method not answered 405; an authenticated operation that answers
# without its credentials. The buyer's credential is X-User-Id: the gateway must run with
# auth.mode = "header" (the default).
#
# Environment:
#   SECKILL_GATEWAY_URL            default http://127.0.0.1:8080
#   SECKILL_CONTRACT_ADMIN_TOKEN   default dev-admin-token (config/default.toml's)
#   SECKILL_CONTRACT_USER          X-User-Id of the buyer, default 7
#   SECKILL_CONTRACT_MAX_EXAMPLES  test cases per operation and phase, default 50
#   SECKILL_CONTRACT_SEED          hypothesis seed (default: a random one, printed)
#   SECKILL_CONTRACT_REPORT_DIR    where the JUnit report goes, default <repo>/.run/contract
#
# schemathesis lives in a virtualenv under the cache,
# ${SECKILL_CACHE:-~/.cache/seckill}/tools/schemathesis-venv, pinned with every package
# under it; it is installed the first time (about half a minute), and again only when the
# pins change. Needs python3 (3.11 or newer) with its venv module.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
venv="${cache}/tools/schemathesis-venv"
python="${PYTHON:-python3}"

log() { printf 'schemathesis: %s\n' "$*" >&2; }
die() {
  printf 'schemathesis: error: %s\n' "$*" >&2
  exit 1
}

# schemathesis itself (requirements) and every package under it at the version seen to work
# together (constraints).
requirements() {
  cat <<'REQ'
schemathesis==4.32.5
REQ
}
constraints() {
  cat <<'CON'
anyio==4.16.0
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
graphql-core==3.3.2
harfile==0.6.0
hypothesis==6.170.17
hypothesis-graphql==0.13.5
idna==3.20
iniconfig==2.3.1
jsonschema_rs==0.60.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mdurl==0.1.2
packaging==26.4
pluggy==1.7.0
Pygments==2.21.0
pyrate-limiter==4.5.1
pytest==9.2.0
PyYAML==6.0.4
requests==2.34.2
rich==15.0.0
sortedcontainers==2.4.0
typing_extensions==4.16.0
urllib3==2.8.0
Werkzeug==3.1.9
CON
}

# shellcheck source=deploy/local/pinned-venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/../local/pinned-venv.sh"

installed() { venv_current schemathesis; }
install() { venv_install schemathesis 3.11; }

case "${1:-}" in
  --install)
    installed || install
    echo "${venv}/bin"
    exit 0
    ;;
  "") ;;
  *)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac

installed || install

url="${SECKILL_GATEWAY_URL:-http://127.0.0.1:8080}"
url="${url%/}"
max_examples="${SECKILL_CONTRACT_MAX_EXAMPLES:-50}"
report_dir="${SECKILL_CONTRACT_REPORT_DIR:-${repo}/.run/contract}"
# Read by schemathesis.toml's [auth.openapi] entries.
export SECKILL_CONTRACT_ADMIN_TOKEN="${SECKILL_CONTRACT_ADMIN_TOKEN:-dev-admin-token}"
export SECKILL_CONTRACT_USER="${SECKILL_CONTRACT_USER:-7}"

curl -fsS -o /dev/null --max-time 5 "${url}/api-docs/openapi.json" ||
  die "no OpenAPI document at ${url}/api-docs/openapi.json: is the gateway running?"

# The request timeout outlasts the longest long-poll (`GET /api/v1/orders/{token}?wait_secs=30`
# on an order awaiting payment answers after 30 s, by design).
# One worker: with two, hypothesis once failed inside its own strategy descriptions (not
# thread-safe), and one runs the whole suite in seconds.
args=(
  --config-file "${here}/schemathesis.toml"
  run "${url}/api-docs/openapi.json"
  --url "$url"
  --checks all
  --max-examples "$max_examples"
  --workers 1
  --request-timeout 40
  --report junit
  --report-junit-path "${report_dir}/schemathesis-junit.xml"
  --no-color
)
[[ -n ${SECKILL_CONTRACT_SEED:-} ]] && args+=(--seed "$SECKILL_CONTRACT_SEED")
mkdir -p "$report_dir"
log "checking ${url} against its OpenAPI document (${max_examples} examples per operation and phase)"
# Its example database stays out of the clone.
cd "$report_dir"
exec "${venv}/bin/schemathesis" "${args[@]}"
