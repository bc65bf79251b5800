"""Sinks: a failing sink retries on its own and never delays polling or another sink."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from cloudevents.core.formats.json import JSONFormat

from se_forwarder.outbox import NewEvent, Outbox
from se_forwarder.sinks.base import Delivered, StoredEvent
from se_forwarder.sinks.file import FileSink
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.paths import ROOT
from tests.support.waiting import wait_for


def test_a_failing_sink_neither_delays_the_other_nor_loses_its_backlog(
        simulator, control, agents, tmp_path):
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the sink needs a directory")
    good, bad = tmp_path / "good.jsonl", blocker / "bad.jsonl"
    config = tmp_path / "c.toml"
    config.write_text(f'[[sinks]]\ntype = "file"\npath = "{good}"\n'
                      f'[[sinks]]\ntype = "file"\npath = "{bad}"\nname = "bad"\n')
    agent = AgentProcess(["--config", str(config), "--imds-url", simulator.url,
                          "--state-dir", str(tmp_path / "s"), "--poll-interval", "0.1"],
                         log_path=tmp_path / "agent.log").start()
    agents.append(agent)
    ids = [control.add(EventType="Reboot")["EventId"] for _ in range(3)]
    wait_for(lambda: len(read_jsonl(good)) == 3, what="the healthy sink")

    def bad_status():
        with Outbox(tmp_path / "s", readonly=True) as box:
            status = box.sink_status("bad")
        return status if status.backlog == 3 and status.last_error else None

    assert "cannot write" in wait_for(bad_status, what="the failing sink's error").last_error
    blocker.unlink()  # the destination becomes writable
    wait_for(lambda: [e["subject"] for e in read_jsonl(bad)] == ids, timeout=40,
             what="the failed sink to catch up, in order")
    assert [e["subject"] for e in read_jsonl(good)] == ids


def test_stdout_sink_prints_one_structured_cloudevent_per_line(simulator, control, tmp_path):
    event_id = control.add(EventType="Freeze", DurationInSeconds=20)["EventId"]
    result = subprocess.run(
        [sys.executable, "-m", "se_forwarder", "run", "--once", "--imds-url", simulator.url,
         "--state-dir", str(tmp_path), "--sink", "stdout"],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    event = JSONFormat().read(None, lines[0])
    attrs = event.get_attributes()
    assert attrs["id"] == f"{event_id}/scheduled"
    assert attrs["type"] == "com.azure.scheduledevents.scheduled"
    assert attrs["subject"] == event_id
    assert attrs["source"].endswith("/virtualMachines/vm0")
    assert {"eventtype", "eventstatus", "incarnation", "vmid"} <= set(attrs)
    data = json.loads(lines[0])["data"]
    assert data["AffectsThisVm"] is True and data["Vm"]["name"] == "vm0"
    assert data["NotBeforeUtc"].endswith("Z") and data["DocumentIncarnation"] == attrs["incarnation"]


def test_file_sink_rotates_by_size_and_keeps_every_event(simulator, control, agents, tmp_path):
    out = tmp_path / "o.jsonl"
    config = tmp_path / "c.toml"
    config.write_text(f'[[sinks]]\ntype = "file"\npath = "{out}"\nmax_bytes = 4096\nkeep = 50\n')
    agent = AgentProcess(["--config", str(config), "--imds-url", simulator.url,
                          "--state-dir", str(tmp_path / "s"), "--poll-interval", "0.1"]).start()
    agents.append(agent)
    ids = [control.add(EventType="Reboot")["EventId"] for _ in range(8)]
    files = lambda: [out, *sorted(tmp_path.glob("o.jsonl.*"))]  # noqa: E731
    wait_for(lambda: sum(len(read_jsonl(f)) for f in files()) == 8, what="all events")
    assert len(files()) > 1, "rotation happened"
    seen = {e["subject"] for f in files() for e in read_jsonl(f)}
    assert seen == set(ids)


# The file sink under a file-size limit (RLIMIT_FSIZE): the kernel then writes only part of a
# batch and fails the rest, as on a full disk. Run in a child so the limit binds nothing else.
_FULL_DISK = r"""
import json, resource, sys
from pathlib import Path
from se_forwarder.sinks.base import StoredEvent, Delivered, Retry
from se_forwarder.sinks.file import FileSink

