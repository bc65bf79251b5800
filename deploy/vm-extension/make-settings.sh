#!/usr/bin/env bash
# Print the protected settings of the Azure Custom Script Extension that installs se-forwarder on a
# VM or a scale set, with the agent's config and environment (secrets) inside them:
#
#   make-settings.sh --os linux --release dist/se-forwarder-0.1.0 \
#       --base-uri https://ACCOUNT.blob.core.windows.net/releases/se-forwarder-0.1.0 \
#       --config config.toml --env se-forwarder.env > protected.json
#   az vm extension set -g RG --vm-name VM --name CustomScript \
#       --publisher Microsoft.Azure.Extensions --version 2.1 --protected-settings protected.json
#
# --release is the release folder scripts/release made (its SHA256SUMS and wheel name are read
# here; BASE is where it is hosted). Linux: the wheel, install.sh, se-forwarder.service and
# 10-restart-backoff.conf are downloaded from BASE, and the script (this folder's
# linux-extension.sh, filled in) checks each against the release's SHA256SUMS and runs as root from
# a root-only folder, so the secrets never appear on a command line. Windows: the wheel and
# install.ps1 are downloaded and install.ps1 runs with the wheel's SHA-256 and the config
# base64-encoded on its command line (it holds no secrets); the environment is the protected
# setting seForwarderEnv, which install.ps1 -EnvFromExtension decrypts on the VM.
# --run-command prints instead the script of a managed Run Command, for a VM whose one Custom Script
# Extension is taken by something else: it downloads the release itself (its SAS token as the
# protected parameter SE_RELEASE_SAS), checks it and installs (docs/deploy.md). A Run Command's
# script is readable by whoever may read the VM's run commands, so --env may then hold only
# APPROVALS_PUBLIC_KEYS (public keys).
# --sas TOKEN appends a read-only SAS token to every download (it stays in the protected settings);
# --index-url URL takes the dependencies from your private index; with --package SPEC too, the
# package itself instead of the wheel.
# Protected settings are encrypted for the VM; keep protected.json itself out of version control.
set -euo pipefail

die() { printf 'make-settings.sh: error: %s\n' "$*" >&2; exit 1; }

os="" base="" config="" envfile="" package="" release="" sas="" index_url="" extras="eventhubs,queue"
run_command=0
while [ "$#" -gt 0 ]; do
    case "$1" in
        --os) os="${2:-}"; shift 2 ;;
        --base-uri) base="${2:-}"; shift 2 ;;
        --config) config="${2:-}"; shift 2 ;;
        --env) envfile="${2:-}"; shift 2 ;;
        --package) package="${2:-}"; shift 2 ;;
        --release) release="${2:-}"; shift 2 ;;
        --sas) sas="${2:-}"; shift 2 ;;
        --index-url) index_url="${2:-}"; shift 2 ;;
        --extras) extras="${2:-}"; shift 2 ;;
        --run-command) run_command=1; shift ;;
        -h|--help) sed -n '2,31p' "$0" | cut -c3-; exit 0 ;;
        *) die "unknown option: $1 (see --help)" ;;
    esac
