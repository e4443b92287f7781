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

# alive PID: the process exists and is not a zombie. Unlike pid_of, it does not look at the
# command line: a process just forked by a start command is still this shell until it reaches
# its exec, and must not be taken for dead in that window.
alive() {
  local state
  state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n $state && $state != Z ]]
}

# exit_reason PID: sets REPLY to how a child of this shell ended ("status N", "signal NAME").
# Not to be called in a command substitution: a subshell cannot wait for its parent's child.
exit_reason() {
  local status=0
  if ! jobs -p | grep -qx "$1"; then
    REPLY="not started by this command"
    return
  fi
  wait "$1" 2>/dev/null || status=$?
  if ((status > 128 && status < 128 + 65)); then
    REPLY="signal $(kill -l $((status - 128)))"
  else
    REPLY="status ${status}"
  fi
}
