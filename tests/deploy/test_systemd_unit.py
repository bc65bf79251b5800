"""The systemd unit: valid for systemd, sandboxed (exposure <= 1.5), still able to do its job, never
disabled by a transient fault, and stopping with room for the hooks' grace."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from se_forwarder.agent import SHUTDOWN_GRACE
from se_forwarder.approvals.hook_process import DEFAULT_STOP_GRACE

from .conftest import UNIT_SRC
from .systemd import MAX_EXPOSURE, unit_settings

UNIT = "se-forwarder.service"
BACKOFF_SRC = UNIT_SRC.parent / "10-restart-backoff.conf"
SECONDS = {"": 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}


def seconds(value: str) -> float:
    """A systemd time span of one unit (``20``, ``5s``, ``5min``) in seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    assert match and match.group(2) in SECONDS, value
    return float(match.group(1)) * SECONDS[match.group(2)]


def systemd_version(systemd_analyze: str) -> int:
    out = subprocess.run([systemd_analyze, "--version"], capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[1])


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


def test_systemd_analyze_verify_accepts_the_unit_with_its_backoff_drop_in(
    systemd_analyze: str, installed_prefix: Path, tmp_path: Path
) -> None:
    if systemd_version(systemd_analyze) < 254:
        pytest.skip("this host's systemd is older than 254, which brought RestartSteps")
    root = verify_root(installed_prefix, tmp_path)
    drop_ins = root / "etc/systemd/system" / f"{UNIT}.d"
    drop_ins.mkdir(exist_ok=True)
    shutil.copy2(BACKOFF_SRC, drop_ins / BACKOFF_SRC.name)
    proc = subprocess.run(
        [systemd_analyze, "verify", f"--root={root}", "--man=no", UNIT],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0 and proc.stderr.strip() == proc.stdout.strip() == "", proc.stderr


def test_systemd_analyze_security_rates_the_unit_at_most_1_5(systemd_analyze: str) -> None:
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
    assert unit["Restart"] in (["on-failure"], ["always"])
    assert unit["MemoryMax"]
    assert unit["EnvironmentFile"] == ["-/etc/se-forwarder/se-forwarder.env"]
    assert unit["LoadCredential"] == ["secret:/etc/se-forwarder/credentials"]
    # The agent exits within 5 s of SIGTERM; the stop timeout leaves room for that.
    assert int(unit["TimeoutStopSec"][0]) > 5


def test_transient_faults_never_disable_the_service() -> None:
    unit = unit_settings(UNIT_SRC)
    # No start rate limit: a minute of a full disk or a missing secret (the agent exits 2 or 1,
    # again and again) never leaves the unit `failed`; systemd keeps starting it.
    assert unit["StartLimitIntervalSec"] == ["0"]
    assert "StartLimitBurst" not in unit and "StartLimitAction" not in unit
    assert unit["Restart"] in (["on-failure"], ["always"])
    assert "RestartPreventExitStatus" not in unit  # a config error (exit 2) is retried too
    assert seconds(unit["RestartSec"][0]) >= 1


def test_backoff_drop_in_grows_the_restart_delay_to_minutes() -> None:
    unit, backoff = unit_settings(UNIT_SRC), unit_settings(BACKOFF_SRC)
    assert BACKOFF_SRC.read_text().count("[Service]") == 1
    assert set(backoff) == {"RestartSteps", "RestartMaxDelaySec"}
    assert int(backoff["RestartSteps"][0]) >= 3
    assert seconds(backoff["RestartMaxDelaySec"][0]) >= 60 * seconds(unit["RestartSec"][0])


def test_stop_timeout_leaves_room_for_the_hooks_grace() -> None:
    unit = unit_settings(UNIT_SRC)
    # SIGTERM to the agent alone; it TERMs its hooks' groups, waits their grace, KILLs the rest.
    assert unit["KillMode"] == ["mixed"]
    grace_and_shutdown = max(DEFAULT_STOP_GRACE, SHUTDOWN_GRACE) + 1.0
    assert seconds(unit["TimeoutStopSec"][0]) >= grace_and_shutdown + 3.0  # a margin for Python
