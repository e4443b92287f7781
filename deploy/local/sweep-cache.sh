#!/usr/bin/env bash
# Keeps the project's build cache (SECKILL_CACHE, default ~/.cache/seckill) bounded.
#
#   sweep-cache.sh            `make sweep-cache`, a prerequisite of `make stack`, `make build`
#                             and `make test` (so once per demo or bench too), before the
#                             broker starts or a build begins
#
# The cache outlives clones on purpose, so nothing else ever removes from it: every change of
# a dependency, a feature set or the toolchain leaves the previous artefacts behind, and a
# full disk once made the broker refuse sends. Three rules, cheapest first:
#
# 1. The broker's build folder goes once the broker is installed: only its binaries are used.
# 2. Build units no build has used for SECKILL_CACHE_STALE_DAYS (default 7) go, whole
#    (fingerprint and outputs together, so cargo rebuilds rather than trips on half a unit).
# 3. If the cache is still above SECKILL_CACHE_LIMIT_GB (default 40), the build profiles go
#    whole: the next build starts from nothing, which costs time, never correctness.
set -euo pipefail

cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
target="${CARGO_TARGET_DIR:-${cache}/target}"
stale_days="${SECKILL_CACHE_STALE_DAYS:-7}"
limit_gb="${SECKILL_CACHE_LIMIT_GB:-40}"

[[ -d $cache ]] || exit 0

size_gb() {
  du -s --block-size=1G "$@" 2>/dev/null | awk '{ sum += $1 } END { print sum + 0 }'
}

# 1. A finished broker install (install-rocketmq.sh marks it complete) needs no build folder.
#    The install lock is taken so that a build under way is never swept from under itself.
if [[ -d ${cache}/rocketmq-target ]] && compgen -G "${cache}/rocketmq-*/.complete" >/dev/null; then
  exec 9>"${cache}/rocketmq-install.lock"
  if flock -n 9; then
    echo "sweep-cache: removing the broker's build folder (its binaries are installed)"
    rm -rf "${cache}/rocketmq-target"
  fi
  exec 9>&-
fi

# 2. Units of a build nobody makes any more. Cargo reads every unit's fingerprint
#    (.fingerprint/<name>-<hash>/) on each build that includes it, so a fingerprint unread for
#    stale_days belongs to a dependency version, feature set or toolchain no longer in use.
#    Its outputs go with it (deps/*-<hash>*, build/<name>-<hash>/): removed together, cargo
#    rebuilds the unit if it is ever wanted again, never half of it. Incremental caches are
#    only caches: a crate's folder untouched that long goes whole.
swept=0
for profile in "$target"/*/ "${cache}"/fuzz-target/*/*/; do
  [[ -d ${profile}.fingerprint ]] || continue
  while IFS= read -r -d '' unit; do
    if [[ -z $(find "$unit" -type f -atime -"$stale_days" -print -quit) ]]; then
      name="${unit##*/}"
      hash="${name##*-}"
      rm -rf -- "$unit" "${profile}build/${name}"
      rm -f -- "${profile}deps/"*"-${hash}" "${profile}deps/"*"-${hash}."*
      swept=$((swept + 1))
    fi
  done < <(find "${profile}.fingerprint" -mindepth 1 -maxdepth 1 -type d -print0)
  if [[ -d ${profile}incremental ]]; then
    while IFS= read -r -d '' crate; do
      if [[ -z $(find "$crate" -mtime -"$stale_days" -print -quit) ]]; then
        rm -rf -- "$crate"
      fi
    done < <(find "${profile}incremental" -mindepth 1 -maxdepth 1 -type d -print0)
  fi
done
((swept == 0)) || echo "sweep-cache: removed ${swept} build units unused for ${stale_days} days"

# 3. Still too large: drop the build profiles.
total="$(size_gb "$cache")"
if ((total > limit_gb)); then
  echo "sweep-cache: the cache holds ${total} GiB (limit ${limit_gb}); removing the build profiles"
  rm -rf "${target}/debug" "${target}/release" "${cache}/fuzz-target"
fi
