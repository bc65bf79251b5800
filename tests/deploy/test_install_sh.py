"""deploy/linux/install.sh, run for real into a prefix (as for an image or a package)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

from se_forwarder import config

from .conftest import UNIT_SRC, run_install

UNIT_REL = Path("etc/systemd/system/se-forwarder.service")
WANTS_REL = Path("etc/systemd/system/multi-user.target.wants/se-forwarder.service")
BACKOFF_REL = Path("etc/systemd/system/se-forwarder.service.d/10-restart-backoff.conf")
CONFIG_REL = Path("etc/se-forwarder/config.toml")
VENV_REL = Path("opt/se-forwarder/venv")


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root with its type, mode, size, mtime and (for files) content hash."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(path)
            out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_install_lays_down_venv_unit_config_and_enables_the_service(
    installed_prefix: Path, wheel: Path
) -> None:
    venv = installed_prefix / VENV_REL
    proc = subprocess.run(
        [str(venv / "bin/python"), "-c",
         "import importlib.metadata as m; print(m.version('se-forwarder'))"],
        capture_output=True, text=True, timeout=30, check=True,
    )
    assert proc.stdout.strip() == wheel.name.split("-")[1]
    assert os.access(venv / "bin/se-forwarder", os.X_OK)
    assert (installed_prefix / UNIT_REL).read_bytes() == UNIT_SRC.read_bytes()
    assert os.readlink(installed_prefix / WANTS_REL) == "/etc/systemd/system/se-forwarder.service"
    assert mode(installed_prefix / CONFIG_REL) == 0o640
    assert mode(installed_prefix / "etc/se-forwarder/credentials") == 0o700


def test_default_config_is_valid_and_only_observes(installed_prefix: Path) -> None:
    settings = config.load(installed_prefix / CONFIG_REL, env={})
    assert settings.imds.url == "http://169.254.169.254"
    assert str(settings.state.dir) == "/var/lib/se-forwarder"
    assert settings.approvals.dry_run is True


def test_second_run_changes_nothing(installed_prefix: Path, wheel: Path) -> None:
    before = snapshot(installed_prefix)
    proc = run_install("--prefix", installed_prefix, "--wheel", wheel, "--no-deps")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing to change" in proc.stdout
    assert snapshot(installed_prefix) == before


def test_dry_run_reports_the_install_and_writes_nothing(tmp_path: Path, wheel: Path) -> None:
    prefix = tmp_path / "root"
    proc = run_install("--prefix", prefix, "--dry-run", "--wheel", wheel, "--no-deps")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "would create the venv" in proc.stdout
    assert f"would write {prefix / UNIT_REL}" in proc.stdout
    assert not prefix.exists()


def test_given_config_replaces_the_old_one_and_keeps_it_as_bak(
    prefix_copy: Path, wheel: Path, tmp_path: Path
) -> None:
    old = (prefix_copy / CONFIG_REL).read_text()
    new = tmp_path / "config.toml"
    new.write_text('[imds]\nurl = "http://127.0.0.1:8080"\n')
    proc = run_install("--prefix", prefix_copy, "--wheel", wheel, "--no-deps", "--config-file", new)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (prefix_copy / CONFIG_REL).read_text() == new.read_text()
    assert (prefix_copy / "etc/se-forwarder/config.toml.bak").read_text() == old
    again = run_install("--prefix", prefix_copy, "--wheel", wheel, "--no-deps", "--config-file", new)
    assert "nothing to change" in again.stdout


def test_env_file_is_installed_readable_by_root_only(
    prefix_copy: Path, wheel: Path, tmp_path: Path
) -> None:
    env_file = tmp_path / "secrets.env"
    env_file.write_text("APPROVALS_KEY=c2VjcmV0LWtleS1mb3ItdGVzdHM=\n")
    env_file.chmod(0o644)
    proc = run_install("--prefix", prefix_copy, "--wheel", wheel, "--no-deps", "--env-file", env_file)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = prefix_copy / "etc/se-forwarder/se-forwarder.env"
    assert installed.read_text() == env_file.read_text()
    assert mode(installed) == 0o600
    assert "c2VjcmV0" not in proc.stdout + proc.stderr


def test_uninstall_removes_service_and_venv_but_keeps_config_and_state(prefix_copy: Path) -> None:
    state = prefix_copy / "var/lib/se-forwarder"
    state.mkdir(parents=True)
    (state / "outbox.sqlite").write_bytes(b"state")
    proc = run_install("--prefix", prefix_copy, "--uninstall")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (prefix_copy / "opt/se-forwarder").exists()
    assert not (prefix_copy / UNIT_REL).exists()
    assert not (prefix_copy / WANTS_REL).is_symlink()
    assert (prefix_copy / CONFIG_REL).exists()
    assert (state / "outbox.sqlite").read_bytes() == b"state"


def test_uninstall_purge_removes_config_and_state_too(prefix_copy: Path) -> None:
    (prefix_copy / "var/lib/se-forwarder").mkdir(parents=True)
    proc = run_install("--prefix", prefix_copy, "--uninstall", "--purge")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (prefix_copy / "etc/se-forwarder").exists()
    assert not (prefix_copy / "var/lib/se-forwarder").exists()
    assert not (prefix_copy / "opt/se-forwarder").exists()


def test_bad_arguments_end_with_one_clear_line(tmp_path: Path, wheel: Path) -> None:
    cases = {
        ("--bogus",): "install.sh: error: unknown option: --bogus",
        ("--prefix", tmp_path, "--wheel", tmp_path / "missing.whl"):
            f"install.sh: error: wheel {tmp_path / 'missing.whl'} does not exist",
        ("--prefix", tmp_path, "--purge"): "install.sh: error: --purge only goes with --uninstall",
        ("--prefix", tmp_path / "p", "--wheel", wheel, "--python", tmp_path / "python9"):
            f"install.sh: error: {tmp_path / 'python9'} not found (use --python PATH)",
    }
    for args, message in cases.items():
        proc = run_install(*args)
        assert proc.returncode != 0
        assert proc.stderr.strip().splitlines()[-1] == message


def test_restart_backoff_drop_in_is_installed_for_systemd_254_and_later(
    prefix_copy: Path, wheel: Path
) -> None:
    proc = run_install("--prefix", prefix_copy, "--wheel", wheel, "--no-deps",
                       "--systemd-version", "255")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = prefix_copy / BACKOFF_REL
    assert installed.read_bytes() == (UNIT_SRC.parent / BACKOFF_REL.name).read_bytes()
    assert mode(installed) == 0o644
    again = run_install("--prefix", prefix_copy, "--wheel", wheel, "--no-deps",
                        "--systemd-version", "255")
    assert "nothing to change" in again.stdout
    proc = run_install("--prefix", prefix_copy, "--uninstall")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not installed.exists()


def test_older_systemd_gets_no_drop_in_and_is_told_the_delay_stays_fixed(
    tmp_path: Path, wheel: Path
) -> None:
    prefix = tmp_path / "root"
    proc = run_install("--prefix", prefix, "--wheel", wheel, "--no-deps", "--systemd-version", "252")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (prefix / BACKOFF_REL).exists()
    assert ("install.sh: systemd 252 < 254: restarts after a failure stay RestartSec (5 s) apart"
            in proc.stdout.splitlines())
    bad = run_install("--prefix", prefix, "--systemd-version", "v255")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1] == (
        "install.sh: error: --systemd-version needs a number such as 255, not v255")
