#!/usr/bin/env bash
# Install, upgrade or remove the se-forwarder agent (or, with --coordinator, the fleet coordinator)
# as a hardened systemd service.
#
#   /opt/se-forwarder/venv                 Python venv with the se-forwarder package
#   /etc/se-forwarder/config.toml          configuration (written only if absent, or from --config-file)
#   /etc/se-forwarder/se-forwarder.env     secrets as KEY=VALUE (root 0600), read by systemd
#   /etc/se-forwarder/credentials/         secret files for LoadCredential= (root 0700)
#   /etc/systemd/system/se-forwarder.service
#   /etc/systemd/system/se-forwarder.service.d/10-restart-backoff.conf   (systemd >= 254 only)
#   /var/lib/se-forwarder                  state (made by systemd: StateDirectory=)
# With --coordinator instead: /etc/se-forwarder/coordinator.toml, the unit
# se-forwarder-coordinator.service, and in credentials/ the signing key (signing.key, made with
# `se-forwarder fleet keygen` unless one is there or given) and the API token table (api.token, one
# operator token made unless one is there or given); no state directory (the coordinator keeps none).
#
# What is installed is always a pinned artifact: --wheel FILE or URL with --sha256 (a release's
# SHA256SUMS), or --package SPEC from the index named by --index-url or the wheelhouse --find-links.
# A bare name is never resolved on the public index, where anyone may publish it.
#
# Idempotent: a second run with the same arguments changes nothing and restarts nothing. With
# --prefix DIR every path above is laid down under DIR (for images, packaging and tests); the
# actions only root can do on a live system (creating the user, chown, starting the service) are
# skipped there, and the unit is enabled with `systemctl --root`.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: install.sh [options]
  --prefix DIR        install under DIR instead of / (no user, no chown, no start)
  --dry-run           print what would change, change nothing
  --wheel FILE|URL    install this wheel (a release's; https URL, or http on loopback), with
                      the extras of --extras
  --sha256 HEX        the wheel's SHA-256 (SHA256SUMS of the release): required with a URL; a
                      wheel that does not match is refused
  --extras LIST       extras for --wheel (default: eventhubs,queue, or fleet with --coordinator;
                      "" for none)
  --package SPEC      pip requirement to install instead of a wheel, e.g. 'se-forwarder[eventhubs,queue]==0.1.0';
                      only with --index-url or --find-links
  --index-url URL     your private index (pip --index-url: the public index is not consulted):
                      --package's, or the wheel's dependencies' (default: pip's own index)
  --find-links DIR    install offline from this wheelhouse only (pip --no-index)
  --no-deps           install only the package; its dependencies are already present
  --python PY         interpreter for the venv (default: the first python3, python3.13,
                      python3.12, python3.11 that is >= 3.11)
  --config-file FILE  install FILE as config.toml (a different existing one is kept as .bak)
  --env-file FILE     install FILE as se-forwarder.env (secrets, root 0600)
  --no-start          install and enable the service, but do not (re)start it
  --coordinator       install the fleet coordinator instead of the agent (see above)
  --signing-key FILE  with --coordinator: install FILE as the signing key (else one is made)
  --token-file FILE   with --coordinator: install FILE as the API token table (else one is made)
  --systemd-version N the target's systemd version, for images built elsewhere (default: this
                      host's); 254 and later get the growing restart delay
  --uninstall         remove the service and the venv; keep config, state and logs
  --purge             with --uninstall: remove config, state, logs and the user too
  -h, --help          this text
EOF
}

die() { printf 'install.sh: error: %s\n' "$*" >&2; exit 1; }
say() { printf 'install.sh: %s\n' "$*"; }

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix=""
dry_run=0
package_spec=""
wheel=""
wheel_url=""
wheel_sha256=""
extras=""
extras_given=0
index_url=""
find_links=""
coordinator=0
signing_key_src=""
token_src=""
no_deps=0
python_bin="python3"
python_explicit=0
config_src=""
env_src=""
start=1
mode="install"
purge=0
systemd_version=""

