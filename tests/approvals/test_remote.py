"""Remote approvals end to end: `fleet approve` / a coordinator -> Azurite queue -> agent subprocess
-> simulator. Every refused message lands in ``<queue>-poison`` with its reason, emits an
``approvalrejected`` CloudEvent, and never reaches the simulator as a POST.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.approvals import signing
from se_forwarder.approvals.queue import queue_name
from se_forwarder.simulator import SimulatorServer
from se_forwarder.timestamps import rfc3339
from tests.support.agent import AgentProcess, cloudevents, log_records
from tests.support.config import write_agent_config
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

from .conftest import KeyPair

SOURCE = "urn:test:coordinator"


class Coordinator:
    """The sending side, with the azure-storage-queue SDK against Azurite."""

    def __init__(self, azurite, template: str, key: KeyPair, vm: str = "vm0") -> None:
        self.azurite = azurite
        self.key = key
        self.template = template
        self.name = queue_name(template, vm)
        self.queue = azurite.client(self.name)
        self.poison = azurite.client(self.name + "-poison")

    def message(self, event_id: str, *, key: KeyPair | None = None, expires_in: float = 600,
                now: datetime | None = None, **overrides: Any) -> dict[str, Any]:
        private = (key or self.key).private
        now = now or datetime.now(UTC)
        msg = signing.new_message(event_id, source=SOURCE, key=private,
                                  expires_at=now + timedelta(seconds=expires_in), now=now,
                                  reason="test")
        if overrides:
            msg.update(overrides)
            msg = signing.sign(msg, private)
        return msg

    def send(self, text: str) -> str:
        return self.queue.send_message(text).id

    def queue_exists(self) -> bool:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self.queue.get_queue_properties()
            return True
        except ResourceNotFoundError:
            return False

    def poisoned(self, queue_message_id: str) -> dict | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            peeked = self.poison.peek_messages(max_messages=32)
        except ResourceNotFoundError:
            return None
        for m in peeked:
            entry = json.loads(m.content)
            if entry["queueMessageId"] == queue_message_id:
                return entry
        return None


class RemoteAgent:
    def __init__(self, base: Path, server: SimulatorServer, coordinator: Coordinator,
                 poll_interval: float | None = None, queue_options: dict[str, Any] | None = None,
                 **approvals: Any) -> None:
        self.base = base
        self.server = server
        self.coordinator = coordinator
        self.sink = base / "out.jsonl"
        self.log = base / "agent.log"
        queue = {"queue": coordinator.template, "connection_string_env": "APPROVALS_CONN",
                 "verify_keys_env": "APPROVALS_PUBLIC_KEYS", **(queue_options or {})}
        self.config = write_agent_config(base / "agent.toml", imds_url=server.url, state_dir=base / "state",
                                   sink_path=self.sink, poll_interval=poll_interval, queue=queue,
                                   **approvals)
        self.env = {"APPROVALS_CONN": coordinator.azurite.connection_string,
                    "APPROVALS_PUBLIC_KEYS": coordinator.key.public}

    def start(self, agents: list[AgentProcess]) -> AgentProcess:
        agent = AgentProcess(["--config", str(self.config)], env=self.env, log_path=self.log).start()
        agents.append(agent)
        wait_for(self.coordinator.queue_exists, timeout=20, what="the agent creating its queue")
        return agent

    def posts(self, event_id: str) -> list[dict]:
        return [a for a in self.server.sim.approvals() if a["EventId"] == event_id]

    def knows(self, event_id: str) -> None:
        wait_for(lambda: any(e["subject"] == event_id for e in cloudevents(self.sink)),
                 timeout=15, what=f"the agent seeing {event_id}")


def queue_config(azurite, signing_key: KeyPair, template: str, server: SimulatorServer, monkeypatch,
                 tmp_path: Path) -> Path:
    """An agent's config with ``[approvals.queue]`` on Azurite (secrets in the environment)."""
    monkeypatch.setenv("APPROVALS_CONN", azurite.connection_string)
    monkeypatch.setenv("APPROVALS_PUBLIC_KEYS", signing_key.public)
    return write_agent_config(tmp_path / "agent.toml", imds_url=server.url, state_dir=tmp_path / "s",
                              sink_path=tmp_path / "out.jsonl", queue={
                                  "queue": template, "connection_string_env": "APPROVALS_CONN",
                                  "verify_keys_env": "APPROVALS_PUBLIC_KEYS"})