path, retry = Path(sys.argv[1]), sys.argv[2] == "retry"
batch = [StoredEvent(i + 1, f"E{i}/scheduled", f"E{i}", "scheduled", "t",
                     json.dumps({"id": f"E{i}/scheduled", "data": "x" * 200}), 0.0)
         for i in range(20)]
sink = FileSink("f", path, fsync=True)
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (2500, hard))
first = sink.deliver(batch).outcomes
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
second = sink.deliver(batch).outcomes if retry else []
print(json.dumps([[type(o).__name__ for o in first], [type(o).__name__ for o in second]]))
"""


def _deliver_on_a_full_disk(path, retry):
    result = subprocess.run([sys.executable, "-c", _FULL_DISK, str(path), retry],
                            capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _ids_in(path):
    """The ids of the file's lines; every line must be a whole CloudEvent."""
    return [json.loads(line)["id"] for line in path.read_bytes().splitlines()]


def test_file_sink_reports_a_partly_written_batch_as_a_retry_not_as_delivered(tmp_path):
    first, _ = _deliver_on_a_full_disk(tmp_path / "out.jsonl", "once")
    assert first[-1] == "Retry"
    assert "Delivered" not in first


def test_file_sink_retry_after_a_partly_written_batch_writes_each_event_once(tmp_path):
    path = tmp_path / "out.jsonl"
    first, second = _deliver_on_a_full_disk(path, "retry")
    assert first == ["Retry"] and second == ["Delivered"] * 20
    assert _ids_in(path) == [f"E{i}/scheduled" for i in range(20)]


def test_file_sink_cuts_a_write_that_failed_back_to_whole_lines(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"id":"E-before/scheduled"}\n')
    first, _ = _deliver_on_a_full_disk(path, "once")
    assert first == ["Retry"]
    assert _ids_in(path) == ["E-before/scheduled"]  # no torn line left by the full disk


def _batch(ids):
    return [StoredEvent(n + 1, f"{i}/scheduled", i, "scheduled", "t",
                        json.dumps({"id": f"{i}/scheduled"}), 0.0) for n, i in enumerate(ids)]


def test_file_sink_writes_a_batch_offered_again_once(tmp_path):
    """The worker offers a batch again when its acknowledgement did not reach the outbox (the
    state directory's disk full, its database locked): it is in the file already."""
    path = tmp_path / "out.jsonl"
    sink = FileSink("f", path, fsync=False)
    assert sink.deliver(_batch(["A", "B"])).outcomes == [Delivered(), Delivered()]
    assert sink.deliver(_batch(["A", "B"])).outcomes == [Delivered(), Delivered()]
    sink.deliver(_batch(["A", "B", "C"]))  # more arrived meanwhile
    sink.deliver(_batch(["D"]))
    assert _ids_in(path) == ["A/scheduled", "B/scheduled", "C/scheduled", "D/scheduled"]


def test_an_event_another_process_records_is_delivered_by_the_running_agent(
        simulator, control, agents, tmp_path):
    """What `se-forwarder approve` does: the agent's sinks sleep without a timer, and its poller
    notices the other process's change at its next poll and wakes them."""
    out, state = tmp_path / "o.jsonl", tmp_path / "s"
    agent = AgentProcess(["--imds-url", simulator.url, "--state-dir", str(state),
                          "--sink", f"file:{out}", "--poll-interval", "0.5", "--dry-run"],
                         log_path=tmp_path / "agent.log").start()
    agents.append(agent)
    control.add(EventType="Reboot")
    wait_for(lambda: len(read_jsonl(out)) == 1, what="the agent's own event")
    with Outbox(state) as box:
        box.record(None, [NewEvent("cli-1/approved", "cli-1", "approved",
                                   "com.azure.scheduledevents.approved", json.dumps({
                                       "specversion": "1.0", "id": "cli-1/approved",
                                       "source": "/test", "type": "com.azure.scheduledevents.approved",
                                       "data": {}}), time.time())])
    wait_for(lambda: [e["id"] for e in read_jsonl(out)][1:] == ["cli-1/approved"], timeout=20,
             what="the other process's event at the agent's next poll")
