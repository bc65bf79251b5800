"""`se-forwarder fleet tail` reads the hub with a real consumer and shows each fleet event once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from se_forwarder.fleet.tail import FleetTable
from se_forwarder.sinks import eventhubs
from se_forwarder.sinks.base import Delivered
from tests.support.paths import ROOT

from .helpers import cloud_event, stored

VMS = [f"7e1d0c2b-0000-4000-8000-00000000000{i}" for i in range(1, 4)]


def _tail(broker, *args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "EH_CONN": broker.connection_string(), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "se_forwarder", "fleet", "tail", *args],
        env=full_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _publish(broker, tmp_path, events: list[dict], mode: str = "structured") -> None:
    """Send through the eventhubs sink, as agents do (one delivery; keyed by each event's vmid)."""
    os.environ["SE_TEST_TAIL_CONN"] = broker.connection_string()
    options = eventhubs.validate(
        {
            "eventhub": broker.eventhub,
            "credential": "connection-string",
            "connection_string_env": "SE_TEST_TAIL_CONN",
            "mode": mode,
        },
        "sinks[0]",
    )
    sink = eventhubs.create("eh", options, SimpleNamespace(state_dir=tmp_path))
    try:
        report = sink.deliver([stored(i + 1, e) for i, e in enumerate(events)])
    finally:
        sink.close()
    assert report.outcomes == [Delivered()] * len(events)


def _fleet_events(vmid: str) -> list[dict]:
    """What one VM of an availability set reports: the shared freeze, scheduled then started."""
    return [
        cloud_event(vmid, "SHARED-FREEZE", "scheduled"),
        cloud_event(vmid, "SHARED-FREEZE", "started"),
    ]


def test_table_counts_each_vm_once_per_event_and_state():
    table = FleetTable()
    for vmid in VMS:
        table.add(cloud_event(vmid, "E1", "scheduled"))
    table.add(cloud_event(VMS[0], "E1", "scheduled"))  # a redelivery from the same VM
    table.add(cloud_event(VMS[0], "E1", "started"))
    rows = {(r.subject, r.state): len(r.sources) for r in table.sorted_rows()}
    assert rows == {("E1", "scheduled"): 3, ("E1", "started"): 1}
    assert table.events == 5


def test_recovered_is_a_row_after_the_events_completed_row():
    table = FleetTable()
    for state in ("recovered", "completed", "started"):
        table.add(cloud_event(VMS[0], "E1", state))
    assert [r.state for r in table.sorted_rows()] == ["started", "completed", "recovered"]


def test_heartbeats_are_not_rows_of_the_fleet_table():
    table = FleetTable()
    beat = {**cloud_event(VMS[0], "E1", "scheduled"), "type": "com.azure.scheduledevents.heartbeat",
            "subject": VMS[0], "id": f"heartbeat/{VMS[0]}/1795356872"}
    assert table.add(beat) is None
    assert table.rows == {} and table.skipped == 0 and table.events == 1


def test_table_skips_messages_that_are_not_cloudevents():
    table = FleetTable()
    assert table.add({"hello": "world"}) is None
    assert table.skipped == 1 and table.rows == {}


def test_fleet_tail_once_shows_each_event_once_with_the_vms_that_saw_it(eventhubs_broker, tmp_path):
    structured = _fleet_events(VMS[0]) + _fleet_events(VMS[1]) + [cloud_event(VMS[0], "ONLY-VM1-REBOOT")]
    _publish(eventhubs_broker, tmp_path, structured)
    _publish(eventhubs_broker, tmp_path, _fleet_events(VMS[2]), mode="binary")  # both forms parse

    result = _tail(eventhubs_broker, "--once", "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    rows = {(r["subject"], r["state"]): r["vms"] for r in summary["rows"]}
    assert rows == {
        ("SHARED-FREEZE", "scheduled"): 3,
        ("SHARED-FREEZE", "started"): 3,
        ("ONLY-VM1-REBOOT", "scheduled"): 1,
    }
    assert summary["events"] == 7
    assert summary["skipped"] == 0


def test_table_text_shows_one_row_per_event_with_its_vm_count():
    table = FleetTable()
    for vmid in VMS[:2]:
        table.add(cloud_event(vmid, "TABLE-EVENT"))
    lines = table.render().splitlines()
    assert lines[0].split() == ["FIRST", "SEEN", "STATE", "TYPE", "EVENT", "ID", "VMS", "NOT", "BEFORE"]
    (row,) = [line for line in lines if "TABLE-EVENT" in line]
    assert row.split() == [
        "2024-05-01",
        "10:00:00",
        "scheduled",
        "Freeze",
        "TABLE-EVENT",
        "2",
        "2016-09-19T18:29:47Z",
    ]
    assert lines[-1] == "1 event from 2 messages"


def test_fleet_tail_without_a_hub_says_what_to_set(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "EH_CONN"}
    result = subprocess.run(
        [sys.executable, "-m", "se_forwarder", "fleet", "tail", "--once"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "EH_CONN" in result.stderr and "Traceback" not in result.stderr


def test_fleet_tail_against_a_down_hub_fails_with_one_line(eventhubs_broker):
    conn = eventhubs_broker.connection_string()
    eventhubs_broker.stop()
    result = _tail(eventhubs_broker, "--once", env={"EH_CONN": conn})
    assert result.returncode == 1
    assert result.stderr.startswith("se-forwarder: error: cannot read Event Hub 127.0.0.1:")
    assert "Connection refused" in result.stderr
    assert "Traceback" not in result.stderr
    assert eventhubs_broker.key not in result.stderr


@pytest.mark.slow
def test_two_tails_with_a_blob_checkpoint_store_split_the_partitions(
    eventhubs_broker, azurite_blob, tmp_path
):
    keys = [f"vm-{i:02d}" for i in range(16)]  # spread over all four partitions
    _publish(eventhubs_broker, tmp_path, [cloud_event(vmid, f"EV-{vmid}") for vmid in keys])
    assert all(eventhubs_broker.messages(p) for p in eventhubs_broker.partition_ids)

    args = [
        "--from", "earliest", "--duration", "7", "--format", "json",
        "--checkpoint-connection-string-env", "CHECKPOINTS",
        "--checkpoint-container", "split-test",
        "--balance-interval", "0.5",
    ]  # fmt: skip
    env = {
        **os.environ,
        "EH_CONN": eventhubs_broker.connection_string(),
        "CHECKPOINTS": azurite_blob.connection_string,
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "se_forwarder", "fleet", "tail", *args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    first, second = (json.loads(out.strip().splitlines()[-1]) for out, _ in outputs)

    owned_a, owned_b = set(first["partitions_owned"]), set(second["partitions_owned"])
    assert owned_a and owned_b, (owned_a, owned_b)
    assert not owned_a & owned_b
    assert owned_a | owned_b == set(eventhubs_broker.partition_ids)
    seen = {r["subject"] for r in first["rows"]} | {r["subject"] for r in second["rows"]}
    assert seen == {f"EV-{vmid}" for vmid in keys}


def test_fleet_tail_with_a_malformed_connection_string_fails_with_one_line(eventhubs_broker):
    key = "bWFsZm9ybWVkLWJ1dC1zZWNyZXQ="
    conn = f"Endpoint=sb://127.0.0.1:{eventhubs_broker.port};SharedAccessKey={key};EntityPath=hub"
    result = _tail(eventhubs_broker, "--once", env={"EH_CONN": conn})
    assert result.returncode == 1
    assert result.stderr.startswith("se-forwarder: error: cannot read Event Hub 127.0.0.1:")
    assert result.stderr.strip().count("\n") == 0
    assert "Traceback" not in result.stderr and key not in result.stderr


def test_fleet_tail_with_a_malformed_checkpoint_connection_string_fails_with_one_line(eventhubs_broker):
    result = _tail(
        eventhubs_broker, "--duration", "1", "--checkpoint-connection-string-env", "SE_TEST_CP",
        env={"SE_TEST_CP": "AccountKey=c2VjcmV0LWtleQ=="},
    )
    assert result.returncode == 2
    assert result.stderr.startswith("se-forwarder: error: --checkpoint-connection-string-env: SE_TEST_CP")
    assert result.stderr.strip().count("\n") == 0
    assert "Traceback" not in result.stderr and "c2VjcmV0LWtleQ" not in result.stderr


def test_an_unreachable_checkpoint_store_is_one_error_line():
    pytest.importorskip("azure.eventhub.extensions.checkpointstoreblob")
    from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

    from se_forwarder.errors import SeForwarderError
    from se_forwarder.fleet.tail import ensure_container

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conn = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=c2VjcmV0LWtleQ==;"
        f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
    )
    store = BlobCheckpointStore.from_connection_string(conn, "checkpoints", retry_total=0)
    with pytest.raises(SeForwarderError, match="^checkpoint container: ") as info:
        ensure_container(store)
    assert "\n" not in str(info.value) and "c2VjcmV0LWtleQ" not in str(info.value)


def test_once_from_the_earliest_is_not_done_while_an_event_the_hub_held_at_the_start_is_unread():
    from se_forwarder.fleet.tail.command import _caught_up
    from se_forwarder.fleet.tail.reader import Receiver

    state = Receiver(FleetTable(), lambda row: None, checkpointing=False)
    state.idle = {"0", "1"}  # each partition came up empty once: a slow hub can say that too early
    state.last_event_at = 0.0
    state.last_sequence = {"0": 41}
    ends = {"0": 42, "1": 7}
    assert not _caught_up(["0", "1"], state, ends)
    state.last_sequence = {"0": 42, "1": 7}
    assert _caught_up(["0", "1"], state, ends)
    assert _caught_up(["0", "1"], state, {})  # an empty hub: nothing to wait for