need_arg() { if [ "$#" -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value"; fi; }
while [ "$#" -gt 0 ]; do
    case "$1" in
        --prefix) need_arg "$@"; prefix="${2%/}"; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --package) need_arg "$@"; package_spec="$2"; shift 2 ;;
        --wheel) need_arg "$@"; wheel="$2"; shift 2 ;;
        --sha256) need_arg "$@"; wheel_sha256="$2"; shift 2 ;;
        --extras) [ "$#" -ge 2 ] || die "--extras needs a value"; extras="$2"; extras_given=1; shift 2 ;;
        --index-url) need_arg "$@"; index_url="$2"; shift 2 ;;
        --coordinator) coordinator=1; shift ;;
        --signing-key) need_arg "$@"; signing_key_src="$2"; shift 2 ;;
        --token-file) need_arg "$@"; token_src="$2"; shift 2 ;;
        --find-links) need_arg "$@"; find_links="$2"; shift 2 ;;
        --no-deps) no_deps=1; shift ;;
        --python) need_arg "$@"; python_bin="$2"; python_explicit=1; shift 2 ;;
        --config-file) need_arg "$@"; config_src="$2"; shift 2 ;;
        --env-file) need_arg "$@"; env_src="$2"; shift 2 ;;
        --no-start) start=0; shift ;;
        --systemd-version) need_arg "$@"; systemd_version="$2"; shift 2 ;;
        --uninstall) mode="uninstall"; shift ;;
        --purge) purge=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
done
[ "$purge" -eq 0 ] || [ "$mode" = "uninstall" ] || die "--purge only goes with --uninstall"
if [ -z "$systemd_version" ]; then  # "systemd 252 (252.39-1~deb12u2)"; 0 when there is none
    systemd_version="$(systemctl --version 2>/dev/null | awk 'NR == 1 { print $2 }')" || true
    case "$systemd_version" in ''|*[!0-9]*) systemd_version=0 ;; esac
fi
case "$systemd_version" in
    ''|*[!0-9]*) die "--systemd-version needs a number such as 255, not $systemd_version" ;;
