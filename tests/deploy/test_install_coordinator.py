"""`install.sh --coordinator`, run for real into a prefix: the coordinator's unit, its config, a
signing key made by `se-forwarder fleet keygen` (its public key beside the config, for the agents)
and a token table, all with the modes the unit's LoadCredential= expects."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from .conftest import REPO, TOOLS, run_install, tool

ETC = Path("etc/se-forwarder")
UNIT = Path("etc/systemd/system/se-forwarder-coordinator.service")
WANTS = Path("etc/systemd/system/multi-user.target.wants/se-forwarder-coordinator.service")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def offline(*args: object) -> list[object]:
    """The wheel with the package's own dependencies, from the tools' wheelhouse (no index), so
    that `se-forwarder fleet keygen` runs in the venv; no extras (the coordinator's SDKs are not
    needed to lay the files down)."""
    tool("python")  # skips the test when the tools were never installed
    return [*args, "--extras", "", "--find-links", TOOLS / "wheelhouse"]


def test_coordinator_install_lays_down_unit_config_key_and_token_table(tmp_path: Path, wheel: Path) -> None:
    root = tmp_path / "root"
    proc = run_install(*offline("--coordinator", "--prefix", root, "--wheel", wheel))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / UNIT).read_bytes() == (REPO / "deploy/linux/se-forwarder-coordinator.service").read_bytes()
    assert os.readlink(root / WANTS) == "/etc/systemd/system/se-forwarder-coordinator.service"
    assert (root / ETC / "coordinator.toml").read_bytes() == (REPO / "deploy/coordinator.toml").read_bytes()
    assert mode(root / ETC / "coordinator.toml") == 0o644  # no secret; the unit's dynamic user reads it
    assert mode(root / ETC / "credentials") == 0o700
    key_file = root / ETC / "credentials/signing.key"
    assert mode(key_file) == 0o600
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert (root / ETC / "approvals.pub").read_text().strip() == base64.b64encode(raw).decode()
    tokens = root / ETC / "credentials/api.token"
    assert mode(tokens) == 0o600
    (entry,) = [line for line in tokens.read_text().splitlines() if not line.startswith("#")]
    name, token = entry.split()
    assert name == "operator" and len(token) >= 40
    assert not (root / "etc/se-forwarder/config.toml").exists()  # the agent's config is not touched
    assert not (root / "etc/systemd/system/se-forwarder-coordinator.service.d").exists()
    again = run_install(*offline("--coordinator", "--prefix", root, "--wheel", wheel))
    assert again.returncode == 0 and "nothing to change" in again.stdout, again.stdout + again.stderr
    assert tokens.read_text().endswith(f"operator {token}\n")  # kept: never made twice


def test_coordinator_install_takes_a_given_key_and_token_table(tmp_path: Path, wheel: Path) -> None:
    venv_python = tmp_path / "root/opt/se-forwarder/venv/bin/python"
    key_dir = tmp_path / "keys"
    key_dir.mkdir()
    subprocess.run(["python3", "-m", "se_forwarder", "fleet", "keygen", "--out", str(key_dir / "k")],
                   cwd=REPO, check=True, capture_output=True)
    table = key_dir / "tokens"
    table.write_text("alice 0123456789abcdef0123456789abcdef\n")
    proc = run_install(*offline("--coordinator", "--prefix", tmp_path / "root", "--wheel", wheel,
                                "--signing-key", key_dir / "k", "--token-file", table))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    credentials = tmp_path / "root" / ETC / "credentials"
    assert (credentials / "signing.key").read_bytes() == (key_dir / "k").read_bytes()
    assert (credentials / "api.token").read_bytes() == table.read_bytes()
    public = (tmp_path / "root" / ETC / "approvals.pub").read_text()
    assert public.strip() == (key_dir / "k.pub").read_text().strip()
    assert venv_python.exists()


def test_coordinator_options_without_coordinator_are_refused(tmp_path: Path, wheel: Path) -> None:
    proc = run_install("--prefix", tmp_path / "root", "--wheel", wheel, "--signing-key", wheel)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "install.sh: error: --signing-key and --token-file go with --coordinator")


def test_coordinator_uninstall_keeps_the_venv_the_agent_uses(tmp_path: Path, wheel: Path) -> None:
    root = tmp_path / "root"
    for extra in ((), ("--coordinator",)):
        proc = run_install(*offline(*extra, "--prefix", root, "--wheel", wheel))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_install("--coordinator", "--uninstall", "--prefix", root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / UNIT).exists()
    assert (root / "opt/se-forwarder/venv/bin/se-forwarder").exists()
    assert "se-forwarder.service uses it too" in proc.stdout
