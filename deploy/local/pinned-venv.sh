# shellcheck shell=bash disable=SC2154 # venv and python are the sourcing script's
# A virtualenv of pinned PyPI tools, reused while its pins are unchanged. Sourced by the
# scripts that need one (deploy/k8s-tools.sh, deploy/test/schemathesis.sh); they define
# `venv`, `python`, `log`, `die`, and the functions `requirements` and `constraints`
# (pip's -r and -c files, printed on stdout).

# A digest of the pins and the interpreter: a venv built from other pins is rebuilt.
pins_digest() {
  { requirements; constraints; "$python" --version 2>&1; } | sha256sum | cut -d' ' -f1
}

# venv_current TOOL...: the venv was built from these pins and has these executables.
venv_current() {
  local stamp="${venv}/.seckill-pins" tool
  [[ -f $stamp && "$(<"$stamp")" == "$(pins_digest)" ]] || return 1
  for tool in "$@"; do
    [[ -x "${venv}/bin/${tool}" ]] || return 1
  done
}

# venv_install WHAT MIN_PYTHON: (re)creates the venv and installs the pins into it.
venv_install() {
  local what="$1" min_python="$2" req con
  command -v "$python" >/dev/null ||
    die "${python} not found: install Python 3 (${min_python} or newer) with its venv module"
  log "installing ${what} from PyPI into ${venv}"
  mkdir -p "${venv%/*}"
  "$python" -m venv --clear "$venv" ||
    die "cannot create a virtualenv with ${python} (on Debian: apt-get install python3-venv)"
  req="${venv}/requirements.txt"
  con="${venv}/constraints.txt"
  requirements >"$req"
  constraints >"$con"
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -r "$req" -c "$con" >&2 ||
    die "pip could not install ${what} (PyPI unreachable, or a pin no longer served?)"
  pins_digest >"${venv}/.seckill-pins"
}
