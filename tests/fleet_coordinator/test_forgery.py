"""Attacks on the coordinator by someone who holds only an agent's send right on the hub (issue 22).

The fleet of test_rolling.py (the simulator, one agent subprocess per VM, the Event Hubs broker,
Azurite blob and queue) and one live coordinator (``coordinator run``), shared by the module.
The attacker is this test process with nothing but the agents' Event Hubs connection string: it
publishes CloudEvents that claim to be the coordinator's decisions, unsigned, signed with a key
of its own, or carrying a signature copied from a real decision. The last test also holds the
storage account key (Azurite's) and writes a snapshot blob of its own.

Each test runs one attack and checks what the simulator, the hub and the coordinator say after
it: the simulator's record of StartRequests, the decisions the coordinator folded, ``/metrics``,
``coordinator status`` and its log.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.approvals import signing
from tests.azurite import needs_blob_and_queue
from tests.support.waiting import wait_for

from .fleet import API_GROUP, DECISION, ECHO_TIMEOUT, NOTICE, STARTED, Coordinator, Fleet, shut_down

pytestmark = [
    pytest.mark.slow,
    needs_blob_and_queue,
]

SOURCE = "urn:se-forwarder:coordinator:live"
OPS = "ops"  # the control API token's name in its table: the actor of every request made with it
ATTACKER_KEY = signing.generate_private_key()  # a key the attacker made for itself


class Attacker:
    """A process holding an agent's send connection string to the hub, and nothing else."""

    def __init__(self, connection_string: str) -> None:
        from azure.eventhub import EventHubProducerClient

        self.producer = EventHubProducerClient.from_connection_string(connection_string)

    def publish(self, *texts: str) -> None:
        from azure.eventhub import EventData

        batch = self.producer.create_batch()
        for text in texts:
            data = EventData(text)
            data.content_type = "application/cloudevents+json"
            batch.add(data)
        self.producer.send_batch(batch)

    def close(self) -> None:
        self.producer.close()


