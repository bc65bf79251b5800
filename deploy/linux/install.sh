#!/usr/bin/env bash
# Install, upgrade or remove the se-forwarder agent as a hardened systemd service.
#
#   /opt/se-forwarder/venv                 Python venv with the se-forwarder package
#   /etc/se-forwarder/config.toml          configuration (written only if absent, or from --config-file)
#   /etc/se-forwarder/se-forwarder.env     secrets as KEY=VALUE (root 0600), read by systemd
#   /etc/se-forwarder/credentials/         secret files for LoadCredential= (root 0700)
#   /etc/systemd/system/se-forwarder.service
#   /etc/systemd/system/se-forwarder.service.d/10-restart-backoff.conf   (systemd >= 254 only)
#   /var/lib/se-forwarder                  state (made by systemd: StateDirectory=)
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
  --package SPEC      pip requirement to install (default: se-forwarder[eventhubs,queue])
  --wheel FILE        install this wheel instead (with the extras of --extras)
  --extras LIST       extras for --wheel (default: eventhubs,queue; "" for none)
  --find-links DIR    install offline from this wheelhouse only (pip --no-index)
  --no-deps           install only the package; its dependencies are already present
  --python PY         interpreter for the venv (default: the first python3, python3.13,
                      python3.12, python3.11 that is >= 3.11)
  --config-file FILE  install FILE as config.toml (a different existing one is kept as .bak)
  --env-file FILE     install FILE as se-forwarder.env (secrets, root 0600)
  --no-start          install and enable the service, but do not (re)start it
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
package_spec="se-forwarder[eventhubs,queue]"
wheel=""
extras="eventhubs,queue"
find_links=""
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
        --extras) [ "$#" -ge 2 ] || die "--extras needs a value"; extras="$2"; shift 2 ;;
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
if [ -n "$wheel" ]; then
    [ -f "$wheel" ] || die "wheel $wheel does not exist"
    wheel="$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")"
fi

# Paths as the running system sees them, and where this run writes them.
readonly OPT=/opt/se-forwarder ETC=/etc/se-forwarder UNIT_DIR=/etc/systemd/system
readonly UNIT=se-forwarder.service USER_NAME=se-forwarder
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
# Keys and meaning: see the project's README and docs/design.md. Every key can also be set by an
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
}

check_python() {
    if [ "$python_explicit" -eq 0 ]; then pick_python; fi
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

# What pip is asked to install, as one line: recorded in the venv so a repeat run can skip pip.
install_request() {
    local req
    if [ -n "$wheel" ]; then
        req="$wheel"
        [ -z "$extras" ] || req="se-forwarder[$extras] @ file://$wheel"
        printf '%s sha256=%s no_deps=%s find_links=%s\n' "$req" \
            "$(sha256sum "$wheel" | cut -d' ' -f1)" "$no_deps" "$find_links"
    else
        printf '%s no_deps=%s find_links=%s\n' "$package_spec" "$no_deps" "$find_links"
    fi
}

install_venv() {
    if [ ! -x "$venv/bin/python" ]; then
        check_python
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
    if [ -n "$wheel" ]; then
        if [ -n "$extras" ]; then pip_args+=("se-forwarder[$extras] @ file://$wheel"); else pip_args+=("$wheel"); fi
    else
        pip_args+=("$package_spec")
    fi
    local had_package=0
    if compgen -G "$venv/lib/python3*/site-packages/se_forwarder-*.dist-info" >/dev/null; then
        had_package=1
    fi
    act "pip ${pip_args[*]}" "$venv/bin/python" -m pip "${pip_args[@]}"
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

link_unit() { mkdir -p "$1" && ln -s "$2" "$1/$(basename "$2")"; }

install_unit() {
    [ -f "$unit_src" ] || die "$UNIT not found next to install.sh (in $script_dir)"
    make_dir "$prefix$UNIT_DIR" 0755
    local before="$changed"
    put_file "$unit_src" "$unit_path" 0644
    if [ "$systemd_version" -ge "$BACKOFF_SINCE" ] && [ ! -f "$script_dir/$BACKOFF" ]; then
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
    remove_path "$backoff_path"
    remove_path "$prefix$OPT"
    if live_system && systemd_running && [ "$changed" -eq 1 ]; then
        act "reload systemd" systemctl daemon-reload
    fi
    if [ "$purge" -eq 1 ]; then
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
    install_config
    install_unit
    start_service
fi
if [ "$changed" -eq 0 ]; then say "nothing to change"; fi
