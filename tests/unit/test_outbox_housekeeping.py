"""The state stays bounded while the agent runs: delivered events, dead letters, finished hook runs
and expired approval-message ids are pruned after the retention, and the freed pages go back to
the file system (incremental vacuum, with a one-time conversion of files made without it)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from se_forwarder import agent as agent_mod
from se_forwarder import config
from se_forwarder.agent import Agent
from se_forwarder.outbox import NewEvent, Outbox, db_path
from se_forwarder.outbox.hook_runs import PREPARE, RUNNING, SUCCEEDED
from tests.support.agent import read_jsonl
from tests.support.waiting import wait_for

PAYLOAD = json.dumps({"specversion": "1.0", "type": "com.azure.scheduledevents.scheduled",
                      "data": {"EventId": "X" * 36, "Resources": ["vm0"] * 4, "pad": "p" * 400}})


def _events(start: int, count: int, observed: float) -> list[NewEvent]:
    return [NewEvent(f"E{n}/scheduled", f"E{n}", "scheduled", "scheduled", PAYLOAD, observed)
            for n in range(start, start + count)]


def _size(state: Path) -> int:
    return sum(p.stat().st_size for p in state.glob("outbox.sqlite3*"))


def _rows(state: Path, table: str) -> int:
    db = sqlite3.connect(db_path(state))
    try:
        return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        db.close()


def test_200k_events_through_the_outbox_keep_the_file_bounded(tmp_path):
    """Events recorded, delivered and pruned as the running agent does, 1,000 at a time: the file
    (database and WAL) stays near its size after the first rounds instead of growing with them."""
    total, batch = 200_000, 1_000
    sizes = []
    with Outbox(tmp_path) as box:
        box.register_sinks(["sink"])
        for start in range(0, total, batch):
            stored = box.record(None, _events(start, batch, time.time() - 1))
            box.ack("sink", [(e.seq, None) for e in stored])
            box.housekeep(["sink"], older_than=time.time())
            sizes.append(_size(tmp_path))
    unpruned = total * len(PAYLOAD)
    settled = max(sizes[:10])
    print(f"state file: {sizes[9] / 1e6:.2f} MB after 10k events, max {max(sizes) / 1e6:.2f} MB "
          f"over {total} events (payloads alone: {unpruned / 1e6:.0f} MB)")
    assert max(sizes) <= settled * 1.5 + 64 * 1024
    assert max(sizes) < unpruned / 20
    assert _rows(tmp_path, "events") == 0


def test_housekeeping_prunes_only_what_is_old_and_done(tmp_path):
    now = time.time()
    old, recent = now - 40 * 86400, now - 60
    with Outbox(tmp_path) as box:
        box.register_sinks(["a", "b"])
        stored = box.record(None, _events(0, 4, old) + _events(4, 2, recent))
        box.ack("a", [(e.seq, None) for e in stored])
        box.ack("b", [(stored[0].seq, "410 gone"), (stored[1].seq, None)])  # b passed 2 of 6
        box.hook_runs.begin("E-old", PREPARE, RUNNING, "{}")
        box.hook_runs.finish("E-old", PREPARE, SUCCEEDED, "ok")
        box.hook_runs.begin("E-running", PREPARE, RUNNING, "{}")
        box.approval_messages.remember("m-old", "q1", "E1", "approved", now - 2 * 86400)
        box.approval_messages.remember("m-live", "q2", "E2", "approved", now + 600)
        db = sqlite3.connect(db_path(tmp_path))
        with db:
            db.execute("UPDATE approval_hook_runs SET started_at = ?", (old,))
        db.close()
        pruned = box.housekeep(["a", "b"], older_than=now - 30 * 86400, now=now)
        assert (pruned.events, pruned.dead_letters, pruned.hook_runs, pruned.approval_messages) \
            == (2, 1, 1, 1)
        assert [e.event_id for e in box.all_events()] == ["E2", "E3", "E4", "E5"]  # b's backlog
        assert [r.event_id for r in box.hook_runs.all()] == ["E-running"]
        assert box.approval_messages.outcome("m-live") == "approved"


def test_a_file_made_without_incremental_vacuum_is_converted_once(tmp_path):
    db = sqlite3.connect(db_path(tmp_path))
    db.execute("PRAGMA journal_mode=WAL")  # as earlier versions left it
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('kept', 'yes')")
    db.commit()
    assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    db.close()
    with Outbox(tmp_path) as box:
        assert box.get_meta("kept") == "yes"
    db = sqlite3.connect(db_path(tmp_path))
    assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # INCREMENTAL
    db.close()


def test_the_running_agent_prunes_periodically_not_only_at_start(simulator, control, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setattr(agent_mod, "HOUSEKEEPING_SECONDS", 0.3)
    sink = tmp_path / "out.jsonl"
    settings = config.from_dict({"imds": {"url": simulator.url, "poll_interval": 0.1},
                                 "state": {"dir": str(tmp_path / "state")},
                                 "sinks": [{"type": "file", "path": str(sink)}]})
    settings.state.retention = 0.5  # seconds (the configuration's minimum is 2 days)
    agent = Agent(settings)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        event_id = control.add(EventType="Reboot")["EventId"]
        wait_for(lambda: any(e["subject"] == event_id for e in read_jsonl(sink)), what="delivery")
        # recorded and delivered after the start: only the periodic pass can prune it
        wait_for(lambda: _rows(tmp_path / "state", "events") == 0, timeout=10,
                 what="the delivered event pruned while running")
    finally:
        agent.stop.set()
        thread.join(10)


def test_retention_is_configurable_in_days_with_a_floor_of_two():
    assert config.from_dict({}).state.retention == 30 * 86400
    assert config.from_dict({"state": {"retention_days": 7}}).state.retention == 7 * 86400
    try:
        config.from_dict({"state": {"retention_days": 1}})
    except config.ConfigError as exc:
        assert "state.retention_days: 1 is out of range" in str(exc)
    else:
        raise AssertionError("a retention of 1 day was accepted")
