"""`check` tests the state directory by doing what the agent does (create it if needed, write,
fsync and remove a file), so it never says ok where `run` would fail: not for root, not on a
read-only mount, not on /proc."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.config import write_config

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="shows that even root gets FAIL")


def check_state_line(simulator, tmp_path: Path, state: Path) -> tuple[int, str]:
    config = write_config(tmp_path / "c.toml", sinks=[{"type": "file", "path": str(tmp_path / "o")}],
                          imds={"url": simulator.url}, state={"dir": str(state)})
    result = cli("check", "--config", str(config))
    [line] = [ln for ln in result.stdout.splitlines() if ln.split(":")[0].endswith(" state")]
    return result.returncode, line


def run_once(simulator, tmp_path: Path, state: Path) -> subprocess.CompletedProcess:
    return cli("run", "--once", "--imds-url", simulator.url, "--state-dir", str(state),
               "--sink", f"file:{tmp_path / 'run.jsonl'}")


@contextlib.contextmanager
def read_only_tmpfs(path: Path):
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@root_only
def test_check_fails_on_a_read_only_state_directory_as_root_like_run(simulator, tmp_path):
    with read_only_tmpfs(tmp_path / "state") as state:
        code, line = check_state_line(simulator, tmp_path, state)
        assert code == 1
        assert line.startswith(f"FAIL  state: {state} is not writable: Read-only file system")
        assert "give the agent a writable [state] dir" in line
        assert run_once(simulator, tmp_path, state).returncode != 0


@root_only
def test_check_fails_on_a_directory_that_cannot_be_made_in_a_read_only_mount(simulator, tmp_path):
    with read_only_tmpfs(tmp_path / "mnt") as mount:
        code, line = check_state_line(simulator, tmp_path, mount / "state")
        assert code == 1
        assert line.startswith(f"FAIL  state: {mount / 'state'} cannot be created: Read-only file system")
        assert run_once(simulator, tmp_path, mount / "state").returncode != 0


@root_only
@pytest.mark.parametrize("state", ["/proc", "/proc/x"])
def test_check_fails_on_proc_like_run(simulator, tmp_path, state):
    code, line = check_state_line(simulator, tmp_path, Path(state))
    assert code == 1 and line.startswith(f"FAIL  state: {state} ")
    assert "set [state] dir elsewhere" in line
    assert run_once(simulator, tmp_path, Path(state)).returncode != 0


def test_a_directory_still_to_make_is_ok_and_left_as_it_was(simulator, tmp_path):
    state = tmp_path / "new" / "deeper" / "state"
    code, line = check_state_line(simulator, tmp_path, state)
    assert code == 0, line
    assert line.startswith(f"ok    state: {state} can be created and written by ")
    assert not (tmp_path / "new").exists()
    assert run_once(simulator, tmp_path, state).returncode == 0


def test_a_writable_directory_is_ok_and_no_file_is_left_behind(simulator, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    code, line = check_state_line(simulator, tmp_path, state)
    assert code == 0 and "is writable by " in line and "(tested" in line
    assert list(state.iterdir()) == []


def test_a_corrupt_outbox_database_fails(simulator, control, tmp_path):
    state = tmp_path / "state"
    control.add(EventType="Reboot")
    assert run_once(simulator, tmp_path, state).returncode == 0
    code, line = check_state_line(simulator, tmp_path, state)
    assert code == 0 and line.endswith("its outbox database is sound")
    database = state / "outbox.sqlite3"
    database.write_bytes(os.urandom(100) + database.read_bytes()[100:])
    code, line = check_state_line(simulator, tmp_path, state)
    assert code == 1 and line.startswith("FAIL  state: ") and str(database) in line
    assert run_once(simulator, tmp_path, state).returncode != 0