esac
if [ -n "$prefix" ]; then
    case "$prefix" in /*) ;; *) prefix="$(pwd)/$prefix" ;; esac
fi
[ "$extras_given" -eq 1 ] || { if [ "$coordinator" -eq 1 ]; then extras="fleet"; else extras="eventhubs,queue"; fi; }
if [ "$coordinator" -eq 0 ] && { [ -n "$signing_key_src" ] || [ -n "$token_src" ]; }; then
    die "--signing-key and --token-file go with --coordinator"
fi
case "$wheel_sha256" in
    '') ;;
    *[!0-9a-fA-F]*) die "--sha256 needs the 64 hex digits of SHA256SUMS, not '$wheel_sha256'" ;;
    *) [ "${#wheel_sha256}" -eq 64 ] || die "--sha256 needs 64 hex digits, not ${#wheel_sha256}"
       wheel_sha256="$(printf '%s' "$wheel_sha256" | tr 'A-F' 'a-f')" ;;
esac
# A URL as people may see it: no query string (a SAS token is a secret).
shown_url() { printf '%s' "${1%%\?*}"; }
is_loopback_http() { case "$1" in http://127.*|http://localhost[:/]*|http://\[::1\]*) return 0 ;; esac; return 1; }
if [ "$mode" = "install" ]; then
    sources=0
    [ -z "$wheel" ] || sources=$((sources + 1))
    [ -z "$package_spec" ] || sources=$((sources + 1))
    [ "$sources" -le 1 ] || die "give --wheel or --package, not both"
    if [ "$sources" -eq 0 ]; then
        die "nothing to install: give --wheel FILE|URL --sha256 HEX (a release's, see scripts/release), or --package SPEC with --index-url URL of your private index"
    fi
    if [ -n "$package_spec" ] && [ -z "$index_url" ] && [ -z "$find_links" ]; then
        die "--package $package_spec would be resolved on the public index, where anyone can publish that name: give --wheel FILE|URL --sha256 HEX, or --index-url URL of your private index (or --find-links DIR)"
    fi
    if [ -n "$index_url" ]; then
        case "$index_url" in https://*) ;; *) is_loopback_http "$index_url" || die "--index-url must be https://" ;; esac
    fi
    case "$wheel" in
        https://*|http://*)
            case "$wheel" in http://*) is_loopback_http "$wheel" || die "--wheel $(shown_url "$wheel"): only https:// URLs (plain http on loopback only)" ;; esac
            [ -n "$wheel_sha256" ] || die "--wheel $(shown_url "$wheel") needs --sha256 HEX (the release's SHA256SUMS): a downloaded wheel is installed only if it matches"
            wheel_url="$wheel" ;;
        '') ;;
        *) [ -f "$wheel" ] || die "wheel $wheel does not exist"
           wheel="$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")" ;;
    esac
fi

# Paths as the running system sees them, and where this run writes them.
readonly OPT=/opt/se-forwarder ETC=/etc/se-forwarder UNIT_DIR=/etc/systemd/system
if [ "$coordinator" -eq 1 ]; then
    readonly UNIT=se-forwarder-coordinator.service USER_NAME=se-forwarder
else
    readonly UNIT=se-forwarder.service USER_NAME=se-forwarder
fi
readonly STATE=/var/lib/se-forwarder LOGS=/var/log/se-forwarder
venv="$prefix$OPT/venv"
etc="$prefix$ETC"
unit_path="$prefix$UNIT_DIR/$UNIT"
unit_src="$script_dir/$UNIT"
readonly BACKOFF=10-restart-backoff.conf BACKOFF_SINCE=254  # RestartSteps, RestartMaxDelaySec
backoff_path="$prefix$UNIT_DIR/$UNIT.d/$BACKOFF"
changed=0

live_system() { [ -z "$prefix" ]; }
is_root() { [ "$(id -u)" -eq 0 ]; }
systemd_running() { [ -d /run/systemd/system ]; }

# Run a changing action, or only describe it in a dry run; either way the run counts as changing.
act() {
    local what="$1"; shift
    changed=1
    if [ "$dry_run" -eq 1 ]; then say "would $what"; return 0; fi
    say "$what"
    "$@"
}

# Install src at dest with mode, unless dest already has exactly that content and mode.
put_file() {
    local src="$1" dest="$2" mode="$3" backup="${4:-0}"
    if [ -f "$dest" ] && cmp -s "$src" "$dest"; then
        if [ "$(stat -c %a "$dest")" != "${mode#0}" ]; then
            act "set mode $mode on $dest" chmod "$mode" "$dest"
        fi
        return 0
    fi
    if [ "$backup" -eq 1 ] && [ -f "$dest" ]; then
        act "keep the previous $dest as $dest.bak" cp -p "$dest" "$dest.bak"
    fi
    act "write $dest" install -m "$mode" "$src" "$dest"
}

make_dir() {
    local dir="$1" mode="$2"
    if [ -d "$dir" ]; then
        if [ "$(stat -c %a "$dir")" != "${mode#0}" ]; then
            act "set mode $mode on $dir" chmod "$mode" "$dir"
        fi
        return 0
    fi
    act "create $dir" install -d -m "$mode" "$dir"
}

# Files that must be readable by the service's group (only on a live system, where the user exists).
chown_group() {
    if ! live_system || ! is_root; then return 0; fi
    local path="$1"
    [ "$(stat -c %U:%G "$path" 2>/dev/null)" = "root:$USER_NAME" ] && return 0
    act "chown root:$USER_NAME $path" chown "root:$USER_NAME" "$path"
}

default_config() {
    cat <<'EOF'
# se-forwarder configuration (written by install.sh because none existed).
# Keys and meaning: see the project's README and docs/configuration.md. Every key can also be set by an
# environment variable SE_FORWARDER_<SECTION>_<KEY>. Secrets never go here: name an environment
# variable (*_env keys, set in /etc/se-forwarder/se-forwarder.env) or a file (*_file keys, e.g. a
# credential: /run/credentials/se-forwarder.service/secret_NAME for /etc/se-forwarder/credentials/NAME).

[imds]
url = "http://169.254.169.254"
poll_interval = 1.0

[state]
dir = "/var/lib/se-forwarder"

# Until a real sink is configured, CloudEvents go to the journal (journalctl -u se-forwarder).
[[sinks]]
type = "stdout"

# [[sinks]]
# type = "eventhubs"
# fully_qualified_namespace = "NAMESPACE.servicebus.windows.net"
# eventhub = "scheduled-events"
# credential = "managed-identity"

[approvals]
# Observe only: a fresh install never approves an event early. Set to false once the rules and
# hooks below are what this VM needs.
dry_run = true

[telemetry]
log_format = "json"
EOF
}

# Without --python: the first of python3, python3.13, python3.12, python3.11 that is >= 3.11 (RHEL 9
# and Ubuntu 22.04 have an older python3 next to a newer python3.11 package).
pick_python() {
    local candidate
    for candidate in python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            python_bin="$candidate"
            return 0
        fi
    done
    return 1
}

check_python() {
    if [ "$python_explicit" -eq 0 ] && ! pick_python; then
        local found="none"
        if command -v python3 >/dev/null 2>&1; then
            found="python3 is $(python3 -c 'import platform; print(platform.python_version())' 2>/dev/null || echo unknown)"
        fi
        die "se-forwarder needs Python >= 3.11 and this machine has none ($found): install one (Debian 12, Ubuntu 24.04: python3; RHEL 9, Ubuntu 22.04: the python3.11 package) or give --python PATH"
    fi
    command -v "$python_bin" >/dev/null 2>&1 || die "$python_bin not found (use --python PATH)"
    "$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$python_bin is Python $("$python_bin" -c 'import platform; print(platform.python_version())'); se-forwarder needs >= 3.11 (use --python PATH)"
    if ! "$python_bin" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        if live_system && is_root && command -v apt-get >/dev/null 2>&1 && [ "$dry_run" -eq 0 ]; then
            say "installing python3-venv (the venv module is missing)"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null \
                || die "apt-get install python3-venv failed"
        else
            die "$python_bin has no venv/ensurepip module (install python3-venv)"
        fi
    fi
}

# --wheel URL: download it next to nothing else, into a private temporary folder (curl, or Python's
# urllib where curl is missing); the URL's query (a SAS token) is never printed.
fetch_wheel() {
    [ -n "$wheel_url" ] || return 0
    local name="${wheel_url%%\?*}"
    name="${name##*/}"
    case "$name" in *.whl) ;; *) die "--wheel $(shown_url "$wheel_url") does not name a .whl file" ;; esac
    fetch_dir="$(mktemp -d)"
    trap 'rm -rf "$fetch_dir"' EXIT
    say "download $(shown_url "$wheel_url")"
    if command -v curl >/dev/null 2>&1; then
        curl -fsS --retry 5 --retry-delay 2 --proto '=https,http' -o "$fetch_dir/$name" "$wheel_url" 2>/dev/null \
            || die "could not download $(shown_url "$wheel_url") (curl exit $?)"
    else
        "${python_bin}" - "$wheel_url" "$fetch_dir/$name" <<'PY' || die "could not download $(shown_url "$wheel_url")"
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as r, open(sys.argv[2], "wb") as f:
    f.write(r.read())
