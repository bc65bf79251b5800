#!/bin/sh
# Run as root by the Azure Custom Script Extension for Linux (protectedSettings.script), in the
# extension's download folder, next to install.sh, se-forwarder.service and 10-restart-backoff.conf
# (protectedSettings.fileUris).
# The @@...@@ fields are filled in by bicep/modules/vm-agent.bicep or deploy/vm-extension/make-settings.sh.
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
# An empty environment leaves an existing /etc/se-forwarder/se-forwarder.env alone.
if [ -s "$work/se-forwarder.env" ]; then set -- --env-file "$work/se-forwarder.env"; else set --; fi
bash ./install.sh --package '@@PACKAGE_SPEC@@' --config-file "$work/config.toml" "$@"
