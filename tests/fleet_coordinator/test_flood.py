"""A flood from one compromised VM through the hub, against ``coordinator run``: it keeps running,
answers, counts what it dropped, stays within its limits, and still approves a real event.

The attacker is this test process holding only what an agent holds: the hub's send connection
string. The coordinator runs with ``[trust] require_signed_reports = false`` (a fleet mid-upgrade),
where the limits are what bounds the unsigned reports of VMs without a registered key: with signed
reports required (the default) all of this flood is refused at the edge as ``unsigned`` before the
fold reads it (the last test). It sends, with the azure-eventhub producer, heartbeats of about 1 MB
listing 12,000 fake EventIds, heartbeats of many fake VMs, a VM with thousands of tags and
CloudEvents of unique types (a smaller flood than bench/coordinator_flood.py's; the figures are
the bench's, this test checks behaviour). Two real agents (web-0, web-1) run beside it, with the
simulator, the broker and Azurite.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from se_forwarder.simulator.wire import DEFAULT_RESOURCE_GROUP, DEFAULT_SUBSCRIPTION_ID
from tests.azurite import needs_blob_and_queue
from tests.support.waiting import wait_for

from .fleet import Fleet

pytestmark = [
    pytest.mark.timeout(300),
    needs_blob_and_queue,
]

NEW_VMS_PER_MINUTE = 40
FAKE_VMS = 400
LIMITS = f"[limits]\nnew_vms_per_minute = {NEW_VMS_PER_MINUTE}\n"


def now_utc() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def fake_vm(n: int, tags: dict[str, str] | None = None) -> dict[str, Any]:
    name = f"flood-{n}"
    return {"vmId": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)), "name": name,
            "resourceId": f"/subscriptions/{DEFAULT_SUBSCRIPTION_ID}/resourceGroups/{DEFAULT_RESOURCE_GROUP}/"
                          f"providers/Microsoft.Compute/virtualMachines/{name}",
            "subscriptionId": DEFAULT_SUBSCRIPTION_ID, "resourceGroupName": DEFAULT_RESOURCE_GROUP,
            "location": "westeurope", "zone": "", "vmScaleSetName": "", "platformFaultDomain": "0",
            "platformUpdateDomain": "0", "placementGroupId": "", "tags": tags or {}, "complete": True}


def heartbeat(vm: dict[str, Any], events: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"specversion": "1.0", "type": "com.azure.scheduledevents.heartbeat",
            "id": f"heartbeat/{vm['vmId']}/{uuid.uuid4()}", "source": vm["resourceId"], "subject": vm["vmId"],
            "time": now_utc(), "datacontenttype": "application/json", "vmid": vm["vmId"],
            "data": {"AgentVersion": "0.2.0", "HeartbeatInterval": 60, "Events": events or [], "Vm": vm}}


def flood() -> list[dict[str, Any]]:
    attacker = fake_vm(0)
    out = [heartbeat(attacker, [{"EventId": f"F{r}-{i}", "EventStatus": "Scheduled", "EventType": "Reboot"}
                                for i in range(12_000)]) for r in range(5)]
    out.append(heartbeat(fake_vm(0, {f"tag{i}": "x" * 20 for i in range(3_000)})))
    out += [heartbeat(fake_vm(n)) for n in range(1, FAKE_VMS)]
    out += [{"specversion": "1.0", "type": f"com.example.flood{i}", "id": str(uuid.uuid4()),
             "source": "/flood", "time": now_utc(), "data": {}} for i in range(300)]
    return out


def send(connection_string: str, events: list[dict[str, Any]]) -> None:
    """Publish as any agent can: structured CloudEvents, as many to a batch as fit."""
    from azure.eventhub import EventData, EventHubProducerClient

    producer = EventHubProducerClient.from_connection_string(connection_string,
                                                             eventhub_name="scheduled-events")
    try:
        batch = producer.create_batch()
        for event in events:
            data = EventData(json.dumps(event))
            data.content_type = "application/cloudevents+json"
            try:
                batch.add(data)
            except ValueError:
                producer.send_batch(batch)
                batch = producer.create_batch()
                batch.add(data)
        producer.send_batch(batch)
    finally:
        producer.close()


def metrics(url: str) -> str:
    return requests.get(f"{url}/metrics", timeout=10, proxies={"http": ""}).text


def read_in_all(text: str) -> float:
    """Every hub event the coordinator read: folded (by type) or skipped (by why)."""
    found = re.findall(r'^se_forwarder_coordinator_(?:folded|skipped)_total{[^}]*} (\S+)$', text, re.M)
    return sum(float(v) for v in found)


def metric(text: str, name: str, label: str) -> float:
    found = re.search(rf'^se_forwarder_coordinator_{name}_total{{reason="{label}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def flooded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    fleet = Fleet(tmp_path_factory.mktemp("flood")).start(["web-0", "web-1"])
    coordinator = None
    try:
        coordinator = fleet.coordinator("flood", extra=LIMITS, unsigned_reports=True).start()
        wait_for(coordinator.ready, 120, "the coordinator to lead and catch up")
        sent = flood()
        before = read_in_all(metrics(coordinator.url))
        send(fleet.broker.connection_string(), sent)

        def whole_flood_read() -> bool:
            # the agents' own heartbeats are read meanwhile too: wait for the count of the flood's
            # last kind (its unknown types) as well as for the total
            text = metrics(coordinator.url)
            return read_in_all(text) >= before + len(sent) and metric(text, "skipped", "other-type") >= 300

        wait_for(whole_flood_read, 120, "the coordinator to read the whole flood")
        record: dict[str, Any] = {"fleet": fleet, "coordinator": coordinator, "sent": len(sent)}
        record["metrics"] = metrics(coordinator.url)
        record["status"] = coordinator.get("/v1/status")
        event_id = fleet.add("web-0")
        record["approved"] = wait_for(lambda: event_id in fleet.starts(), 90, "the real event's approval")
        record["alive"] = coordinator.alive()
        record["healthz"] = requests.get(f"{coordinator.url}/healthz", timeout=10, proxies={"http": ""})
        yield record
    finally:
        if coordinator is not None and coordinator.alive():
            coordinator.stop()
        fleet.stop()
        if coordinator is not None and coordinator.log.exists():
            print("--- coordinator log (end) ---\n" + coordinator.log.read_text()[-3000:])


def test_the_coordinator_keeps_running_and_answers_after_the_flood(flooded: Any) -> None:
    assert flooded["alive"] and flooded["healthz"].status_code == 200


def test_a_real_event_is_still_approved_after_the_flood(flooded: Any) -> None:
    assert flooded["approved"]


def test_each_drop_of_the_flood_is_counted(flooded: Any) -> None:
    text = flooded["metrics"]
    assert metric(text, "capped", "heartbeat-events") >= 5 * (12_000 - 50)
    assert metric(text, "capped", "unreported-event") >= 5 * 50
    assert metric(text, "capped", "tags") >= 3_000
    assert metric(text, "capped", "new-vm") >= FAKE_VMS - 3 * NEW_VMS_PER_MINUTE
    assert metric(text, "skipped", "other-type") >= 300


def test_the_fold_stays_within_the_limits(flooded: Any) -> None:
    status = flooded["status"]
    assert status["fleet"]["vms"] <= 2 + 3 * NEW_VMS_PER_MINUTE  # the flood spans at most 3 minutes
    assert status["fleet"]["openEvents"] == 0  # no event made known by heartbeats alone


def test_with_signed_reports_required_the_same_flood_is_refused_before_the_fold(flooded: Any) -> None:
    fleet = flooded["fleet"]
    strict = fleet.coordinator("strict", extra=LIMITS).start()
    try:
        wait_for(strict.ready, 120, "the strict coordinator to lead and catch up")
        def refused_all() -> str | None:
            text = metrics(strict.url)
            return text if metric(text, "refused", "unsigned") >= FAKE_VMS else None

        text = wait_for(refused_all, 120, "the strict coordinator to read the flood")
        assert metric(text, "capped", "new-vm") == 0 and metric(text, "capped", "tags") == 0
        assert strict.get("/v1/status")["fleet"]["vms"] == 2
    finally:
        strict.stop()