PY
    fi
    wheel="$fetch_dir/$name"
}

# The wheel must be the release's: its SHA-256 as --sha256 says (required for a URL).
verify_wheel() {
    [ -n "$wheel" ] && [ -n "$wheel_sha256" ] || return 0
    local actual
    actual="$(sha256sum "$wheel" | cut -d' ' -f1)"
    [ "$actual" = "$wheel_sha256" ] \
        || die "$(basename "$wheel"): SHA-256 is $actual, not $wheel_sha256 (--sha256): refusing to install it"
}

# What pip is asked to install, as one line: recorded in the venv so a repeat run can skip pip.
install_request() {
    if [ -n "$wheel" ]; then
        printf '%s extras=%s sha256=%s index=%s no_deps=%s find_links=%s\n' "$(basename "$wheel")" "$extras" \
            "$(sha256sum "$wheel" | cut -d' ' -f1)" "$(shown_url "$index_url")" "$no_deps" "$find_links"
    else
        printf '%s index=%s no_deps=%s find_links=%s\n' "$package_spec" "$(shown_url "$index_url")" \
            "$no_deps" "$find_links"
    fi
}

install_venv() {
    if [ ! -x "$venv/bin/python" ]; then
        check_python
    fi
    fetch_wheel
    verify_wheel
    if [ ! -x "$venv/bin/python" ]; then
        act "create the venv $venv" "$python_bin" -m venv "$venv"
    fi
    local request stamp="$venv/.se-forwarder-install"
    request="$(install_request)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$request" ] && [ -x "$venv/bin/se-forwarder" ]; then
        return 0
    fi
    local -a pip_args=(install --disable-pip-version-check --no-input --quiet --upgrade)
    [ "$no_deps" -eq 0 ] || pip_args+=(--no-deps)
    [ -z "$find_links" ] || pip_args+=(--no-index --find-links "$find_links")
    [ -z "$index_url" ] || pip_args+=(--index-url "$index_url")
    if [ -n "$wheel" ]; then
        if [ -n "$extras" ]; then pip_args+=("se-forwarder[$extras] @ file://$wheel"); else pip_args+=("$wheel"); fi
    else
        pip_args+=("$package_spec")
    fi
    local had_package=0
    if compgen -G "$venv/lib/python3*/site-packages/se_forwarder-*.dist-info" >/dev/null; then
        had_package=1
    fi
    local shown="pip ${pip_args[*]}"
    [ -z "$index_url" ] || shown="${shown//"$index_url"/$(shown_url "$index_url")}"
    act "$shown" "$venv/bin/python" -m pip "${pip_args[@]}"
    if [ -n "$wheel" ] && [ "$had_package" -eq 1 ]; then
        # pip keeps an installed version equal to the wheel's; a rebuilt wheel must replace it.
        act "reinstall se-forwarder from $wheel" "$venv/bin/python" -m pip install \
            --disable-pip-version-check --no-input --quiet --no-deps --force-reinstall "$wheel"
    fi
    if [ "$dry_run" -eq 0 ]; then
        [ -x "$venv/bin/se-forwarder" ] || die "pip did not install the se-forwarder command into $venv"
        printf '%s\n' "$request" > "$stamp"
    fi
}

