"""The coordinator's deployment files: a sandboxed systemd unit and an example config that loads."""

from __future__ import annotations

import re
import subprocess

from se_forwarder.fleet.coordinator.config import load

from .conftest import REPO
from .systemd import MAX_EXPOSURE, unit_settings

UNIT = REPO / "deploy" / "linux" / "se-forwarder-coordinator.service"
EXAMPLE = REPO / "deploy" / "coordinator.toml"


def test_systemd_analyze_security_rates_the_coordinator_unit_at_most_2(systemd_analyze: str) -> None:
    proc = subprocess.run(
        [systemd_analyze, "security", "--offline=true", "--no-pager", str(UNIT)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
    assert match, proc.stdout[-2000:]
    assert float(match.group(1)) <= MAX_EXPOSURE, proc.stdout


def test_the_unit_runs_the_coordinator_unprivileged_with_secrets_as_credentials() -> None:
    unit = unit_settings(UNIT)
    assert unit["ExecStart"] == [
        "/opt/se-forwarder/venv/bin/se-forwarder coordinator run --config /etc/se-forwarder/coordinator.toml"
    ]
    assert unit["DynamicUser"] == ["yes"]
    assert unit["CapabilityBoundingSet"] == [""]
    assert unit["ProtectSystem"] == ["strict"]
    assert "StateDirectory" not in unit  # no local state: the fold is rebuilt from blob and hub
    credentials = {v.split(":", 1)[0] for v in unit["LoadCredential"]}
    assert credentials == {"signing.key", "api.token"}


def test_the_example_config_loads_and_points_at_the_unit_credentials() -> None:
    settings = load(EXAMPLE)
    assert settings.key_file == "/run/credentials/se-forwarder-coordinator.service/signing.key"
    assert settings.api.token_file == "/run/credentials/se-forwarder-coordinator.service/api.token"
    assert settings.policy.shadow is True  # a first deployment decides and publishes, sends nothing
    assert settings.eventhub.access.credential == "managed-identity"
    assert "SharedAccessKey" not in EXAMPLE.read_text()


def test_every_value_the_example_shows_is_the_default_unless_it_says_otherwise() -> None:
    import re
    import tomllib

    from se_forwarder.fleet.coordinator.config import from_dict

    text = EXAMPLE.read_text()
    whole = from_dict(tomllib.loads(text))
    lines = text.splitlines()
    shown = [i for i, line in enumerate(lines) if re.match(r"^[a-z_]+ = ", line)]
    plain = [i for i in shown if "set this" not in lines[i] and "recommended" not in lines[i]]
    assert len(plain) > 20
    for i in plain:  # left out, a value said to be the default changes nothing
        without = "\n".join(lines[:i] + lines[i + 1:])
        assert from_dict(tomllib.loads(without)) == whole, f"line {i + 1} is not the default: {lines[i]}"
    marked = [lines[i] for i in shown if "recommended" in lines[i]]
    assert any(line.startswith("shadow = true") for line in marked)  # the code's default is false
