#!/usr/bin/env bash
# The project's local stack: Redis, MariaDB and a RocketMQ name server + broker, each a
# project-owned process on loopback. Config, data, log and pid of a component live in
# $RUN_DIR/stack/<component>/ (RUN_DIR = $SECKILL_RUN_DIR, default <repo>/.run).
#
#   stack.sh up                 install what is missing, start every component not running
#   stack.sh down               stop all of them (SIGTERM, SIGKILL after a timeout)
#   stack.sh status             one line per component; exit 1 unless all answer
#   stack.sh start|stop|restart <component>
#   stack.sh kill <component>   SIGKILL, for fault drills
#   stack.sh freeze|thaw <component>
#                               SIGSTOP / SIGCONT, for fault drills: frozen, it keeps its
#                               connections and takes in what is sent, but answers nothing
#   stack.sh wipe <component>   delete its data (it is restarted, empty, if it was running)
#
# Components and ports: redis 16379 (and TLS on 16380), mariadb 13306 (TLS offered on
# the same port), namesrv 19876, broker 20911 (also 20909 and 20912). A component already
# answering on its port is left alone. Data survives down/up.
#
# TLS: Redis's TLS port and MariaDB present a certificate for 127.0.0.1 signed by a CA of
# the run folder's own (stack/tls/, made once by tls-certs.sh). Redis's TLS port asks every
# client for a certificate of that CA; MariaDB asks only the user seckill_tls (REQUIRE
# X509), and seckill may connect with TLS or without.
#
# Environment:
#   SECKILL_STACK_SKIP_MQ=1        up/down/status leave RocketMQ out
#   SECKILL_MQ_CHECK_INTERVAL_MS   broker transactionCheckInterval, ms (default 5000)
#   SECKILL_MQ_TX_TIMEOUT_MS       broker transactionTimeout, ms (default 3000)
#   SECKILL_MQ_FLUSH_DISK_TYPE     broker flushDiskType (default ASYNC_FLUSH)
#   SECKILL_MQ_SYNC_FLUSH_TIMEOUT_MS
#                                  broker syncFlushTimeout, ms (default 5000; SYNC_FLUSH only)
#   SECKILL_MQ_AUTH_USER           user:password: the broker checks every request's ACL
#                                  signature (authenticationEnabled) against this one user
#                                  (default: unset, no checks)
#   SECKILL_MQ_LOG_FILTER          RocketMQ log filter (default: warnings, plus the broker's
#                                  lifecycle lines)
#   SECKILL_STACK_START_TIMEOUT    seconds to wait for a component to answer (default 120)
#   SECKILL_STACK_STOP_TIMEOUT     seconds before SIGKILL on stop (default 30)
#   SECKILL_STACK_{REDIS,MYSQL,NAMESRV,BROKER}_PORT   other ports (Redis also takes
#                                  port + 1 for TLS; the broker port - 2 and port + 1)
set -euo pipefail

# shellcheck source=deploy/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
run_dir="${SECKILL_RUN_DIR:-${repo}/.run}"
mkdir -p "$run_dir"
run_dir="$(cd "$run_dir" && pwd)"
stack_dir="${run_dir}/stack"
tls_dir="${stack_dir}/tls"
cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
mq_root="${cache}/rocketmq-${ROCKETMQ_VERSION:-1.0.0}"

# The services' defaults (config/default.toml) expect these ports; overriding one
# means overriding the services' settings too (SECKILL_REDIS__URL, ...).
readonly REDIS_PORT="${SECKILL_STACK_REDIS_PORT:-16379}"
readonly REDIS_TLS_PORT=$((REDIS_PORT + 1))
readonly MYSQL_PORT="${SECKILL_STACK_MYSQL_PORT:-13306}"
readonly NAMESRV_PORT="${SECKILL_STACK_NAMESRV_PORT:-19876}"
readonly BROKER_PORT="${SECKILL_STACK_BROKER_PORT:-20911}"
readonly BROKER_HA_PORT=$((BROKER_PORT + 1))
start_timeout="${SECKILL_STACK_START_TIMEOUT:-120}"
stop_timeout="${SECKILL_STACK_STOP_TIMEOUT:-30}"
all_components=(redis mariadb namesrv broker)

log() { printf 'stack: %s\n' "$*"; }
die() {
  printf 'stack: error: %s\n' "$*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

# Components `up`, `down` and `status` act on.
stack_components() {
  if [[ ${SECKILL_STACK_SKIP_MQ:-0} == 1 ]]; then
    echo redis mariadb
  else
    echo "${all_components[@]}"
  fi
}

check_component() {
  case "${1:-}" in
    redis | mariadb | namesrv | broker) ;;
    *) die "unknown component '${1:-}' (one of: ${all_components[*]})" ;;
  esac
}

