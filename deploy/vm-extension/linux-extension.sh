#!/bin/sh
# Run as root by the Azure Custom Script Extension for Linux (protectedSettings.script), in the
# extension's download folder, next to install.sh, se-forwarder.service, 10-restart-backoff.conf and
# (from a release) the wheel (protectedSettings.fileUris); or, on a VM whose one Custom Script
# Extension is taken, as a managed Run Command (make-settings.sh --run-command): then it downloads
# those files itself from @@BASE_URI@@, with the SAS token of the protected parameter
# SE_RELEASE_SAS if there is one.
# The @@...@@ fields are filled in by bicep/modules/vm-agent.bicep or deploy/vm-extension/make-settings.sh.
# Every downloaded file is checked against the release's SHA256SUMS (carried in here, not downloaded)
# before anything runs: a file that does not match stops the install with one line.
# Config and environment travel base64-encoded so that no quoting can break them; the environment
# holds secrets and is written only to a root-only temporary folder, then installed root 0600.
set -eu
umask 077
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT INT TERM
base64 -d > "$work/config.toml" <<'SE_FORWARDER_B64'
@@CONFIG_B64@@
SE_FORWARDER_B64
base64 -d > "$work/se-forwarder.env" <<'SE_FORWARDER_B64'
@@ENV_B64@@
SE_FORWARDER_B64
base64 -d > "$work/SHA256SUMS" <<'SE_FORWARDER_B64'
@@SUMS_B64@@
SE_FORWARDER_B64
wheel='@@WHEEL@@'
base='@@BASE_URI@@'
index_url='@@INDEX_URL@@'
package='@@PACKAGE_SPEC@@'
extras='@@EXTRAS@@'
if [ -n "$base" ]; then  # a Run Command: nothing was downloaded for it
    mkdir "$work/release"
    cd "$work/release"
    sas="${SE_RELEASE_SAS:-}"
    [ -z "$sas" ] || sas="?${sas#\?}"
    for path in linux/install.sh linux/se-forwarder.service linux/10-restart-backoff.conf "$wheel"; do
        [ "$path" != "$wheel" ] || [ -z "$package" ] || continue
        curl -fsS --retry 5 --proto =https -o "./${path##*/}" "$base/$path$sas" \
            || { echo "se-forwarder: cannot download $base/$path" >&2; exit 1; }
    done
fi
# The release's files that were downloaded here (by their base name) must match its sums.
checked=0
while read -r digest path; do
    [ -n "$digest" ] || continue
    name="${path##*/}"
    [ -f "./$name" ] || continue
    actual="$(sha256sum "./$name" | cut -d' ' -f1)"
    if [ "$actual" != "$digest" ]; then
        echo "se-forwarder: $name: SHA-256 is $actual, not the release's $digest: refusing to install" >&2
        exit 1
    fi
    checked=$((checked + 1))
done < "$work/SHA256SUMS"
for name in install.sh se-forwarder.service; do
    grep -q "[ /]$name\$" "$work/SHA256SUMS" \
        || { echo "se-forwarder: $name is not in the release's SHA256SUMS: refusing to install" >&2; exit 1; }
done
# An empty environment leaves an existing /etc/se-forwarder/se-forwarder.env alone.
if [ -s "$work/se-forwarder.env" ]; then set -- --env-file "$work/se-forwarder.env"; else set --; fi
# A private index installs the package (a pinned requirement) or, with the wheel, its dependencies.
[ -z "$index_url" ] || set -- --index-url "$index_url" "$@"
if [ -n "$package" ]; then
    set -- --package "$package" "$@"
else
    digest="$(awk -v w="$wheel" '{ n = $2; sub(/.*\//, "", n) } n == w { print $1 }' "$work/SHA256SUMS")"
    [ -n "$digest" ] || { echo "se-forwarder: $wheel is not in the release's SHA256SUMS" >&2; exit 1; }
    set -- --wheel "./$wheel" --sha256 "$digest" --extras "$extras" "$@"
fi
echo "se-forwarder: $checked downloaded files match the release's SHA256SUMS"
bash ./install.sh --config-file "$work/config.toml" "$@"
