#!/usr/bin/env bash
# The three services in the background, against the local stack (deploy/local/stack.sh).
#
#   services.sh start    migrate the schema (seckill-migrate), start each service that is
#                        not running, return once all answer GET /readyz
#   services.sh migrate  only migrate the schema, creating the database if need be (the
#                        services migrate it too, but do not create it)
#   services.sh stop     SIGTERM, SIGKILL after 30 s
#   services.sh status   one line per service; exit 1 unless all run and are ready
#
# Pid and log of a service: $RUN_DIR/<service>.pid and $RUN_DIR/<service>.log
# (RUN_DIR = $SECKILL_RUN_DIR, default <repo>/.run). Binaries come from $BIN_DIR
# (default $CARGO_TARGET_DIR/release, CARGO_TARGET_DIR default $SECKILL_CACHE/target).
# The services run from the repository root and read config/default.toml and
# config/local.toml there (SECKILL_ENV=local unless set), with
# SECKILL_<SECTION>__<KEY> overrides from the environment; SECKILL_GATEWAY__LISTEN,
# SECKILL_CONSUMER__LISTEN and SECKILL_RECONCILE__LISTEN also tell this script where to
# ask for /readyz.
#
# Environment: SECKILL_SERVICES_START_TIMEOUT (s, default 90),
# SECKILL_SERVICES_STOP_TIMEOUT (s, default 30).
set -euo pipefail

# shellcheck source=deploy/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
run_dir="${SECKILL_RUN_DIR:-${repo}/.run}"
mkdir -p "$run_dir"
run_dir="$(cd "$run_dir" && pwd)"
cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
target_dir="${CARGO_TARGET_DIR:-${cache}/target}"
bin_dir="${BIN_DIR:-${target_dir}/release}"
start_timeout="${SECKILL_SERVICES_START_TIMEOUT:-90}"
stop_timeout="${SECKILL_SERVICES_STOP_TIMEOUT:-30}"
services=(gateway-svc order-consumer-svc reconcile-svc)
# Local mode: config/local.toml's public development secrets, which the services refuse
# anywhere else.
export SECKILL_ENV="${SECKILL_ENV:-local}"

log() { printf 'services: %s\n' "$*"; }
die() {
  printf 'services: error: %s\n' "$*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

pid_file() { echo "${run_dir}/$1.pid"; }
log_file() { echo "${run_dir}/$1.log"; }

# A service's log is appended to across starts; past this size it moves to <log>.1 (the one
# before is dropped) when the service starts, so that runs and sessions do not pile it up.
LOG_KEEP_BYTES=$((64 * 1024 * 1024))
rotate_log() {
  if [[ -f $1 ]] && (($(stat -c %s "$1") > LOG_KEEP_BYTES)); then
    mv -f "$1" "$1.1"
  fi
}

listen_of() {
  case "$1" in
    gateway-svc) echo "${SECKILL_GATEWAY__LISTEN:-127.0.0.1:8080}" ;;
    order-consumer-svc) echo "${SECKILL_CONSUMER__LISTEN:-127.0.0.1:8081}" ;;
    reconcile-svc) echo "${SECKILL_RECONCILE__LISTEN:-127.0.0.1:8082}" ;;
  esac
}

# Where to reach a service that listens on host:port (a wildcard address means loopback).
readyz_url() {
  local listen host port
  listen="$(listen_of "$1")"
  port="${listen##*:}"
  host="${listen%:*}"
  case "$host" in
    "" | 0.0.0.0 | "[::]") host=127.0.0.1 ;;
  esac
  echo "http://${host}:${port}/readyz"
}

# Prints the pid of the service started from this run folder, if it is alive.
pid_of() {
  local f pid
  f="$(pid_file "$1")"
  [[ -s $f ]] || return 1
  pid="$(<"$f")"
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # A zombie has an empty command line; a recycled pid runs something else.
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF -- "$1" || return 1
  echo "$pid"
}

ready() {
  curl -fsS -o /dev/null --max-time 2 "$(readyz_url "$1")" 2>/dev/null
}



cmd_migrate() {
  [[ -x ${bin_dir}/seckill-migrate ]] ||
    die "${bin_dir}/seckill-migrate is missing: build first (make build)"
  log "migrating the schema"
  (cd "$repo" && "${bin_dir}/seckill-migrate") || die "seckill-migrate failed"
}