port_of() {
  case "$1" in
    redis) echo "$REDIS_PORT" ;;
    mariadb) echo "$MYSQL_PORT" ;;
    namesrv) echo "$NAMESRV_PORT" ;;
    broker) echo "$BROKER_PORT" ;;
  esac
}

exe_of() {
  case "$1" in
    redis) echo redis-server ;;
    mariadb) echo mariadbd ;;
    namesrv) echo rocketmq-namesrv-rust ;;
    broker) echo rocketmq-broker-rust ;;
  esac
}

dir_of() { echo "${stack_dir}/$1"; }
pid_file() { echo "${stack_dir}/$1/$1.pid"; }
log_file() { echo "${stack_dir}/$1/$1.log"; }

# Data a `wipe` deletes.
data_paths() {
  local d
  d="$(dir_of "$1")"
  case "$1" in
    redis | namesrv) echo "${d}/data" ;;
    mariadb) echo "${d}/data ${d}/initialised" ;;
    broker) echo "${d}/store" ;;
  esac
}

port_open() {
  # shellcheck disable=SC2016 # $1 is expanded by the inner bash
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# Prints the pid of the component started from this run folder, if it is alive.
pid_of() {
  local f pid
  f="$(pid_file "$1")"
  [[ -s $f ]] || return 1
  pid="$(<"$f")"
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # A zombie has an empty command line; a recycled pid runs something else.
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF -- "$(exe_of "$1")" || return 1
  echo "$pid"
}


fail_start() {
  printf 'stack: error: %s\n' "$2" >&2
  tail_log "$1"
  start_hint "$1"
  exit 1
}

# start_hint COMPONENT: what to do about a failed start the log explains.
start_hint() {
  local logf
  logf="$(log_file "$1")"
  # A write cut short (a full disk, a killed host) leaves Redis's append-only file damaged,
  # and Redis refuses to start rather than guess.
  if [[ $1 == redis ]] && tail -n 30 "$logf" | grep -q 'Bad file format reading the append only file'; then
    printf 'stack: hint: the AOF under %s is damaged; repair it with redis-check-aof --fix %s, or, as this local data is disposable, remove %s and start again\n' \
      "$(dir_of redis)/data" "$(dir_of redis)/data/appendonlydir/*.manifest" "$(dir_of redis)/data" >&2
  fi
  return 0
}

# render TEMPLATE OUTPUT NAME=VALUE... : fills in @NAME@ placeholders.
render() {
  local template="$1" out="$2" text kv
  shift 2
  text="$(<"$template")"
  for kv in "$@"; do
    text="${text//"@${kv%%=*}@"/"${kv#*=}"}"
  done
  if [[ $text =~ @[A-Z0-9_]+@ ]]; then
    die "${template}: placeholder ${BASH_REMATCH[0]} not filled in"
  fi
  printf '%s\n' "$text" >"${out}.tmp"
  mv "${out}.tmp" "$out"
}

ensure_rocketmq() {
  if [[ ! -f ${mq_root}/.complete ]]; then
    "${here}/install-rocketmq.sh"
  fi
}

mariadb_client_args() {
  local d
  d="$(dir_of mariadb)"
  printf '%s\n' --no-defaults "--socket=${d}/mariadb.sock" "--user=$(id -un)"
}

# ---- per component: prepare (config, first-time init) and the command line ----

prepare_redis() {
  local d="$1"
  mkdir -p "${d}/data"
  "${here}/tls-certs.sh" "$tls_dir"
  render "${here}/redis/redis.conf.tmpl" "${d}/redis.conf" \
    "PORT=${REDIS_PORT}" "DATA_DIR=${d}/data" "TLS_PORT=${REDIS_TLS_PORT}" "TLS_DIR=${tls_dir}"
  cmd=(redis-server "${d}/redis.conf")
}

prepare_mariadb() {
  local d="$1" user
  user="$(id -un)"
  "${here}/tls-certs.sh" "$tls_dir"
  render "${here}/mariadb/my.cnf.tmpl" "${d}/my.cnf" \
    "PORT=${MYSQL_PORT}" "DIR=${d}" "DATA_DIR=${d}/data" "SOCKET=${d}/mariadb.sock" \
    "TLS_DIR=${tls_dir}"
  if [[ ! -f ${d}/initialised ]]; then
    log "mariadb: initialising ${d}/data"
    rm -rf "${d}/data"
    mkdir -p "${d}/data"
    if ! mariadb-install-db --defaults-file="${d}/my.cnf" --user="$user" \
      --auth-root-authentication-method=socket --skip-test-db >>"$(log_file mariadb)" 2>&1; then
      fail_start mariadb "mariadb-install-db failed"
    fi
    touch "${d}/initialised"
  fi
  # mariadbd refuses to run as root unless told to; --user is its own account otherwise.
  cmd=(mariadbd "--defaults-file=${d}/my.cnf" "--user=${user}")
}

prepare_namesrv() {
  local d="$1"
  ensure_rocketmq
  mkdir -p "${d}/data" "${d}/home"
  render "${here}/rocketmq/namesrv.toml.tmpl" "${d}/namesrv.toml" \
    "PORT=${NAMESRV_PORT}" "HOME_DIR=${d}/home" "DATA_DIR=${d}/data"
  # The port and address are given again on the command line: they win over the
  # configuration the name server persists in its data folder.
  cmd=(env -u NAMESRV_ADDR "ROCKETMQ_HOME=${d}/home" "HOME=${d}/home"
    "${mq_root}/bin/rocketmq-namesrv-rust" -c "${d}/namesrv.toml"
    --listenPort "$NAMESRV_PORT" --bindAddress 127.0.0.1
    --log-filter "${SECKILL_MQ_LOG_FILTER:-warn}")
}

# The broker stops storing messages (every send fails with broker.operation.failed) once
# the disk under its store is 90% used, counting only the space an unprivileged process
# may use; it keeps running and says only "disk capacity requires reclaim".
warn_if_disk_nearly_full() {
  local size avail used
  read -r size avail < <(df -P -k "$1" | awk 'NR == 2 { print $2, $4 }')
  used=$(((size - avail) * 100 / size))
  if ((used >= 85)); then
    log "warning: the disk under $1 is ${used}% used; the broker refuses every message from 90% (free space, e.g. old build output)"
  fi
}

prepare_broker() {
  local d="$1"
  ensure_rocketmq
  # It gives up at start when it cannot register with the name server.
  port_open "$NAMESRV_PORT" ||
    die "broker: the name server (127.0.0.1:${NAMESRV_PORT}) does not answer; start it first (stack.sh start namesrv)"
  mkdir -p "${d}/store" "${d}/home"
  warn_if_disk_nearly_full "${d}/store"
  render "${here}/rocketmq/broker.toml.tmpl" "${d}/broker.toml" \
    "PORT=${BROKER_PORT}" "HA_PORT=${BROKER_HA_PORT}" "NAMESRV_PORT=${NAMESRV_PORT}" \
    "STORE_DIR=${d}/store" \
    "TX_CHECK_INTERVAL_MS=${SECKILL_MQ_CHECK_INTERVAL_MS:-5000}" \
    "TX_TIMEOUT_MS=${SECKILL_MQ_TX_TIMEOUT_MS:-3000}" \
    "FLUSH_DISK_TYPE=${SECKILL_MQ_FLUSH_DISK_TYPE:-ASYNC_FLUSH}" \
    "SYNC_FLUSH_TIMEOUT_MS=${SECKILL_MQ_SYNC_FLUSH_TIMEOUT_MS:-5000}" \
    "AUTH_ENABLED=$([[ -n ${SECKILL_MQ_AUTH_USER:-} ]] && echo true || echo false)" \
    "AUTH_USER=${SECKILL_MQ_AUTH_USER:-}"
  # The broker logs every EndTransaction at INFO: keep it at WARN, but let its
  # "started successfully" line through (the readiness check reads it). The command-line
  # filter also wins over a RUST_LOG set for the tests.
  cmd=(env -u NAMESRV_ADDR "ROCKETMQ_HOME=${d}/home" "HOME=${d}/home"
    "${mq_root}/bin/rocketmq-broker-rust" -c "${d}/broker.toml"
    --log-filter "${SECKILL_MQ_LOG_FILTER:-warn,rocketmq_broker::broker_runtime::lifecycle=info}")
}

# After a start: MariaDB gets the project's database and user (idempotent), then must
# take a login as that user over TCP, as the services and tests will.
post_start_mariadb() {
  local args
  mapfile -t args < <(mariadb_client_args)
  mariadb "${args[@]}" <<'SQL'
CREATE DATABASE IF NOT EXISTS seckill CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER IF NOT EXISTS 'seckill'@'localhost' IDENTIFIED BY 'seckill';
CREATE USER IF NOT EXISTS 'seckill'@'127.0.0.1' IDENTIFIED BY 'seckill';
GRANT ALL PRIVILEGES ON *.* TO 'seckill'@'localhost';
GRANT ALL PRIVILEGES ON *.* TO 'seckill'@'127.0.0.1';
CREATE USER IF NOT EXISTS 'seckill_tls'@'127.0.0.1' IDENTIFIED BY 'seckill' REQUIRE X509;
GRANT ALL PRIVILEGES ON *.* TO 'seckill_tls'@'127.0.0.1';
SQL
  mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$MYSQL_PORT" -useckill -pseckill \
    --connect-timeout=5 -e 'SELECT 1' seckill >/dev/null
}

# ---- readiness ----

# answers COMPONENT LOG_OFFSET PORT_OPEN_SINCE
answers() {
  case "$1" in
    redis)
      [[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
      ;;
    mariadb)
      # Over the socket: until post_start_mariadb has created the project's user, a TCP
      # login from 127.0.0.1 is refused before ping can tell that the server is alive.
      mariadb-admin --no-defaults --socket="$(dir_of mariadb)/mariadb.sock" -u"$(id -un)" \
        --connect-timeout=2 ping >/dev/null 2>&1
      ;;
    namesrv)
      port_open "$NAMESRV_PORT"
      ;;
    broker)
      # Ready once it logs that it started (after registering with the name server);
      # failing that, once its port has been open for a few seconds.
      tail -c "+$(($2 + 1))" "$(log_file broker)" 2>/dev/null | grep -q 'started successfully' && return 0
      [[ -n $3 ]] && ((SECONDS - $3 >= 5))
      ;;
  esac
}

