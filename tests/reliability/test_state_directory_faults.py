"""State directory faults: one clear line and a non-zero exit, or safe recovery; never silent loss.

The full-disk and read-only cases mount a small tmpfs (the tests run as root, as CI does); where
mounting is not permitted they are skipped with that reason, and the simulated-write-error test
below still covers the agent's handling of a failing write.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from se_forwarder import cloudevents as ce
from se_forwarder.delivery import DeliveryWorker
from se_forwarder.differ import diff
from se_forwarder.errors import StateError
from se_forwarder.model import VmIdentity, parse_document
from se_forwarder.outbox import Outbox
from se_forwarder.sinks.file import FileSink
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.paths import ROOT
from tests.support.waiting import wait_for


def run_once(simulator, state: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "se_forwarder", "run", "--once", "--imds-url", simulator.url,
         "--state-dir", str(state), "--sink", f"file:{out}"],
        capture_output=True, text=True, timeout=60, cwd=ROOT)


def seed_state(simulator, control, tmp_path) -> Path:
    state = tmp_path / "state"
    control.add(EventType="Reboot")
    assert run_once(simulator, state, tmp_path / "seed.jsonl").returncode == 0
    return state


def assert_one_clear_line(result, *words):
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_corrupted_database_is_one_clear_line_and_non_zero(simulator, control, tmp_path):
    state = seed_state(simulator, control, tmp_path)
    db = state / "outbox.sqlite3"
    data = bytearray(db.read_bytes())
    data[0:100] = os.urandom(100)  # the header: SQLite no longer recognises the file
    db.write_bytes(bytes(data))
    assert_one_clear_line(run_once(simulator, state, tmp_path / "o.jsonl"), str(db))


def test_truncated_database_is_one_clear_line_and_non_zero(simulator, control, tmp_path):
    state = seed_state(simulator, control, tmp_path)
    for i in range(30):
        control.add(EventType="Reboot", Description="x" * 2000 + str(i))
    assert run_once(simulator, state, tmp_path / "o.jsonl").returncode == 0
    db = state / "outbox.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    assert_one_clear_line(run_once(simulator, state, tmp_path / "o.jsonl"), "state database")


def test_a_state_dir_that_is_a_file_is_one_clear_line(simulator, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    assert_one_clear_line(run_once(simulator, blocker, tmp_path / "o.jsonl"), "state")


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); "
                    "the simulated write error test covers the agent's handling")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; the filler file to delete."""
    filler = directory / "filler"
    # Unbuffered: a partial last write leaves nothing for close() to flush into ENOSPC again.
    with open(filler, "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:  # until ENOSPC
            fh.write(b"\0" * 65536)
    return filler


def test_read_only_state_directory_is_one_clear_line(simulator, control, tmp_path):
    with tmpfs(tmp_path / "state", "4m") as state:
        control.add(EventType="Reboot")
        assert run_once(simulator, state, tmp_path / "seed.jsonl").returncode == 0
        remount(state, "ro")
        result = run_once(simulator, state, tmp_path / "o.jsonl")
        assert_one_clear_line(result, "read-only")


def test_full_disk_loses_nothing_and_the_agent_catches_up(simulator, control, agents, tmp_path):
    out = tmp_path / "o.jsonl"
    with tmpfs(tmp_path / "state", "2m") as state:
        agent = AgentProcess(["--imds-url", simulator.url, "--state-dir", str(state),
                              "--sink", f"file:{out}", "--poll-interval", "0.1"],
                             env={"SE_FORWARDER_IMDS_MAX_BACKOFF": "0.5"},
                             log_path=tmp_path / "agent.log").start()
        agents.append(agent)
        first = control.add(EventType="Reboot")["EventId"]
        wait_for(lambda: read_jsonl(out), what="first delivery")
        filler = fill(state)
        added = [control.add(EventType="Reboot", Description="y" * 3000)["EventId"]
                 for _ in range(20)]
        wait_for(lambda: "disk is full" in (tmp_path / "agent.log").read_text(), timeout=20,
                 what="the agent to report the full disk")
        assert agent.alive(), "the agent must keep polling, not crash-loop"
        filler.unlink()
        expected = {f"{i}/scheduled" for i in [first, *added]}
        wait_for(lambda: {e["id"] for e in read_jsonl(out)} == expected, timeout=30,
                 what="catch-up after space is freed")
        assert agent.terminate() == 0
    ids = [e["id"] for e in read_jsonl(out)]
    assert len(ids) == len(set(ids))


def test_a_full_state_disk_never_makes_the_file_sink_write_a_line_twice(tmp_path):
    """The file sink writes a line, then the outbox cannot record that it did (its disk is full):
    the worker offers the same event again and again until there is room, and the file still
    has it once."""
    out = tmp_path / "o.jsonl"
    with tmpfs(tmp_path / "state", "2m") as state:
        box = Outbox(state)
        document = parse_document({"DocumentIncarnation": 2, "Events": [
            {"EventId": "A", "EventType": "Reboot", "EventStatus": "Scheduled",
             "Resources": ["vm0"], "NotBefore": ""}]})
        box.record(document, ce.transition_rows(diff(None, document),
                                                VmIdentity.from_hostname("vm0"), datetime.now(UTC)))
        box.register_sinks(["file"])
        worker = DeliveryWorker(FileSink("file", out), state, threading.Event())
        filler = fill(state)
        for _ in range(3):
            with pytest.raises(sqlite3.OperationalError, match="full"):
                worker.deliver_once(box)  # written, but the cursor cannot move
        filler.unlink()
        assert worker.deliver_once(box) == 0.0
        assert box.pending("file", 10) == []
        box.close()
    assert [e["id"] for e in read_jsonl(out)] == ["A/scheduled"]


def test_simulated_write_error_is_a_state_error_naming_the_cause(tmp_path, monkeypatch):
    box = Outbox(tmp_path)

    class FullDisk:
        def __init__(self, real):
            self.real = real

        def execute(self, sql, *args):
            if sql.startswith("INSERT"):
                raise sqlite3.OperationalError("database or disk is full")
            return self.real.execute(sql, *args)

        def executemany(self, sql, *args):
            raise sqlite3.OperationalError("database or disk is full")

    box._db = FullDisk(box._db)  # the only way to make SQLite's writes fail without a real disk
    with pytest.raises(StateError, match="disk is full"):
        box.set_meta({"k": "v"})
    time.sleep(0)