# -- the round trip ----------------------------------------------------------------------------


def test_fleet_approve_reaches_the_simulator_through_the_queue(azurite, signing_key, unique_queue,
                                                               agents, tmp_path):
    # How long it takes is measured by bench/approval_roundtrip.py, not asserted here.
    with SimulatorServer() as server:
        coordinator = Coordinator(azurite, unique_queue, signing_key)
        remote = RemoteAgent(tmp_path, server, coordinator)  # default intervals (1 s)
        remote.start(agents)
        event_id = server.sim.add_event({"EventType": "Reboot"})["EventId"]
        remote.knows(event_id)
        cli = subprocess.run(
            [sys.executable, "-m", "se_forwarder", "fleet", "approve", "--event-id", event_id,
             "--vm", "vm0", "--queue-template", unique_queue, "--source", SOURCE,
             "--reason", "rolling upgrade", "--expires-in", "5m"],
            env={"PATH": "/usr/bin:/bin", "APPROVALS_CONN": azurite.connection_string,
                 "APPROVALS_KEY": signing_key.pem}, cwd=ROOT, capture_output=True, text=True,
            timeout=30)
        assert cli.returncode == 0, cli.stderr
        assert f"for {event_id} to queue {coordinator.name}" in cli.stdout
        (post,) = wait_for(lambda: remote.posts(event_id), timeout=30, what="the approval POST")
        assert post["accepted"] and post["started"]  # the StartRequests IMDS recorded
        (approved,) = wait_for(lambda: cloudevents(remote.sink, "approved"), what="approved")
        assert approved["data"]["ApprovedBy"] == f"coordinator:{SOURCE}"  # the queue's signed message
        wait_for(lambda: not coordinator.queue.peek_messages(), what="the message deleted")
        assert coordinator.poisoned("") is None


def test_message_ahead_of_imds_waits_for_the_event(azurite, signing_key, unique_queue, agents,
                                                   tmp_path):
    with SimulatorServer() as server:
        coordinator = Coordinator(azurite, unique_queue, signing_key)
        # Received while the VM has no event: the queue polled as often idle as not.
        remote = RemoteAgent(tmp_path, server, coordinator, poll_interval=0.2,
                             queue_options={"idle_poll_interval": 1.0})
        remote.start(agents)
        event_id = str(uuid.uuid4()).upper()
        coordinator.send(signing.encode(coordinator.message(event_id, expires_in=60)))
        wait_for(lambda: any("approval message waits" in r["message"]
                             for r in log_records(remote.log)), timeout=10, what="the wait")
        time.sleep(1.0)
        server.sim.add_event({"EventId": event_id, "EventType": "Reboot"})
        (post,) = wait_for(lambda: remote.posts(event_id), timeout=10, what="the late approval")
        assert post["started"]
        assert cloudevents(remote.sink, "approvalrejected") == []


def test_an_agent_without_events_leaves_its_queue_alone_until_one_is_scheduled(
        azurite, signing_key, unique_queue, agents, tmp_path):
    with SimulatorServer() as server:
        coordinator = Coordinator(azurite, unique_queue, signing_key)
        remote = RemoteAgent(tmp_path, server, coordinator, poll_interval=0.2)  # idle: 30 s default
        remote.start(agents)
        # Until its first document the queue is read at poll_interval: the message goes in once
        # the agent has one and has had time for that last read.
        wait_for(lambda: sum(r["route"] == "scheduledevents" and r["status"] in (200, 304)
                             for r in server.sim.requests()) >= 3, timeout=20, what="documents")
        time.sleep(1.0)
        event_id = str(uuid.uuid4()).upper()
        coordinator.send(signing.encode(coordinator.message(event_id, expires_in=120)))
        time.sleep(3.0)
        (untouched,) = coordinator.queue.peek_messages(max_messages=32)
        assert untouched.dequeue_count == 0
        server.sim.add_event({"EventId": event_id, "EventType": "Reboot"})
        (post,) = wait_for(lambda: remote.posts(event_id), timeout=10, what="the approval")
        assert post["started"]