wait_ready() {
  local c="$1" pid="$2" offset="${3:-0}" deadline=$((SECONDS + start_timeout)) open_since=""
  while ! answers "$c" "$offset" "$open_since"; do
    if ! alive "$pid"; then
      rm -f "$(pid_file "$c")"
      exit_reason "$pid"
      fail_start "$c" "${c} (pid ${pid}) exited during start (${REPLY})"
    fi
    if ((SECONDS >= deadline)); then
      fail_start "$c" "${c} (pid ${pid}) did not answer within ${start_timeout}s (still running; see $(log_file "$c"))"
    fi
    if [[ $c == broker && -z $open_since ]] && port_open "$BROKER_PORT"; then
      open_since=$SECONDS
    fi
    sleep 0.2
  done
}

# ---- commands ----

# One start/stop at a time per run folder (`make test` and `make run` may overlap). The
# lock's descriptor is closed in the daemons (close_inherited_fds), so they do not hold it.
lock_stack() {
  [[ -n ${lock_fd:-} ]] && return 0
  mkdir -p "$stack_dir"
  exec {lock_fd}>"${stack_dir}/.lock"
  flock "$lock_fd"
}


start_one() {
  local c="$1" d pid offset logf cmd=()
  check_component "$c"
  lock_stack
  d="$(dir_of "$c")"
  if pid="$(pid_of "$c")"; then
    wait_ready "$c" "$pid"
    log "${c}: running (pid ${pid}, 127.0.0.1:$(port_of "$c"))"
    return 0
  fi
  if port_open "$(port_of "$c")"; then
    log "${c}: 127.0.0.1:$(port_of "$c") already answers (not started from ${run_dir}); leaving it alone"
    return 0
  fi
  mkdir -p "$d"
  logf="$(log_file "$c")"
  touch "$logf"
  "prepare_${c}" "$d"
  offset="$(stat -c %s "$logf")"
  printf '==== %s: starting %s\n' "$(date -u +%FT%TZ)" "${cmd[*]}" >>"$logf"
  # Its own session: a Ctrl-C in the terminal that ran `make` does not reach it.
  (cd "$d" && close_inherited_fds && exec setsid "${cmd[@]}") </dev/null >>"$logf" 2>&1 &
  pid=$!
  echo "$pid" >"$(pid_file "$c")"
  wait_ready "$c" "$pid" "$offset"
  if declare -F "post_start_${c}" >/dev/null; then
    "post_start_${c}" >>"$logf" 2>&1 || fail_start "$c" "${c}: setting up after start failed"
  fi
  log "${c}: started (pid ${pid}, 127.0.0.1:$(port_of "$c"), log ${logf})"
}