ensure_user() {
    [ "$coordinator" -eq 0 ] || return 0  # the coordinator's unit runs as a DynamicUser
    if ! live_system || ! is_root; then
        say "skip creating the user $USER_NAME (prefix install)"
        return 0
    fi
    getent passwd "$USER_NAME" >/dev/null && return 0
    act "create the system user $USER_NAME" useradd --system --user-group --no-create-home \
        --home-dir "$STATE" --shell /usr/sbin/nologin --comment "se-forwarder agent" "$USER_NAME"
}

install_config() {
    make_dir "$etc" 0755
    make_dir "$etc/credentials" 0700
    local tmp
    if [ -n "$config_src" ]; then
        [ -r "$config_src" ] || die "config file $config_src cannot be read"
        put_file "$config_src" "$etc/config.toml" 0640 1
    elif [ ! -e "$etc/config.toml" ]; then
        tmp="$(mktemp)"; default_config > "$tmp"
        put_file "$tmp" "$etc/config.toml" 0640
        rm -f "$tmp"
    fi
    if [ -e "$etc/config.toml" ]; then chown_group "$etc/config.toml"; fi
    if [ -n "$env_src" ]; then
        [ -r "$env_src" ] || die "env file $env_src cannot be read"
        put_file "$env_src" "$etc/se-forwarder.env" 0600
    fi
}