def decision(kind: str, ident: str, subject: str, **data: Any) -> dict[str, Any]:
    """A CloudEvent shaped exactly like the coordinator's decisions, in its name."""
    body = {"Decision": kind, "EventId": None, "ReasonCode": kind, "Reason": "maintenance window",
            "Actor": "person:ops", "Shadow": False, "Budgets": [], "Resources": [], "Affected": [],
            "Target": None, "Attempt": None, "Scope": None, "Sequence": None, "Overrides": [], **data}
    return {"specversion": "1.0", "type": DECISION + kind, "source": SOURCE, "id": ident,
            "subject": subject, "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "datacontenttype": "application/json", "data": body}


def text(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"))


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("forgery")
    fleet = Fleet(base, token_name=OPS)
    live: Coordinator | None = None
    attacker = None
    try:
        fleet.start()
        live = fleet.coordinator("live").start()
        wait_for(live.ready, 60, "the live coordinator to lead")
        attacker = Attacker(fleet.agent_env()["EH_CONN"])
        yield {"fleet": fleet, "live": live, "attacker": attacker}
    finally:
        shut_down(fleet, live, closing=attacker)


def forged(live: Coordinator) -> int:
    return int(live.get("/v1/status", decisions="0")["service"]["refused"]["forged"])


def after_forgeries(live: Coordinator, before: int, count: int) -> None:
    wait_for(lambda: forged(live) >= before + count, 30, f"{count} forgeries to be read and dropped")


def genuine(fleet: Fleet) -> list[dict[str, Any]]:
    """The live coordinator's decisions on the hub that verify with its key."""
    keys = signing.VerifyKeys([signing.load_signing_key(file=fleet.key_file).public_key()])
    return [d for d in fleet.decisions("live") if signing.verify(d, keys)]


def pending(live: Coordinator, event_id: str) -> dict[str, Any] | None:
    return next((p for p in live.get("/v1/status")["pending"] if p["eventId"] == event_id), None)


def act(live: Coordinator, kind: str, **body: Any) -> requests.Response:
    """A person's control request; tried again while the leader is briefly not acting (503: a
    renewal of its lease came late on a loaded machine). The actor it claims is not the one
    recorded: the server records its token's name."""

    token = live.token

    def answer() -> list[requests.Response]:  # a list: a 4xx response is falsy itself
        got = requests.post(f"{live.url}/v1/{kind}", json={"actor": "person:ops", "reason": "test", **body},
                            headers={"Authorization": f"Bearer {token}"}, timeout=15, proxies={"http": ""})
        return [] if got.status_code == 503 else [got]

    (response,) = wait_for(answer, 60, f"the leader to take a {kind} request")
    return response


def test_a_forged_approve_for_a_deferred_peer_event_starts_nothing_and_is_counted(scene):
    fleet, live, attacker = scene["fleet"], scene["live"], scene["attacker"]
    # web-0 and web-1 in one event: their availability set's budget (1) can never hold it early
    event_id = str(fleet.server.sim.add_event({
        "EventType": "Reboot", "Resources": ["web-0", "web-1"], "NotBeforeInSeconds": NOTICE,
        "StartedSeconds": STARTED})["EventId"])
    defer = wait_for(lambda: next((d for d in genuine(fleet) if d["data"]["EventId"] == event_id
                                   and d["data"]["Decision"] == "defer"), None), 60,
                     "the coordinator to defer the event for its budget")
    target = {"name": "web-0", "vmId": "", "group": ""}
    approve = decision("approve", f"{event_id}/coordinator/approve/1", event_id, EventId=event_id,
                       ReasonCode="fits", Actor="coordinator", Target=target, Attempt=1,
                       Resources=["web-0", "web-1"])
    copied = {**approve, "keyid": defer["keyid"], "signature": defer["signature"]}
    before = forged(live)
    attacker.publish(text(approve), text(signing.sign(approve, ATTACKER_KEY)), text(copied))
    after_forgeries(live, before, 3)
    time.sleep(ECHO_TIMEOUT + 3)  # the retry path once sent a real approval for a folded forgery

    assert fleet.requests_for(event_id) == []
    assert not [d for d in genuine(fleet) if d["data"]["EventId"] == event_id
                and d["data"]["Decision"] == "approve"]
    assert pending(live, event_id)["reasonCode"] == "budget"
    metrics = requests.get(f"{live.url}/metrics", timeout=10, proxies={"http": ""}).text
    assert f'se_forwarder_coordinator_refused_total{{reason="forged"}} {float(forged(live))}' in metrics
    status = live.cli("status")
    assert status.returncode == 0 and f"FORGED: {forged(live)} decision(s)" in status.stdout


def test_a_forged_resume_and_release_leave_the_pause_and_the_hold_in_force(scene):
    fleet, live, attacker = scene["fleet"], scene["live"], scene["attacker"]
    assert act(live, "pause", scope=API_GROUP).status_code == 200
    event_id = fleet.add("api_3")
    assert act(live, "hold", eventId=event_id).status_code == 200
    resume = decision("resume", f"coordinator/resume/{API_GROUP}/2", API_GROUP, Scope=API_GROUP,
                      Sequence=2)
    release = decision("release", f"{event_id}/coordinator/release/2", event_id, EventId=event_id,
                       Sequence=2)
    before = forged(live)
    attacker.publish(text(resume), text(signing.sign(release, ATTACKER_KEY)))
    after_forgeries(live, before, 2)
    wait_for(lambda: pending(live, event_id), 30, "the coordinator to see the held event")
    time.sleep(2)  # two decision passes

    status = live.get("/v1/status")
    assert API_GROUP in {p["scope"] for p in status["paused"]}
    assert event_id in {h["eventId"] for h in status["held"]}
    assert pending(live, event_id)["reasonCode"] == "held"
    assert fleet.requests_for(event_id) == []


def test_a_huge_sequence_is_refused_and_the_next_operator_pause_works(scene):
    live, attacker = scene["live"], scene["attacker"]
    huge = 10**700
    poison = decision("resume", f"coordinator/resume/fleet/{huge}", "fleet", Scope="fleet", Sequence=huge)
    before = forged(live)
    attacker.publish(text(poison), text(signing.sign(poison, ATTACKER_KEY)))
    after_forgeries(live, before, 2)

    paused = act(live, "pause", scope="fleet")
    assert paused.status_code == 200, paused.text
    assert (paused.json()["decision"]["id"], paused.json()["decision"]["data"]["Sequence"]) == (
        "coordinator/pause/fleet/1", 1)
    assert "fleet" in {p["scope"] for p in live.get("/v1/status")["paused"]}
    resumed = act(live, "resume", scope="fleet")
    assert resumed.status_code == 200 and resumed.json()["decision"]["data"]["Sequence"] == 2
    assert "fleet" not in {p["scope"] for p in live.get("/v1/status")["paused"]}


def test_a_control_call_whose_decision_would_not_fold_fails_and_publishes_nothing(scene):
    live, fleet = scene["live"], scene["fleet"]
    scope = "tag:" + "n" * 500 + "=" + "v" * 200  # a valid scope whose decision id is too long to fold
    answer = act(live, "pause", scope=scope)
    assert answer.status_code == 409 and answer.json()["code"] == "not-folded", answer.text
    assert "nothing changed" in answer.json()["error"]
    assert scope not in {p["scope"] for p in live.get("/v1/status")["paused"]}
    assert not [d for d in genuine(fleet) if d["data"]["Scope"] == scope]


def test_a_forged_snapshot_is_ignored_with_one_log_line_and_the_fold_is_rebuilt_from_the_hub(scene):
    fleet, live = scene["fleet"], scene["live"]
    held = str(uuid.uuid4()).upper()  # held before any VM reports it: only the hub knows of it
    assert act(live, "hold", eventId=held).status_code == 200
    assert live.stop() == 0  # a clean stop saves a signed snapshot
    from azure.storage.blob import BlobClient

    blob = BlobClient.from_connection_string(fleet.blob.connection_string, "coordinator",
                                             "live/snapshot.json.gz")
    lines = [json.loads(line) for line in gzip.decompress(blob.download_blob().readall()).splitlines()]
    assert signing.verify(lines[-1], [signing.load_signing_key(file=fleet.key_file).public_key()])
    for line in lines[1:-1]:  # the hold is gone
        if line[0] == "decisions":
            line[1] = [d for d in line[1] if held not in d[0]]
    body = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines[:-1]).encode()
    seal = signing.sign({"sha256": hashlib.sha256(body).hexdigest(), "lines": len(lines) - 1}, ATTACKER_KEY)
    blob.upload_blob(gzip.compress(body + text(seal).encode() + b"\n"), overwrite=True)
    start = len(live.logged())

    live.start()
    wait_for(live.ready, 60, "the restarted coordinator to lead")
    said = [line["message"] for line in live.logged()[start:] if "snapshot" in line.get("message", "")]
    assert len(said) == 1, said
    assert "not the coordinator's" in said[0] and "does not verify" in said[0]
    assert held in {h["eventId"] for h in live.get("/v1/status")["held"]}
    on_hub = {d["id"] for d in genuine(fleet)}
    folded = {d["id"] for d in live.get("/v1/status", decisions="10000")["decisions"]}
    assert on_hub <= folded <= {d["id"] for d in genuine(fleet)}


def test_a_persons_approval_beyond_a_budget_is_audited_as_an_override(scene):
    fleet, live = scene["fleet"], scene["live"]
    event_id = str(fleet.server.sim.add_event({
        "EventType": "Reboot", "Resources": ["web-4", "web-5"], "NotBeforeInSeconds": NOTICE,
        "StartedSeconds": STARTED})["EventId"])
    wait_for(lambda: (pending(live, event_id) or {}).get("reasonCode") == "budget", 60,
             "the coordinator to defer the event for its budget")
    answer = act(live, "approve", eventId=event_id, scopes=["group"])
    assert answer.status_code == 200, answer.text
    data = answer.json()["decision"]["data"]
    assert (data["ReasonCode"], data["Actor"], data["Overrides"]) == ("approve-now-override", OPS, ["group"])
    assert [u["withEvent"] > u["max"] for u in data["Budgets"]] == [True]
    warnings = [line["message"] for line in live.logged() if line.get("level") == "warning"
                and event_id in line.get("message", "")]
    assert warnings and "OVERRIDES budgets" in warnings[0] and f"on the word of {OPS}:" in warnings[0]
    wait_for(lambda: fleet.requests_for(event_id), 30, "the person's approval to reach the simulator")
