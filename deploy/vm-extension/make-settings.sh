#!/usr/bin/env bash
# Print the protected settings of the Azure Custom Script Extension that installs se-forwarder on a
# VM or a scale set, with the agent's config and environment (secrets) inside them:
#
#   make-settings.sh --os linux --base-uri https://HOST/se-forwarder/deploy \
#       --config config.toml --env se-forwarder.env > protected.json
#   az vm extension set -g RG --vm-name VM --name CustomScript \
#       --publisher Microsoft.Azure.Extensions --version 2.1 --protected-settings protected.json
#
# Linux: install.sh, se-forwarder.service and 10-restart-backoff.conf are downloaded from
# BASE/linux/, and the script (this folder's linux-extension.sh, filled in) runs as root from a
# root-only folder, so the secrets never appear on a command line. Windows: install.ps1 is
# downloaded from BASE/windows/ and run with the config base64-encoded on its command line (it holds
# no secrets); the environment is the protected setting seForwarderEnv, which install.ps1
# -EnvFromExtension decrypts on the VM.
# Protected settings are encrypted for the VM; keep protected.json itself out of version control.
set -euo pipefail

die() { printf 'make-settings.sh: error: %s\n' "$*" >&2; exit 1; }

os="" base="" config="" envfile="" package="se-forwarder[eventhubs,queue]"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --os) os="${2:-}"; shift 2 ;;
        --base-uri) base="${2:-}"; shift 2 ;;
        --config) config="${2:-}"; shift 2 ;;
        --env) envfile="${2:-}"; shift 2 ;;
        --package) package="${2:-}"; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | cut -c3-; exit 0 ;;
        *) die "unknown option: $1 (see --help)" ;;
    esac
done
case "$os" in linux|windows) ;; *) die "--os must be linux or windows" ;; esac
[ -n "$base" ] || die "--base-uri is required (the deploy/ folder of a release)"
case "$base" in https://*) ;; *) die "--base-uri must be an https:// URL" ;; esac
[ -r "$config" ] || die "--config: cannot read '$config'"
[ -z "$envfile" ] || [ -r "$envfile" ] || die "--env: cannot read '$envfile'"
# These end up inside JSON strings and (package) inside single quotes in a shell script.
for value in "$base" "$package"; do
    case "$value" in *[\"\'\\\ \&\|]*) die "quotes, backslashes, spaces, & and | are not allowed in '$value'" ;; esac
done
base="${base%/}"

b64() { base64 < "$1" | tr -d '\n'; }
config_b64="$(b64 "$config")"
env_b64=""
[ -z "$envfile" ] || env_b64="$(b64 "$envfile")"

if [ "$os" = linux ]; then
    template="$(dirname "${BASH_SOURCE[0]}")/linux-extension.sh"
    [ -r "$template" ] || die "$template not found"
    script="$(sed -e "s|@@CONFIG_B64@@|$config_b64|" -e "s|@@ENV_B64@@|$env_b64|" \
        -e "s|@@PACKAGE_SPEC@@|$package|" "$template" | base64 | tr -d '\n')"
    printf '{\n  "fileUris": [\n    "%s/linux/install.sh",\n    "%s/linux/se-forwarder.service",\n    "%s/linux/10-restart-backoff.conf"\n  ],\n  "script": "%s"\n}\n' \
        "$base" "$base" "$base" "$script"
else
    command="powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -File install.ps1"
    command="$command -PackageSpec $package -ConfigBase64 $config_b64"
    env_setting=""
    if [ -n "$env_b64" ]; then
        command="$command -EnvFromExtension"
        env_setting="$(printf ',\n  "seForwarderEnv": "%s"' "$env_b64")"
    fi
    printf '{\n  "fileUris": [\n    "%s/windows/install.ps1"\n  ],\n  "commandToExecute": "%s"%s\n}\n' \
        "$base" "$command" "$env_setting"
fi
