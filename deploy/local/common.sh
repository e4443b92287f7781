# shellcheck shell=bash
# Helpers shared by stack.sh and services.sh; sourced, never run. Each script defines its
# own `log_file NAME`, which tail_log reads.

# The last lines of NAME's log on stderr, to explain a start that failed.
tail_log() {
  local f
  f="$(log_file "$1")"
  if [[ -s $f ]]; then
    echo "---- last 30 lines of ${f} ----" >&2
    tail -n 30 "$f" >&2
    echo "----" >&2
  fi
}

# In a subshell about to exec a daemon: close descriptors inherited from the caller beyond
# 0-2, so the daemon does not hold a pipe a CI runner or `make` waits on.
close_inherited_fds() {
  local fd
  for fd in /proc/"${BASHPID}"/fd/*; do
    fd="${fd##*/}"
    if ((fd > 2)) && [[ -e /proc/${BASHPID}/fd/${fd} ]]; then
      exec {fd}>&-
    fi
  done
}
