#!/usr/bin/env bash
# Install the tools the deployment tests need, apart from the project's venv:
#   - systemd-analyze (Debian package "systemd"), for verifying and scoring the unit;
#   - checkov and pycep-parser, in their own venv, because their pins conflict with the project's;
#   - a wheelhouse in that venv with the setuptools pyproject.toml's build-system asks for, so the
#     install.sh test builds the project's wheel offline (pip wheel --no-index --find-links), in an
#     isolated build environment: checkov pins packaging < 24, which setuptools >= 77 cannot use;
#     and the wheels of the package's own dependencies (pyproject.toml [project] dependencies), so
#     install.sh --coordinator installs a working venv offline in the tests (--find-links).
# Idempotent and fast when everything is already there (a stamp file records what was installed).
# Usage: scripts/install-deploy-tools.sh [TOOLS_VENV]   (default: <repo>/.cache/deploy-tools)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_venv="${1:-${SE_DEPLOY_TOOLS:-$repo_root/.cache/deploy-tools}}"
python_bin="${PYTHON:-python3}"
# Pinned so a run today and a run next month check the templates with the same rules.
tool_specs=("checkov==3.3.30" "pycep-parser")
# The same requirement as pyproject.toml's [build-system] requires (77: SPDX license expressions).
build_specs=("setuptools>=77,<81")
# The package's runtime dependencies, as pyproject.toml lists them.
mapfile -t dep_specs < <("$python_bin" -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$repo_root/pyproject.toml")
stamp_want="${tool_specs[*]} | wheelhouse: ${build_specs[*]} ${dep_specs[*]}"

log() { printf 'install-deploy-tools: %s\n' "$*" >&2; }

if ! command -v systemd-analyze >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        log "systemd-analyze is missing and this is not root: run 'apt-get install systemd' as root"
        exit 1
    fi
    log "installing systemd (for systemd-analyze)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi

stamp="$tools_venv/.se-forwarder-tools"
if [ -x "$tools_venv/bin/checkov" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_want" ] \
    && "$tools_venv/bin/python" -c 'import pycep' 2>/dev/null \
    && compgen -G "$tools_venv/wheelhouse/setuptools-*.whl" >/dev/null; then
    log "tools already installed in $tools_venv"
    exit 0
fi

log "creating $tools_venv (${tool_specs[*]}; wheelhouse: ${build_specs[*]})"
mkdir -p "$(dirname "$tools_venv")"
PYTHON="$python_bin" "$repo_root/scripts/make-venv" "$tools_venv"
"$tools_venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
# checkov depends on pycep-parser (its Bicep front end); one resolve keeps all the pins consistent.
"$tools_venv/bin/python" -m pip install --quiet --disable-pip-version-check "${tool_specs[@]}"
rm -rf "$tools_venv/wheelhouse"
"$tools_venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary :all: --dest "$tools_venv/wheelhouse" "${build_specs[@]}"
"$tools_venv/bin/python" -m pip download --quiet --disable-pip-version-check \
    --only-binary :all: --dest "$tools_venv/wheelhouse" "${dep_specs[@]}"
echo "$stamp_want" > "$stamp"
log "done: $("$tools_venv/bin/checkov" --version 2>/dev/null | tail -n1) in $tools_venv"