# The coordinator's files: its config (no secret in it: readable by the unit's dynamic user), the
# signing key and the token table as credentials (root 0600, handed over by LoadCredential=), and
# the public key beside the config for the agents (approvalVerifyKeys).
install_coordinator_config() {
    make_dir "$etc" 0755
    make_dir "$etc/credentials" 0700
    local example="" tmp
    for example in "$script_dir/coordinator.toml" "$script_dir/../coordinator.toml"; do
        [ -f "$example" ] && break
    done
    if [ -n "$config_src" ]; then
        [ -r "$config_src" ] || die "config file $config_src cannot be read"
        put_file "$config_src" "$etc/coordinator.toml" 0644 1
    elif [ ! -e "$etc/coordinator.toml" ]; then
        [ -f "$example" ] || die "coordinator.toml not found next to install.sh (give --config-file FILE)"
        put_file "$example" "$etc/coordinator.toml" 0644
        say "edit $ETC/coordinator.toml: the values marked 'set this' (docs/deploy.md)"
    fi
    local key="$etc/credentials/signing.key" tokens="$etc/credentials/api.token"
    if [ -n "$signing_key_src" ]; then
        [ -r "$signing_key_src" ] || die "signing key $signing_key_src cannot be read"
        put_file "$signing_key_src" "$key" 0600
    elif [ ! -e "$key" ]; then
        act "make the signing key $key (se-forwarder fleet keygen)" make_signing_key "$key"
    fi
    if [ -f "$key" ] && [ "$dry_run" -eq 0 ]; then
        tmp="$(mktemp)"
        "$venv/bin/python" - "$key" > "$tmp" <<'PY' || { rm -f "$tmp"; die "$key is not an Ed25519 private key"; }
import base64, sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
key = serialization.load_pem_private_key(open(sys.argv[1], "rb").read(), password=None)
assert isinstance(key, Ed25519PrivateKey)
raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
print(base64.b64encode(raw).decode())
PY
        put_file "$tmp" "$etc/approvals.pub" 0644
        rm -f "$tmp"
    fi
    if [ -n "$token_src" ]; then
        [ -r "$token_src" ] || die "token file $token_src cannot be read"
        put_file "$token_src" "$tokens" 0600
    elif [ ! -e "$tokens" ]; then
        act "make the API token table $tokens (one token, named operator)" make_token_table "$tokens"
    fi
}

make_signing_key() {
    local work
    work="$(mktemp -d)"
    "$venv/bin/se-forwarder" fleet keygen --out "$work/signing.key" >/dev/null 2>&1 \
        || { rm -rf "$work"; die "se-forwarder fleet keygen failed"; }
    install -m 0600 "$work/signing.key" "$1"
    rm -rf "$work"
}

make_token_table() {
    local token
    token="$(head -c 32 /dev/urandom | base64 | tr -d '\n')"
    (umask 077 && printf '# name token (docs/coordinator.md: [api] token_file)\noperator %s\n' "$token" > "$1")
}

link_unit() { mkdir -p "$1" && ln -s "$2" "$1/$(basename "$2")"; }

