"""The agent's identity and signed reports on the hub, end to end: the simulator's IMDS (with its
attested documents) over HTTP, `se-forwarder run` subprocesses, the Event Hubs broker, and the
real azure-eventhub consumer; each event decoded as the coordinator's reader decodes it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator.config.anchors import anchors
from se_forwarder.fleet.coordinator.edge import Attested, verify
from se_forwarder.fleet.coordinator.input import decode
from se_forwarder.identity.attested import long_nonce_for
from se_forwarder.model import Kind
from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.wire import vm_id_for
from tests.support.agent import AgentProcess, cloudevents, log_records
from tests.support.config import write_config
from tests.support.waiting import wait_for

from .broker import EventHubsBroker
from .helpers import consume, stored_types_and_ids

IDENTITY, HEARTBEAT = Kind.IDENTITY.type, Kind.HEARTBEAT.type


def _agent(tmp_path: Path, imds_url: str, hubs: dict[str, EventHubsBroker], *,
           heartbeat: float | None = None) -> AgentProcess:
    """An agent with one Event Hubs sink per broker (``name`` -> broker; a name ending in
    ``binary`` sends binary mode) and a file sink, as a user configures them."""
    sinks = [{"type": "file", "path": str(tmp_path / "events.jsonl")}]
    env = {}
    for name in hubs:
        env[f"EH_{name.upper()}"] = hubs[name].connection_string()
        sinks.append({"type": "eventhubs", "name": name, "eventhub": "scheduled-events",
                      "credential": "connection-string", "connection_string_env": f"EH_{name.upper()}",
                      "mode": "binary" if name.endswith("binary") else "structured",
                      **({"heartbeat_interval": heartbeat} if heartbeat else {})})
    config = write_config(tmp_path / "agent.toml", sinks, imds={"url": imds_url, "poll_interval": 0.1},
                          state={"dir": str(tmp_path / "state")},
                          telemetry={"log_format": "json", "log_level": "debug"})
    return AgentProcess(["--config", str(config)], env=env, log_path=tmp_path / "agent.log")


def _public_key(tmp_path: Path) -> Ed25519PublicKey:
    key = signing.load_private_key((tmp_path / "state" / "identity.key").read_bytes(), "key file")
    return key.public_key()


def _events(broker: EventHubsBroker, count: int) -> list[dict]:
    """Every event on ``broker`` read back with the real consumer, decoded as the coordinator
    decodes it (structured or binary)."""
    got = consume(broker.connection_string(), count)
    assert len(got) == count
    return [decode(r.event) for r in got]


def _stored_count(broker: EventHubsBroker) -> int:
    return len(list(broker.all_messages()))


def _of(events: list[dict], ce_type: str) -> list[dict]:
    return [e for e in events if e["type"] == ce_type]


def test_every_event_on_the_hub_verifies_with_the_agents_key_in_both_modes(
        simulator, eventhubs_broker, agents, tmp_path):
    with EventHubsBroker() as binary_broker:
        hubs = {"hub": eventhubs_broker, "hubbinary": binary_broker}
        agent = _agent(tmp_path, simulator.url, hubs, heartbeat=1).start()
        agents.append(agent)
        freeze = simulator.sim.add_event({"EventType": "Freeze"})["EventId"]
        wait_for(lambda: len(cloudevents(tmp_path / "events.jsonl")) == 1, timeout=30,
                 what="the scheduled event recorded")
        simulator.sim.patch_event(freeze, {"EventStatus": "Started"})
        wait_for(lambda: len(cloudevents(tmp_path / "events.jsonl")) == 2, timeout=30,
                 what="the started event recorded")
        simulator.sim.delete_event(freeze)
        wanted = {IDENTITY, HEARTBEAT, Kind.SCHEDULED.type, Kind.STARTED.type, Kind.COMPLETED.type,
                  Kind.RECOVERED.type}
        for broker in hubs.values():
            wait_for(lambda b=broker: {t for t, _ in stored_types_and_ids(b)} >= wanted, timeout=30,
                     what="an identity, a heartbeat, scheduled, started, completed and recovered on the hub")
        assert agent.terminate() == 0
        read = {name: _events(broker, _stored_count(broker)) for name, broker in hubs.items()}

    key = _public_key(tmp_path)
    stored = {e["id"]: e for e in cloudevents(tmp_path / "events.jsonl")}
    assert set(stored) == {f"{freeze}/{kind}" for kind in ("scheduled", "started", "completed", "recovered")}
    assert not any("signature" in e or "keyid" in e for e in stored.values()), "stored unsigned"
    for events in read.values():
        assert {e["type"] for e in events} >= wanted
        for event in events:
            assert signing.problem(event, [key]) is None, event["id"]
            assert event["keyid"] == signing.keyid(key)
        sent = {e["id"]: e for e in events if e["id"] in stored}
        assert set(sent) == set(stored), "the same ids as stored"
        for ident, event in sent.items():
            unsigned = {k: v for k, v in event.items() if k not in ("keyid", "signature")}
            assert unsigned == stored[ident], "what was signed is the stored event"


def test_the_identity_event_binds_the_vm_to_the_key_with_a_document_of_the_simulators_ca(
        simulator, eventhubs_broker, agents, tmp_path):
    agent = _agent(tmp_path, simulator.url, {"hub": eventhubs_broker}).start()
    agents.append(agent)
    wait_for(lambda: _stored_count(eventhubs_broker) >= 1, timeout=30, what="the identity event")
    assert agent.terminate() == 0

    (identity,) = _of(_events(eventhubs_broker, _stored_count(eventhubs_broker)), IDENTITY)
    key = _public_key(tmp_path)
    raw = base64.b64decode(identity["data"]["PublicKey"])
    assert raw == signing.raw_public(key)
    assert signing.problem(identity, [Ed25519PublicKey.from_public_bytes(raw)]) is None, \
        "signed by the key it registers"
    assert identity["data"]["Nonce"] == long_nonce_for(raw), "the specification's 32 characters"
    trusted = anchors([simulator.attestation_ca_file], [simulator.attestation_intermediate_file])
    claims = verify(identity["data"]["AttestedDocument"], anchors=trusted, nonce=long_nonce_for(raw),
                    now=_now())
    assert isinstance(claims, Attested), claims
    assert claims.vm_id == identity["vmid"] == identity["subject"] == vm_id_for("vm0")
    assert identity["id"] == (f"identity/{claims.vm_id}/{signing.keyid(key)}/"
                              f"{int(claims.created_on.timestamp())}")


def test_the_agent_registers_again_before_its_document_expires(eventhubs_broker, agents, tmp_path):
    with SimulatorServer(attestation_lifetime=10) as imds:
        agent = _agent(tmp_path, imds.url, {"hub": eventhubs_broker}).start()
        agents.append(agent)
        wait_for(lambda: _stored_count(eventhubs_broker) >= 3, timeout=60,
                 what="three registrations")
        assert agent.terminate() == 0
        trusted = anchors([imds.attestation_ca_file], [imds.attestation_intermediate_file])

    identities = _of(_events(eventhubs_broker, _stored_count(eventhubs_broker)), IDENTITY)
    nonce = long_nonce_for(signing.raw_public(_public_key(tmp_path)))
    documents = [verify(e["data"]["AttestedDocument"], anchors=trusted, nonce=nonce,
                        now=_parse(e["time"])) for e in identities]
    assert all(isinstance(d, Attested) for d in documents), documents
    assert len({e["id"] for e in identities}) == len(identities) >= 3
    for earlier, later in zip(documents, documents[1:], strict=False):
        assert later.created_on <= earlier.expires_on, "registered again before the last expired"


def test_the_identity_event_reaches_the_hub_ahead_of_the_backlog(
        simulator, eventhubs_broker, agents, tmp_path):
    eventhubs_broker.stop()
    agent = _agent(tmp_path, simulator.url, {"hub": eventhubs_broker}).start()
    agents.append(agent)
    freeze = simulator.sim.add_event({"EventType": "Freeze"})["EventId"]
    log = tmp_path / "agent.log"
    # Once the worker has tried the identity event, every pass tries it first (a batch attempt
    # begun before the registration may still be under way until then).
    wait_for(lambda: any(r["message"].startswith("identity event not delivered")
                         for r in log_records(log))
             and len(cloudevents(tmp_path / "events.jsonl")) == 1, timeout=30,
             what="the identity event tried and the event recorded while the hub is down")
    eventhubs_broker.start()
    wait_for(lambda: _stored_count(eventhubs_broker) >= 2, timeout=60, what="the hub catching up")
    assert agent.terminate() == 0
    events = _events(eventhubs_broker, _stored_count(eventhubs_broker))
    assert [e["type"] for e in events][:2] == [IDENTITY, Kind.SCHEDULED.type]
    assert events[1]["id"] == f"{freeze}/scheduled"


def test_forwarding_never_waits_for_attested_data(simulator, eventhubs_broker, agents, tmp_path):
    simulator.sim.add_fault({"hang": True, "route": "attested", "seconds": 600})
    agent = _agent(tmp_path, simulator.url, {"hub": eventhubs_broker}).start()
    agents.append(agent)
    freeze = simulator.sim.add_event({"EventType": "Freeze"})["EventId"]
    wait_for(lambda: _stored_count(eventhubs_broker) >= 1, timeout=30, what="the event on the hub")
    assert agent.terminate() == 0
    (event,) = _events(eventhubs_broker, 1)
    assert event["id"] == f"{freeze}/scheduled"
    assert signing.problem(event, [_public_key(tmp_path)]) is None, "signed all the same"
    assert any(r["route"] == "attested" for r in simulator.sim.requests()), "it did ask"


def _now():
    from datetime import UTC, datetime

    return datetime.now(UTC)


def _parse(text: str):
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """The agents talk to loopback only."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