cmd_start() {
  local s pid logf pending=() waiting failed=0 deadline
  local -A started=()
  command -v curl >/dev/null || die "curl is needed (apt-get install curl)"
  for s in "${services[@]}"; do
    [[ -x ${bin_dir}/${s} ]] || die "${bin_dir}/${s} is missing: build first (make build)"
  done

  cmd_migrate

  for s in "${services[@]}"; do
    if pid="$(pid_of "$s")"; then
      started[$s]=$pid
      log "${s}: running (pid ${pid})"
    else
      logf="$(log_file "$s")"
      rotate_log "$logf"
      printf '==== %s: starting %s\n' "$(date -u +%FT%TZ)" "${bin_dir}/${s}" >>"$logf"
      # Its own session: a Ctrl-C in the terminal that ran `make` does not reach it.
      # No stack backtrace captured for every error value (anyhow does, while RUST_BACKTRACE
      # is set, at a cost per failed request); a panic still prints its backtrace.
      (cd "$repo" && close_inherited_fds && RUST_LIB_BACKTRACE="${RUST_LIB_BACKTRACE:-0}" \
        exec setsid nohup "${bin_dir}/${s}") </dev/null >>"$logf" 2>&1 &
      pid=$!
      echo "$pid" >"$(pid_file "$s")"
      started[$s]=$pid
      log "${s}: started (pid ${pid}, log ${logf})"
    fi
    pending+=("$s")
  done

  deadline=$((SECONDS + start_timeout))
  while ((${#pending[@]} > 0)); do
    waiting=()
    for s in "${pending[@]}"; do
      if ready "$s"; then
        log "${s}: ready ($(readyz_url "$s"))"
      elif ! alive "${started[$s]}"; then
        exit_reason "${started[$s]}"
        printf 'services: error: %s exited during start (%s)\n' "$s" "$REPLY" >&2
        tail_log "$s"
        rm -f "$(pid_file "$s")"
        failed=1
      else
        waiting+=("$s")
      fi
    done
    pending=("${waiting[@]+"${waiting[@]}"}")
    ((${#pending[@]} == 0)) && break
    if ((SECONDS >= deadline)); then
      for s in "${pending[@]}"; do
        printf 'services: error: %s did not answer %s within %ss (still running)\n' \
          "$s" "$(readyz_url "$s")" "$start_timeout" >&2
        tail_log "$s"
      done
      failed=1
      break
    fi
    sleep 0.5
  done
  ((failed == 0)) || die "not all services are ready (stop them with: make stop)"
}

cmd_stop() {
  local s pid running=() left deadline
  for s in "${services[@]}"; do
    if pid="$(pid_of "$s")"; then
      kill -TERM "$pid" 2>/dev/null || true
      running+=("$s:$pid")
    else
      rm -f "$(pid_file "$s")"
      log "${s}: not running"
    fi
  done
  deadline=$((SECONDS + stop_timeout))
  while ((${#running[@]} > 0)); do
    left=()
    for s in "${running[@]}"; do
      if pid_of "${s%%:*}" >/dev/null; then
        left+=("$s")
      else
        rm -f "$(pid_file "${s%%:*}")"
        log "${s%%:*}: stopped (pid ${s#*:})"
      fi
    done
    running=("${left[@]+"${left[@]}"}")
    ((${#running[@]} == 0)) && break
    if ((SECONDS >= deadline)); then
      for s in "${running[@]}"; do
        log "${s%%:*}: still running after ${stop_timeout}s; sending SIGKILL"
        kill -KILL "${s#*:}" 2>/dev/null || true
      done
      sleep 0.5
      for s in "${running[@]}"; do
        pid_of "${s%%:*}" >/dev/null && die "${s%%:*} (pid ${s#*:}) survived SIGKILL"
        rm -f "$(pid_file "${s%%:*}")"
        log "${s%%:*}: killed (pid ${s#*:})"
      done
      break
    fi
    sleep 0.2
  done
}

cmd_status() {
  local s pid rc=0
  for s in "${services[@]}"; do
    if pid="$(pid_of "$s")"; then
      if ready "$s"; then
        printf '%-19s running  pid %-7s ready  %s\n' "$s" "$pid" "$(readyz_url "$s")"
      else
        printf '%-19s running  pid %-7s NOT READY  %s\n' "$s" "$pid" "$(readyz_url "$s")"
        rc=1
      fi
    else
      printf '%-19s stopped\n' "$s"
      rc=1
    fi
  done
  return "$rc"
}

case "${1:-}" in
  start | stop | status | migrate)
    (($# == 1)) || die "usage: services.sh $1"
    "cmd_$1"
    ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
esac