# wait_gone COMPONENT PID SECONDS
wait_gone() {
  local deadline=$((SECONDS + $3))
  while kill -0 "$2" 2>/dev/null && pid_of "$1" >/dev/null; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.2
  done
}

stop_one() {
  local c="$1" signal="${2:-TERM}" pid
  check_component "$c"
  lock_stack
  if ! pid="$(pid_of "$c")"; then
    rm -f "$(pid_file "$c")"
    if port_open "$(port_of "$c")"; then
      log "${c}: 127.0.0.1:$(port_of "$c") answers but was not started from ${run_dir}; leaving it alone"
    else
      log "${c}: not running"
    fi
    return 0
  fi
  kill "-${signal}" "$pid" 2>/dev/null || true
  # A frozen process acts on SIGTERM only once it runs again.
  kill -CONT "$pid" 2>/dev/null || true
  if [[ $signal == KILL ]]; then
    wait_gone "$c" "$pid" 10 || die "${c} (pid ${pid}) survived SIGKILL"
    log "${c}: killed (pid ${pid})"
  elif wait_gone "$c" "$pid" "$stop_timeout"; then
    log "${c}: stopped (pid ${pid})"
  else
    log "${c}: still running after ${stop_timeout}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$c" "$pid" 10 || die "${c} (pid ${pid}) survived SIGKILL"
  fi
  rm -f "$(pid_file "$c")"
}