done
case "$os" in linux|windows) ;; *) die "--os must be linux or windows" ;; esac
[ -n "$base" ] || die "--base-uri is required (where the release folder is hosted)"
case "$base" in https://*) ;; *) die "--base-uri must be an https:// URL" ;; esac
[ -r "$config" ] || die "--config: cannot read '$config'"
[ -z "$envfile" ] || [ -r "$envfile" ] || die "--env: cannot read '$envfile'"
[ -n "$release" ] || die "--release is required (the folder scripts/release made: its SHA256SUMS and wheel)"
[ -r "$release/SHA256SUMS" ] || die "--release: no SHA256SUMS in '$release'"
wheel="$(awk '$2 ~ /\.whl$/ { print $2 }' "$release/SHA256SUMS")"
[ -n "$wheel" ] || die "--release: SHA256SUMS names no wheel"
wheel_sha256="$(awk -v w="$wheel" '$2 == w { print $1 }' "$release/SHA256SUMS")"
[ -z "$package" ] || [ -n "$index_url" ] || die "--package needs --index-url (your private index)"
[ -z "$index_url" ] || case "$index_url" in https://*) ;; *) die "--index-url must be an https:// URL" ;; esac
# These end up inside JSON strings and inside single quotes in a shell script.
for value in "$base" "$package" "$sas" "$index_url" "$extras"; do
    case "$value" in *[\"\'\\\ \|]*) die "quotes, backslashes, spaces and | are not allowed in '$value'" ;; esac
done
case "$sas" in \?*) sas="${sas#\?}" ;; esac
base="${base%/}"
q=""
[ -z "$sas" ] || q="?$sas"
if [ -z "$package" ]; then wheel_uri="$(printf ',\n    "%s/%s%s"' "$base" "$wheel" "$q")"; else wheel_uri=""; fi

b64() { base64 < "$1" | tr -d '\n'; }
config_b64="$(b64 "$config")"
env_b64=""
[ -z "$envfile" ] || env_b64="$(b64 "$envfile")"

if [ "$run_command" -eq 1 ]; then
    [ "$os" = linux ] || die "--run-command is for --os linux"
    [ -z "$sas" ] || die "--run-command takes no --sas: give it as the protected parameter SE_RELEASE_SAS"
    if [ -n "$envfile" ] && grep -v '^APPROVALS_PUBLIC_KEYS=' "$envfile" | grep -q '[^[:space:]]'; then
        die "--run-command: a Run Command's script is readable with the VM: --env may hold only APPROVALS_PUBLIC_KEYS"
    fi
fi

if [ "$os" = linux ]; then
    template="$(dirname "${BASH_SOURCE[0]}")/linux-extension.sh"
    [ -r "$template" ] || die "$template not found"
    sums_b64="$(b64 "$release/SHA256SUMS")"
    script="$(sed -e "s|@@CONFIG_B64@@|$config_b64|" -e "s|@@ENV_B64@@|$env_b64|" \
        -e "s|@@SUMS_B64@@|$sums_b64|" -e "s|@@WHEEL@@|$wheel|" -e "s|@@INDEX_URL@@|${index_url//&/\\&}|" \
        -e "s|@@EXTRAS@@|$extras|" -e "s|@@PACKAGE_SPEC@@|$package|" \
        -e "s|@@BASE_URI@@|$([ "$run_command" -eq 1 ] && printf '%s' "$base")|" "$template")"
    if [ "$run_command" -eq 1 ]; then
        printf '%s\n' "$script"
        exit 0
    fi
    script="$(printf '%s\n' "$script" | base64 | tr -d '\n')"
    printf '{\n  "fileUris": [\n    "%s/linux/install.sh%s",\n    "%s/linux/se-forwarder.service%s",\n    "%s/linux/10-restart-backoff.conf%s"%s\n  ],\n  "script": "%s"\n}\n' \
        "$base" "$q" "$base" "$q" "$base" "$q" "$wheel_uri" "$script"
else
    command="powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -File install.ps1"
    if [ -n "$package" ]; then
        command="$command -PackageSpec $package"
    else
        command="$command -Wheel $wheel -Sha256 $wheel_sha256 -Extras $extras"
    fi
    [ -z "$index_url" ] || command="$command -IndexUrl $index_url"
    command="$command -ConfigBase64 $config_b64"
    env_setting=""
    if [ -n "$env_b64" ]; then
        command="$command -EnvFromExtension"
        env_setting="$(printf ',\n  "seForwarderEnv": "%s"' "$env_b64")"
    fi
    printf '{\n  "fileUris": [\n    "%s/windows/install.ps1%s"%s\n  ],\n  "commandToExecute": "%s"%s\n}\n' \
        "$base" "$q" "$wheel_uri" "$command" "$env_setting"
fi
