"""The systemd unit: valid for systemd, sandboxed (exposure <= 2.0), and still able to do its job."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from .conftest import UNIT_SRC

UNIT = "se-forwarder.service"
MAX_EXPOSURE = 2.0


def unit_settings(path: Path) -> dict[str, list[str]]:
    """Key -> every value it is given in the unit (systemd keys may repeat)."""
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def verify_root(installed_prefix: Path, tmp_path: Path) -> Path:
    """A root with the installed unit and agent, plus the host's systemd units it depends on."""
    root = tmp_path / "verify-root"
    shutil.copytree(installed_prefix / "etc", root / "etc", symlinks=True)
    agent = Path("opt/se-forwarder/venv/bin/se-forwarder")
    (root / agent).parent.mkdir(parents=True)
    shutil.copy2(installed_prefix / agent, root / agent)
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    return root


def test_systemd_analyze_verify_accepts_the_installed_unit(
    systemd_analyze: str, installed_prefix: Path, tmp_path: Path
) -> None:
    root = verify_root(installed_prefix, tmp_path)
    proc = subprocess.run(
        [systemd_analyze, "verify", f"--root={root}", "--man=no", UNIT],
        capture_output=True, text=True, timeout=60, check=False,
    )
    # verify exits 0 on unknown keys and bad values too; it only warns. Any output is a finding.
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr
    assert proc.stdout.strip() == "", proc.stdout


def test_systemd_analyze_security_rates_the_unit_at_most_2(systemd_analyze: str) -> None:
    proc = subprocess.run(
        [systemd_analyze, "security", "--offline=true", "--no-pager", str(UNIT_SRC)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
    assert match, proc.stdout[-2000:]
    assert float(match.group(1)) <= MAX_EXPOSURE, proc.stdout


def test_sandbox_still_lets_the_agent_reach_imds_sinks_and_its_state() -> None:
    unit = unit_settings(UNIT_SRC)
    assert unit["ExecStart"] == [
        "/opt/se-forwarder/venv/bin/se-forwarder run --config /etc/se-forwarder/config.toml"
    ]
    # IMDS (169.254.169.254), Event Hubs and Storage need IPv4/IPv6; journald and D-Bus need AF_UNIX.
    families = " ".join(unit["RestrictAddressFamilies"]).split()
    assert {"AF_INET", "AF_INET6", "AF_UNIX"} <= set(families)
    assert unit.get("PrivateNetwork", ["no"]) == ["no"]
    assert "IPAddressDeny" not in unit
    # The state dir is the config's default and the only writable place besides logs and /tmp.
    assert unit["StateDirectory"] == ["se-forwarder"]
    assert unit["ProtectSystem"] == ["strict"]
    # Not root, no capabilities, restarted on failure, bounded memory, secrets from root-only files.
    assert unit["User"] == ["se-forwarder"]
    assert unit["CapabilityBoundingSet"] == [""]
    assert unit["NoNewPrivileges"] == ["yes"]
    assert unit["Restart"] == ["on-failure"]
    assert unit["MemoryMax"]
    assert unit["EnvironmentFile"] == ["-/etc/se-forwarder/se-forwarder.env"]
    assert unit["LoadCredential"] == ["secret:/etc/se-forwarder/credentials"]
    # The agent exits within 5 s of SIGTERM; the stop timeout leaves room for that.
    assert int(unit["TimeoutStopSec"][0]) > 5