install_unit() {
    [ -f "$unit_src" ] || die "$UNIT not found next to install.sh (in $script_dir)"
    make_dir "$prefix$UNIT_DIR" 0755
    local before="$changed"
    put_file "$unit_src" "$unit_path" 0644
    if [ "$coordinator" -eq 1 ]; then
        :  # the coordinator's unit has its own restart limits
    elif [ "$systemd_version" -ge "$BACKOFF_SINCE" ] && [ ! -f "$script_dir/$BACKOFF" ]; then
        say "$BACKOFF not found next to install.sh: restarts after a failure stay RestartSec (5 s) apart"
    elif [ "$systemd_version" -ge "$BACKOFF_SINCE" ]; then
        make_dir "$prefix$UNIT_DIR/$UNIT.d" 0755
        put_file "$script_dir/$BACKOFF" "$backoff_path" 0644
    else
        say "systemd $systemd_version < $BACKOFF_SINCE: restarts after a failure stay RestartSec (5 s) apart"
    fi
    if [ "$changed" -ne "$before" ] && live_system && systemd_running; then
        act "reload systemd" systemctl daemon-reload
    fi
    if live_system; then
        systemctl is-enabled --quiet "$UNIT" 2>/dev/null || act "enable $UNIT" systemctl enable --quiet "$UNIT"
    elif command -v systemctl >/dev/null 2>&1; then
        systemctl --root="$prefix" is-enabled --quiet "$UNIT" 2>/dev/null \
            || act "enable $UNIT in $prefix" systemctl --root="$prefix" enable --quiet "$UNIT"
    else
        local wants="$prefix$UNIT_DIR/multi-user.target.wants"
        [ -L "$wants/$UNIT" ] || act "enable $UNIT in $prefix" \
            link_unit "$wants" "$UNIT_DIR/$UNIT"
    fi
}

start_service() {
    if ! live_system || [ "$start" -eq 0 ]; then return 0; fi
    if ! systemd_running; then say "systemd is not running here: not starting $UNIT"; return 0; fi
    if ! systemctl is-active --quiet "$UNIT"; then
        act "start $UNIT" systemctl start "$UNIT"
    elif [ "$changed" -eq 1 ]; then
        act "restart $UNIT" systemctl restart "$UNIT"
    fi
}

remove_path() {
    local path="$1"
    [ -e "$path" ] || [ -L "$path" ] || return 0
    act "remove $path" rm -rf -- "$path"
}

uninstall() {
    if live_system && systemd_running && systemctl is-active --quiet "$UNIT" 2>/dev/null; then
        act "stop $UNIT" systemctl stop "$UNIT"
    fi
    if [ -f "$unit_path" ]; then
        if live_system; then
            act "disable $UNIT" systemctl disable --quiet "$UNIT"
        elif command -v systemctl >/dev/null 2>&1; then
            act "disable $UNIT in $prefix" systemctl --root="$prefix" disable --quiet "$UNIT"
        fi
    fi
    remove_path "$prefix$UNIT_DIR/multi-user.target.wants/$UNIT"
    remove_path "$unit_path"
    [ "$coordinator" -eq 1 ] || remove_path "$backoff_path"
    local other=se-forwarder-coordinator.service
    [ "$coordinator" -eq 0 ] || other=se-forwarder.service
    if [ -f "$prefix$UNIT_DIR/$other" ]; then
        say "kept $prefix$OPT: $other uses it too"
    else
        remove_path "$prefix$OPT"
    fi
    if live_system && systemd_running && [ "$changed" -eq 1 ]; then
        act "reload systemd" systemctl daemon-reload
    fi
    if [ "$purge" -eq 1 ] && [ "$coordinator" -eq 1 ]; then
        remove_path "$etc/coordinator.toml"
        remove_path "$etc/coordinator.toml.bak"
        remove_path "$etc/approvals.pub"
        remove_path "$etc/credentials/signing.key"
        remove_path "$etc/credentials/api.token"
    elif [ "$purge" -eq 1 ]; then
        remove_path "$prefix$UNIT_DIR/$UNIT.d"
        remove_path "$etc"
        remove_path "$prefix$STATE"
        remove_path "$prefix$LOGS"
        if live_system && is_root && getent passwd "$USER_NAME" >/dev/null; then
            act "remove the user $USER_NAME" userdel "$USER_NAME"
        fi
    else
        say "kept $etc and $prefix$STATE (use --purge to remove them)"
    fi
}

if live_system && ! is_root && [ "$dry_run" -eq 0 ]; then
    die "run as root (or use --prefix DIR / --dry-run)"
fi

if [ "$mode" = "uninstall" ]; then
    uninstall
else
    ensure_user
    install_venv
    if [ "$coordinator" -eq 1 ]; then install_coordinator_config; else install_config; fi
    install_unit
    start_service
fi
if [ "$changed" -eq 0 ]; then say "nothing to change"; fi