def test_dry_run_agent_refuses_valid_messages_into_the_poison_queue(azurite, signing_key,
                                                                    unique_queue, agents, tmp_path):
    with SimulatorServer() as server:
        coordinator = Coordinator(azurite, unique_queue, signing_key)
        remote = RemoteAgent(tmp_path, server, coordinator, poll_interval=0.2,
                             approvals={"dry_run": True})
        remote.start(agents)
        event_id = server.sim.add_event({"EventType": "Reboot"})["EventId"]
        remote.knows(event_id)
        qid = coordinator.send(signing.encode(coordinator.message(event_id)))
        entry = wait_for(lambda: coordinator.poisoned(qid), timeout=10, what="the poison entry")
        assert entry["reason"] == "dry-run"
        assert remote.posts(event_id) == []


def test_coordinator_only_agent_approves_nothing_itself_but_takes_the_coordinators_message(
        azurite, signing_key, unique_queue, agents, tmp_path):
    with SimulatorServer() as server:
        coordinator = Coordinator(azurite, unique_queue, signing_key)
        remote = RemoteAgent(tmp_path, server, coordinator, poll_interval=0.2,
                             approvals={"coordinator_only": True})
        remote.start(agents)
        # A user-initiated reboot: the sample policy would approve it at once.
        event_id = server.sim.add_event({"EventType": "Reboot", "EventSource": "User"})["EventId"]
        remote.knows(event_id)
        wait_for(lambda: any("no rule matched" in r["message"] and "unless approved remotely" in r["message"]
                             for r in log_records(remote.log)),
                 timeout=10, what="the agent saying it leaves the event to the coordinator")
        assert remote.posts(event_id) == []
        coordinator.send(signing.encode(coordinator.message(event_id)))
        (post,) = wait_for(lambda: remote.posts(event_id), timeout=15, what="the coordinator's approval")
        assert post["started"]
        (approved,) = wait_for(lambda: cloudevents(remote.sink, "approved"), what="approved")
        assert approved["data"]["ApprovedBy"] == f"coordinator:{SOURCE}"


def test_hooks_do_not_see_the_agents_secrets(azurite, signing_key, unique_queue, agents, tmp_path):
    script = tmp_path / "hook.py"
    record = tmp_path / "env.json"
    script.write_text("import json, os, sys\n"
                      f"json.dump(sorted(os.environ), open({str(record)!r}, 'w'))\n")
    with SimulatorServer() as server:
        coordinator = Coordinator(azurite, unique_queue, signing_key)
        remote = RemoteAgent(tmp_path, server, coordinator, poll_interval=0.2,
                             hooks={"prepare": [sys.executable, str(script)]})
        remote.start(agents)
        server.sim.add_event({"EventType": "Reboot"})
        names = wait_for(lambda: record.exists() and record.read_text() and
                         json.loads(record.read_text()), timeout=15, what="the hook")
    assert "SE_EVENT_ID" in names
    assert "APPROVALS_CONN" not in names


# -- every kind of refusal, against one agent ------------------------------------------------


@pytest.fixture(scope="module")
def refusing(azurite, tmp_path_factory) -> Iterator[tuple[RemoteAgent, Coordinator]]:
    base = tmp_path_factory.mktemp("refusing")
    key = KeyPair.new()
    started: list[AgentProcess] = []
    with SimulatorServer() as server:
        coordinator = Coordinator(azurite, f"refuse-{uuid.uuid4().hex[:8]}-{{vm_name}}", key)
        remote = RemoteAgent(base, server, coordinator, poll_interval=0.2)
        remote.start(started)
        try:
            yield remote, coordinator
        finally:
            for agent in started:
                agent.kill()


def _refused(remote: RemoteAgent, coordinator: Coordinator, text: str, event_id: str | None,
             reason: str, timeout: float = 10, subject: str | None = None) -> dict:
    """Send ``text``; it must be poisoned with ``reason``, audited, and never POSTed.

    ``subject``: the audit event's subject when it differs from ``event_id`` (a message too big to
    be read has no EventId the agent could know).
    """
    qid = coordinator.send(text)
    entry = wait_for(lambda: coordinator.poisoned(qid), timeout=timeout, what=f"poison ({reason})")
    assert entry["reason"] == reason, entry
    assert entry["original"] == text[:4096]
    (audit,) = wait_for(lambda: [e for e in cloudevents(remote.sink, "approvalrejected")
                                 if e["data"]["Message"]["QueueMessageId"] == qid],
                        what="the approvalrejected CloudEvent")
    assert audit["data"]["ReasonCode"] == reason
    assert audit["data"]["Reason"].startswith(reason + ": ")
    subject = subject or event_id or "unknown"
    assert audit["id"] == f"{subject}/approvalrejected/{qid}" and audit["subject"] == subject
    if event_id:
        assert remote.posts(event_id) == []
    return audit


