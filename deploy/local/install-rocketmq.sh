#!/usr/bin/env bash
# Builds the rocketmq-rust name server and broker into the project's cache, once.
#
# The build takes 15-50 minutes on two cores, so the binaries live outside the
# clone (SECKILL_CACHE, default ~/.cache/seckill) and are reused whenever their
# --version matches. A lighter release profile (opt-level 1, no LTO, many codegen
# units) roughly triples build speed and still sends thousands of messages/s.
set -euo pipefail

version="${ROCKETMQ_VERSION:-1.0.0}"
cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
root="${cache}/rocketmq-${version}"
namesrv="${root}/bin/rocketmq-namesrv-rust"
broker="${root}/bin/rocketmq-broker-rust"

installed() {
  [[ -x "$namesrv" && -x "$broker" && -f "${root}/.complete" ]]
}

if installed; then
  echo "rocketmq-rust ${version}: using ${root}/bin"
  exit 0
fi

mkdir -p "$root"
# One build at a time: `make test` and `make demo` may both ask for it.
exec 9>"${cache}/rocketmq-install.lock"
flock 9
if installed; then
  exit 0
fi

echo "rocketmq-rust ${version}: building name server and broker into ${root} (takes a while, once)"
export CARGO_TARGET_DIR="${cache}/rocketmq-target"
export CARGO_PROFILE_RELEASE_OPT_LEVEL=1
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256
export CARGO_PROFILE_RELEASE_LTO=false
export CARGO_PROFILE_RELEASE_DEBUG=false
cargo install --quiet --locked --version "$version" --root "$root" rocketmq-namesrv rocketmq-broker
touch "${root}/.complete"
echo "rocketmq-rust ${version}: installed into ${root}/bin"