# signal_one COMPONENT SIGNAL WORD: a signal to a running component, no waiting.
signal_one() {
  local c="$1" pid
  check_component "$c"
  pid="$(pid_of "$c")" || die "${c}: not running"
  kill "-$2" "$pid"
  log "${c}: $3 (pid ${pid})"
}

wipe_one() {
  local c="$1" was_running=0 p
  check_component "$c"
  lock_stack
  if pid_of "$c" >/dev/null; then
    was_running=1
    stop_one "$c" KILL
  elif port_open "$(port_of "$c")"; then
    die "${c}: 127.0.0.1:$(port_of "$c") answers but was not started from ${run_dir}; not wiping"
  fi
  for p in $(data_paths "$c"); do
    rm -rf "$p"
  done
  log "${c}: data deleted"
  if ((was_running)); then
    start_one "$c"
  fi
}

status_one() {
  local c="$1" pid port
  port="$(port_of "$c")"
  if pid="$(pid_of "$c")"; then
    if { [[ $c == broker ]] && port_open "$port"; } || { [[ $c != broker ]] && answers "$c" 0 ""; }; then
      printf '%-8s running  pid %-7s 127.0.0.1:%s\n' "$c" "$pid" "$port"
    else
      printf '%-8s starting pid %-7s 127.0.0.1:%s (not answering yet)\n' "$c" "$pid" "$port"
      return 1
    fi
  elif port_open "$port"; then
    printf '%-8s foreign  127.0.0.1:%s answers, not started from %s\n' "$c" "$port" "$run_dir"
  else
    printf '%-8s stopped\n' "$c"
    return 1
  fi
}

cmd_up() {
  local c
  "${here}/install-servers.sh"
  if [[ ${SECKILL_STACK_SKIP_MQ:-0} != 1 ]]; then
    ensure_rocketmq
  fi
  for c in $(stack_components); do
    start_one "$c"
  done
}

cmd_down() {
  local i components
  read -ra components <<<"$(stack_components)"
  for ((i = ${#components[@]} - 1; i >= 0; i--)); do
    stop_one "${components[i]}"
  done
}

cmd_status() {
  local c rc=0
  for c in $(stack_components); do
    status_one "$c" || rc=1
  done
  return "$rc"
}

main() {
  local command="${1:-}"
  case "$command" in
    up | down | status)
      (($# == 1)) || die "usage: stack.sh ${command}"
      "cmd_${command}"
      ;;
    start | stop | kill | restart | wipe | freeze | thaw)
      (($# == 2)) || die "usage: stack.sh ${command} <component>  (component: ${all_components[*]})"
      case "$command" in
        start) start_one "$2" ;;
        stop) stop_one "$2" ;;
        kill) stop_one "$2" KILL ;;
        restart)
          stop_one "$2"
          start_one "$2"
          ;;
        wipe) wipe_one "$2" ;;
        freeze) signal_one "$2" STOP frozen ;;
        thaw) signal_one "$2" CONT thawed ;;
      esac
      ;;
    -h | --help | help) usage ;;
    *)
      usage >&2
      exit 2
      ;;
  esac
}

main "$@"