def _scheduled(remote: RemoteAgent, **fields: Any) -> str:
    event_id = remote.server.sim.add_event({"EventType": "Reboot", **fields})["EventId"]
    remote.knows(event_id)
    return event_id


def test_wrong_signature_is_refused(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    text = signing.encode(coordinator.message(event_id, key=KeyPair.new()))
    audit = _refused(remote, coordinator, text, event_id, "bad-signature")
    assert audit["data"]["Message"]["Authentic"] is False
    assert audit["data"]["InDocument"] is True and audit["data"]["EventType"] == "Reboot"


def test_tampered_message_is_refused(refusing):
    remote, coordinator = refusing
    wanted, other = _scheduled(remote), _scheduled(remote)
    message = coordinator.message(wanted)
    message["data"]["EventId"] = other  # signed for one event, redirected to another
    _refused(remote, coordinator, signing.encode(message), other, "bad-signature")
    assert remote.posts(wanted) == []


def test_unsigned_message_is_refused(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    message = coordinator.message(event_id)
    del message["signature"]
    _refused(remote, coordinator, signing.encode(message), event_id, "bad-signature")


def test_expired_message_is_refused(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    text = signing.encode(coordinator.message(event_id, expires_in=-1))
    _refused(remote, coordinator, text, event_id, "expired")


def test_replayed_message_is_refused(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    text = signing.encode(coordinator.message(event_id))
    coordinator.send(text)
    wait_for(lambda: remote.posts(event_id), timeout=10, what="the first approval")
    qid = coordinator.send(text)
    entry = wait_for(lambda: coordinator.poisoned(qid), timeout=10, what="the replay refused")
    assert entry["reason"] == "replayed"
    assert len(remote.posts(event_id)) == 1  # the replay never reached IMDS


def test_unknown_event_is_refused_when_the_message_expires(refusing):
    remote, coordinator = refusing
    event_id = str(uuid.uuid4()).upper()
    text = signing.encode(coordinator.message(event_id, expires_in=2))
    audit = _refused(remote, coordinator, text, event_id, "unknown-event")
    assert audit["subject"] == event_id and audit["data"]["InDocument"] is False
    assert audit["data"]["Vm"]["name"] == "vm0" and "eventtype" not in audit


def test_event_gone_from_the_document_is_refused(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    remote.server.sim.delete_event(event_id)
    wait_for(lambda: cloudevents(remote.sink, "canceled"), what="the cancel")
    _refused(remote, coordinator, signing.encode(coordinator.message(event_id)), event_id,
             "unknown-event")


def test_started_event_is_refused(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote, EventStatus="Started")
    audit = _refused(remote, coordinator, signing.encode(coordinator.message(event_id)), event_id,
                     "not-scheduled")
    assert audit["data"]["EventStatus"] == "Started"


def test_message_for_another_vm_is_refused(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    message = coordinator.message(event_id, data={"EventId": event_id, "VmName": "vm7",
                                                  "ExpiresAt": rfc3339(
                                                      datetime.now(UTC) + timedelta(minutes=5),
                                                      milliseconds=True)})
    audit = _refused(remote, coordinator, signing.encode(message), event_id, "wrong-vm")
    assert "another VM's approvals reach this queue" in audit["data"]["Reason"], "a name collision is said"


def test_hmac_signed_message_as_earlier_versions_made_is_refused(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    message = coordinator.message(event_id)
    del message["signature"], message["keyid"]
    secret = base64.b64decode(coordinator.key.public)  # all an agent holds
    message["signature"] = base64.b64encode(
        hmac.new(secret, signing.canonical(message), hashlib.sha256).digest()).decode()
    audit = _refused(remote, coordinator, signing.encode(message), event_id, "bad-signature")
    assert "no keyid" in audit["data"]["Reason"]


@pytest.mark.parametrize("made, lifetime, reason", [
    (timedelta(minutes=10), 600, "future"),
    (-timedelta(hours=25), 26 * 3600, "stale"),
    (-timedelta(minutes=1), 24 * 3600 + 120, "too-long"),
])
def test_message_outside_its_allowed_life_is_refused(refusing, made, lifetime, reason):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    message = coordinator.message(event_id, now=datetime.now(UTC) + made, expires_in=lifetime)
    _refused(remote, coordinator, signing.encode(message), event_id, reason)


def test_malformed_json_is_refused(refusing):
    remote, coordinator = refusing
    _refused(remote, coordinator, '{"specversion": "1.0", "data": {"EventId": ', None, "malformed")


def test_oversized_message_is_refused(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    text = signing.encode(coordinator.message(event_id, padding="x" * 20_000))
    audit = _refused(remote, coordinator, text, event_id, "oversized", subject="unknown")
    assert audit["data"]["EventId"] is None and audit["data"]["Message"]["Authentic"] is False


def test_refusals_never_stopped_the_consumer(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    coordinator.send(signing.encode(coordinator.message(event_id)))
    (post,) = wait_for(lambda: remote.posts(event_id), timeout=10, what="a valid approval")
    assert post["started"]
    assert "Traceback" not in remote.log.read_text()


# -- `se-forwarder check` ---------------------------------------------------------------------


def test_check_reports_missing_queues_then_reachable(azurite, signing_key, unique_queue,
                                                     monkeypatch, tmp_path):
    from se_forwarder import config
    from se_forwarder.approvals.queue import client as approval_queue

    with SimulatorServer() as server:
        path = queue_config(azurite, signing_key, unique_queue, server, monkeypatch, tmp_path)
        settings = config.load(path)
        coordinator = Coordinator(azurite, unique_queue, signing_key)
        assert approval_queue.check(settings) == (
            f"queue {coordinator.name} does not exist (the agent creates it at start when its "
            "identity may; otherwise create it)")
        coordinator.queue.create_queue()
        coordinator.poison.create_queue()
        assert approval_queue.check(settings) is None
        monkeypatch.setenv("APPROVALS_PUBLIC_KEYS", "tooshort")
        assert "environment variable APPROVALS_PUBLIC_KEYS: key #1" in approval_queue.check(settings)


def test_lower_case_event_id_is_approved_as_imds_spells_it(refusing):
    remote, coordinator = refusing
    event_id = _scheduled(remote)
    assert event_id != event_id.lower()  # IMDS writes GUIDs in upper case; .NET in lower case
    coordinator.send(signing.encode(coordinator.message(event_id.lower())))
    (post,) = wait_for(lambda: remote.posts(event_id), timeout=10, what="the approval POST")
    assert post["started"]
    (approved,) = wait_for(lambda: [e for e in cloudevents(remote.sink, "approved")
                                    if e["subject"] == event_id], what="the approved CloudEvent")
    assert approved["id"] == f"{event_id}/approved"


def test_a_queue_named_after_the_vm_waits_for_the_instance_metadata_events_do_not(
        azurite, signing_key, unique_queue, agents, tmp_path):
    with SimulatorServer(instance_endpoint="missing") as server:
        coordinator = Coordinator(azurite, unique_queue, signing_key)
        remote = RemoteAgent(tmp_path, server, coordinator, poll_interval=0.2)
        agents.append(AgentProcess(["--config", str(remote.config)], env=remote.env,
                                   log_path=remote.log).start())
        event_id = server.sim.add_event({"EventType": "Reboot"})["EventId"]
        remote.knows(event_id)  # forwarded at once, with the host name
        (waiting,) = [r for r in log_records(remote.log)
                      if r["message"].startswith("approval queue: waiting for the instance metadata")]
        assert "is made from the VM's name" in waiting["message"]
        assert "events are forwarded meanwhile" in waiting["message"]
        assert not coordinator.queue_exists()
        server.instance_endpoint = "ok"
        wait_for(coordinator.queue_exists, timeout=30, what="the queue of vm0 once the name is known")
        coordinator.send(json.dumps(coordinator.message(event_id)))
        wait_for(lambda: remote.posts(event_id), timeout=20, what="the approval through the queue")
        (approved,) = wait_for(lambda: cloudevents(remote.sink, "approved"), what="approved")
        assert approved["data"]["ApprovedBy"] == f"coordinator:{SOURCE}"
        assert approved["data"]["Vm"]["name"] == "vm0" and approved["data"]["Vm"]["complete"] is True


# -- a signer written from the README alone ------------------------------------------------------


def _independent_signer(key_pem: Path, message: dict[str, Any], workdir: Path) -> str:
    """Signs as the README says, with openssl doing the Ed25519 (no se_forwarder code): keyid from
    the raw public key (the last 32 bytes of its DER SubjectPublicKeyInfo), canonical bytes = the
    message without signature, keys sorted, no spaces, non-ASCII escaped; signature = base64."""
    der = subprocess.run(["openssl", "pkey", "-in", str(key_pem), "-pubout", "-outform", "DER"],
                         capture_output=True, check=True).stdout
    message = {**message, "keyid": hashlib.sha256(der[-32:]).hexdigest()[:16]}
    body = workdir / "canonical.json"
    body.write_bytes(json.dumps(message, sort_keys=True, separators=(",", ":"),
                                ensure_ascii=True).encode("ascii"))
    signature = subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", str(key_pem), "-rawin",
                                "-in", str(body)], capture_output=True, check=True).stdout
    message["signature"] = base64.b64encode(signature).decode("ascii")
    return json.dumps(message)


def test_a_message_signed_by_openssl_as_the_readme_describes_is_approved(azurite, unique_queue,
                                                                        agents, tmp_path):
    key_pem, public_pem = tmp_path / "coordinator.pem", tmp_path / "coordinator.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key_pem)], check=True)
    subprocess.run(["openssl", "pkey", "-in", str(key_pem), "-pubout", "-out", str(public_pem)],
                   check=True)
    with SimulatorServer() as server:
        coordinator = Coordinator(azurite, unique_queue, KeyPair.new())
        remote = RemoteAgent(tmp_path, server, coordinator, poll_interval=0.2)
        remote.env["APPROVALS_PUBLIC_KEYS"] = public_pem.read_text()  # PEM, as openssl wrote it
        remote.start(agents)
        event_id = server.sim.add_event({"EventType": "Reboot"})["EventId"]
        remote.knows(event_id)
        now = datetime.now(UTC)
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        message = {"specversion": "1.0", "type": "com.azure.scheduledevents.approve",
                   "id": str(uuid.uuid4()), "source": "urn:independent:signer",
                   "time": now.strftime(stamp), "datacontenttype": "application/json",
                   "data": {"EventId": event_id, "VmName": "vm0", "Reason": "caf\u00e9 drained",
                            "ExpiresAt": (now + timedelta(minutes=5)).strftime(stamp)}}
        coordinator.send(_independent_signer(key_pem, message, tmp_path))
        (post,) = wait_for(lambda: remote.posts(event_id), timeout=15, what="the approval POST")
        assert post["started"]
        (approved,) = wait_for(lambda: cloudevents(remote.sink, "approved"), what="approved")
        assert approved["data"]["ApprovedBy"] == "coordinator:urn:independent:signer"


def test_an_agent_says_when_its_queue_would_be_a_peers_too(azurite, signing_key, unique_queue, agents,
                                                          tmp_path):
    template = unique_queue.replace("-{vm_name}", "-every-vm")  # names no VM: one queue for all
    with SimulatorServer() as server:
        coordinator = Coordinator(azurite, template, signing_key)
        remote = RemoteAgent(tmp_path, server, coordinator)
        remote.start(agents)
        event_id = server.sim.add_event({"EventType": "Reboot", "Resources": ["vm0", "vm7"]})["EventId"]
        remote.knows(event_id)
        coordinator.send(json.dumps(coordinator.message(event_id)))  # the agent reads the document for it

        def said(text: str) -> list[dict]:
            return [r for r in log_records(remote.log) if text in r["message"]]

        (peer,) = wait_for(lambda: said("VM vm7's approval queue is this VM's too"), timeout=20,
                           what="the warning about vm7")
        assert peer["level"] == "warning" and coordinator.name in peer["message"]
        (template_warning,) = said("names no VM: every VM using it shares queue")
        assert template_warning["level"] == "warning"


def test_check_warns_that_a_template_naming_no_vm_gives_every_vm_one_queue(
        azurite, signing_key, unique_queue, monkeypatch, tmp_path):
    from se_forwarder import checks, config

    template = unique_queue.replace("-{vm_name}", "-every-vm")
    with SimulatorServer() as server:
        path = queue_config(azurite, signing_key, template, server, monkeypatch, tmp_path)
        coordinator = Coordinator(azurite, template, signing_key)
        coordinator.queue.create_queue()
        coordinator.poison.create_queue()
        ok, text = checks.check_queue(config.load(path))
        assert ok == checks.WARN and f"the template {template!r} names no VM" in text
