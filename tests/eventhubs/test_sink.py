"""The eventhubs sink delivers outbox events to a real AMQP broker, read back by a real consumer."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.sinks import eventhubs
from se_forwarder.sinks.base import DeadLetter, Delivered, Retry

from .helpers import cloud_event, consume, parse_received, stored
from .websocket_front import WebSocketFront

VM_A = "9f2c1d4e-0000-4000-8000-00000000000a"
VM_B = "9f2c1d4e-0000-4000-8000-00000000000b"
ENV = "SE_TEST_EH_CONN"


@pytest.fixture
def make_sink(monkeypatch, tmp_path):
    """Build sinks the way the agent does (validate, then create); close them after the test."""
    sinks = []

    def make(broker, **options):
        monkeypatch.setenv(ENV, options.pop("conn", None) or broker.connection_string())
        raw = {
            "eventhub": broker.eventhub,
            "credential": "connection-string",
            "connection_string_env": ENV,
            **options,
        }
        sink = eventhubs.create(
            "eh", eventhubs.validate(raw, "sinks[0]"), SimpleNamespace(state_dir=tmp_path)
        )
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        sink.close()


def _events(vmid: str, count: int, start: int = 0) -> list[dict]:
    return [
        cloud_event(vmid, f"EV-{vmid[-1]}-{i:03d}", incarnation=i + 1) for i in range(start, start + count)
    ]


def _partition(broker, vmid: str) -> str:
    return str(broker.store.partition_for_key(vmid))


# -- delivery formats ----------------------------------------------------------------------------


def test_structured_mode_sends_the_cloudevent_json_with_its_content_type(eventhubs_broker, make_sink):
    sink = make_sink(eventhubs_broker)
    events = _events(VM_A, 3)
    report = sink.deliver([stored(i + 1, e) for i, e in enumerate(events)])
    assert report.outcomes == [Delivered()] * 3

    got = consume(eventhubs_broker.connection_string(), 3, partition_id=_partition(eventhubs_broker, VM_A))
    assert [r.content_type for r in got] == ["application/cloudevents+json"] * 3
    parsed = [parse_received(r) for r in got]
    assert [p.get_id() for p in parsed] == [e["id"] for e in events]
    assert parsed[0].get_data() == events[0]["data"]
    assert parsed[0].get_extension("vmid") == VM_A
    assert [json.loads(r.body) for r in got] == events  # the outbox's JSON, unchanged


def test_amqp_over_websockets_delivers_through_the_websocket_endpoint(eventhubs_broker, make_sink):
    with WebSocketFront(eventhubs_broker.port) as front:
        # The SDK's WebSocket URL carries no port but the endpoint's (443 on Azure), so the test
        # points custom_endpoint_address at the front, as an application gateway would be.
        sink = make_sink(eventhubs_broker, transport="amqp-websockets",
                         custom_endpoint_address=f"http://127.0.0.1:{front.port}")
        events = _events(VM_A, 2)
        assert sink.deliver([stored(i + 1, e) for i, e in enumerate(events)]).outcomes == [Delivered()] * 2
        sink.close()
    assert front.paths and set(front.paths) == {"/$servicebus/websocket"}  # only WebSockets were used
    got = consume(eventhubs_broker.connection_string(), 2, partition_id=_partition(eventhubs_broker, VM_A))
    assert [json.loads(r.body) for r in got] == events


def test_transport_is_amqp_or_amqp_websockets():
    raw = {"eventhub": "h", "fully_qualified_namespace": "ns.servicebus.windows.net"}
    assert eventhubs.validate(raw, "sinks[0]").transport == "amqp"
    websockets = eventhubs.validate({**raw, "transport": "amqp-websockets"}, "sinks[0]")
    assert websockets.transport == "amqp-websockets"
    with pytest.raises(ConfigError, match=r"sinks\[0\]\.transport"):
        eventhubs.validate({**raw, "transport": "websocket"}, "sinks[0]")


@pytest.mark.parametrize("url", ["http://gateway.example.com", "ftp://127.0.0.1", "https://gw:99999",
                                 "https://gw.example.com/path"])
def test_custom_endpoint_address_is_an_https_origin(url):
    raw = {"eventhub": "h", "fully_qualified_namespace": "ns.servicebus.windows.net",
           "custom_endpoint_address": url}
    with pytest.raises(ConfigError, match=r"sinks\[0\]\.custom_endpoint_address"):
        eventhubs.validate(raw, "sinks[0]")


def test_binary_mode_sends_cloudevents_application_properties(eventhubs_broker, make_sink):
    sink = make_sink(eventhubs_broker, mode="binary")
    (event,) = _events(VM_A, 1)
    assert sink.deliver([stored(1, event)]).outcomes == [Delivered()]

    (got,) = consume(eventhubs_broker.connection_string(), 1, partition_id=_partition(eventhubs_broker, VM_A))
    assert got.content_type == "application/json"
    assert got.properties[b"cloudEvents_id"] == event["id"].encode()
    assert got.properties[b"cloudEvents_time"] == event["time"].encode()  # a string, not an int
    assert got.properties[b"cloudEvents_incarnation"] == 1
    parsed = parse_received(got)
    assert parsed.get_type() == event["type"]
    assert parsed.get_subject() == event["subject"]
    assert parsed.get_data() == event["data"]


def test_partition_key_is_the_vmid_and_each_vms_order_is_kept(eventhubs_broker, make_sink):
    sink = make_sink(eventhubs_broker)
    a, b = _events(VM_A, 4), _events(VM_B, 4)
    interleaved = [e for pair in zip(a, b, strict=True) for e in pair]
    assert sink.deliver([stored(i + 1, e) for i, e in enumerate(interleaved)]).outcomes == [Delivered()] * 8

    partitions = {_partition(eventhubs_broker, VM_A), _partition(eventhubs_broker, VM_B)}
    got = consume(eventhubs_broker.connection_string(), 8, partition_ids=sorted(partitions))
    for vmid, expected in ((VM_A, a), (VM_B, b)):
        mine = [r for r in got if json.loads(r.body)["vmid"] == vmid]
        assert {r.partition_key for r in mine} == {vmid.encode()}
        assert {r.partition_id for r in mine} == {_partition(eventhubs_broker, vmid)}
        assert [json.loads(r.body)["id"] for r in mine] == [e["id"] for e in expected]
        assert [r.sequence_number for r in mine] == sorted(r.sequence_number for r in mine)


def test_a_batch_larger_than_the_link_limit_is_split(small_broker, make_sink):
    sink = make_sink(small_broker)
    padding = {"Description": "x" * 1200}  # ~1.7 KB each, a 4 KiB link takes two per message
    events = [cloud_event(VM_A, f"BIG-{i}", extra_data=padding) for i in range(7)]
    assert sink.deliver([stored(i + 1, e) for i, e in enumerate(events)]).outcomes == [Delivered()] * 7
    kept = small_broker.messages(small_broker.store.partition_for_key(VM_A))
    assert [json.loads(m.message().body)["id"] for m in kept] == [e["id"] for e in events]
    assert small_broker.received_count == 7


def test_an_event_too_large_for_the_hub_is_dead_lettered_and_the_rest_delivered(small_broker, make_sink):
    sink = make_sink(small_broker)
    small = _events(VM_A, 2)
    huge = cloud_event(VM_A, "HUGE", extra_data={"Description": "y" * 6000})
    report = sink.deliver([stored(1, small[0]), stored(2, huge), stored(3, small[1])])

    assert report.outcomes[0] == Delivered() and report.outcomes[2] == Delivered()
    dead = report.outcomes[1]
    assert isinstance(dead, DeadLetter)
    assert "4096 bytes" in dead.reason and "larger than" in dead.reason
    got = consume(small_broker.connection_string(), 2, partition_id=_partition(small_broker, VM_A))
    assert [json.loads(r.body)["id"] for r in got] == [small[0]["id"], small[1]["id"]]


# -- failures --------------------------------------------------------------------------------------


def test_broker_down_gives_retry_then_delivery_after_restart(eventhubs_broker, make_sink):
    sink = make_sink(eventhubs_broker)
    first, second = _events(VM_A, 2)
    assert sink.deliver([stored(1, first)]).outcomes == [Delivered()]

    eventhubs_broker.stop()
    report = sink.deliver([stored(2, second)])
    assert len(report.outcomes) == 1 and isinstance(report.outcomes[0], Retry)
    assert "cannot reach Event Hubs" in report.outcomes[0].reason
    assert "\n" not in report.outcomes[0].reason

    eventhubs_broker.start()
    assert sink.deliver([stored(2, second)]).outcomes == [Delivered()]
    got = consume(eventhubs_broker.connection_string(), 2, partition_id=_partition(eventhubs_broker, VM_A))
    assert [json.loads(r.body)["id"] for r in got] == [first["id"], second["id"]]


def test_server_busy_gives_retry(eventhubs_broker, make_sink):
    sink = make_sink(eventhubs_broker)
    sink.check()  # connect first, so the faults hit the send
    eventhubs_broker.fail_next_sends(5)
    (outcome,) = sink.deliver([stored(1, _events(VM_A, 1)[0])]).outcomes
    assert isinstance(outcome, Retry)
    assert "busy" in outcome.reason


def test_a_refused_key_gives_one_credential_line_without_the_secret(eventhubs_broker, make_sink):
    bad_key = "c2VjcmV0LXRoYXQtbXVzdC1uZXZlci1sZWFr"
    sink = make_sink(eventhubs_broker, conn=eventhubs_broker.connection_string(key=bad_key))
    (outcome,) = sink.deliver([stored(1, _events(VM_A, 1)[0])]).outcomes
    assert isinstance(outcome, Retry)
    assert outcome.reason.startswith("Event Hubs credential (connection-string) was refused")
    assert "\n" not in outcome.reason
    assert bad_key not in outcome.reason and "SharedAccessKey" not in outcome.reason
    problem = sink.check()
    assert problem is not None and "refused" in problem and bad_key not in problem


def test_a_rotated_connection_string_is_used_after_an_authentication_failure(
    eventhubs_broker, make_sink, monkeypatch
):
    sink = make_sink(eventhubs_broker, conn=eventhubs_broker.connection_string(key="d3Jvbmc="))
    event = _events(VM_A, 1)[0]
    assert isinstance(sink.deliver([stored(1, event)]).outcomes[0], Retry)
    monkeypatch.setenv(ENV, eventhubs_broker.connection_string())
    assert sink.deliver([stored(1, event)]).outcomes == [Delivered()]


def test_a_missing_connection_string_variable_gives_a_credential_retry(
    eventhubs_broker, make_sink, monkeypatch
):
    sink = make_sink(eventhubs_broker)
    monkeypatch.delenv(ENV)
    (outcome,) = sink.deliver([stored(1, _events(VM_A, 1)[0])]).outcomes
    assert outcome == Retry(
        f"Event Hubs credential (connection-string): environment variable {ENV} is not set or empty"
    )


def test_a_connection_string_for_another_hub_is_refused_by_name(eventhubs_broker, make_sink):
    conn = eventhubs_broker.connection_string().replace("EntityPath=scheduled-events", "EntityPath=other")
    sink = make_sink(eventhubs_broker, conn=conn)
    problem = sink.check()
    assert problem is not None and "'other', not 'scheduled-events'" in problem


def test_check_reaches_the_hub_and_names_what_failed(eventhubs_broker, make_sink):
    sink = make_sink(eventhubs_broker)
    assert sink.check() is None
    eventhubs_broker.stop()
    problem = sink.check()
    assert problem is not None
    assert problem.startswith("cannot reach Event Hubs 127.0.0.1:")
    assert "Connection refused" in problem


def test_connection_string_from_a_file(eventhubs_broker, tmp_path):
    secret = tmp_path / "eh.conn"
    secret.write_text(eventhubs_broker.connection_string() + "\n")
    options = eventhubs.validate(
        {
            "eventhub": "scheduled-events",
            "credential": "connection-string",
            "connection_string_file": str(secret),
        },
        "sinks[0]",
    )
    sink = eventhubs.create("eh", options, SimpleNamespace(state_dir=tmp_path))
    try:
        assert sink.deliver([stored(1, _events(VM_A, 1)[0])]).outcomes == [Delivered()]
    finally:
        sink.close()


# -- configuration ---------------------------------------------------------------------------------


def test_validate_defaults_to_managed_identity_and_structured_mode():
    options = eventhubs.validate(
        {"fully_qualified_namespace": "sb://ns.servicebus.windows.net/", "eventhub": "se"}, "sinks[1]"
    )
    assert options["credential"] == "managed-identity"
    assert options["mode"] == "structured"
    assert options["fully_qualified_namespace"] == "ns.servicebus.windows.net"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"eventhub": "se", "colour": 1}, "sinks[1].colour: unknown key"),
        ({"eventhub": "se"}, "sinks[1].fully_qualified_namespace: missing"),
        ({"fully_qualified_namespace": "ns.servicebus.windows.net"}, "sinks[1].eventhub: missing"),
        ({"eventhub": "se", "fully_qualified_namespace": "https://x"}, "sinks[1].fully_qualified_namespace:"),
        ({"eventhub": "se", "credential": "password"}, "sinks[1].credential: 'password' is not one of"),
        (
            {"eventhub": "se", "fully_qualified_namespace": "n.servicebus.windows.net", "mode": "batch"},
            "sinks[1].mode:",
        ),
        (
            {"eventhub": "se", "credential": "connection-string"},
            "sinks[1].connection_string_env: give exactly one",
        ),
        (
            {
                "eventhub": "se",
                "credential": "connection-string",
                "connection_string_env": "Endpoint=sb://x/;K=v",
            },
            "is not an environment variable name",
        ),
        (
            {
                "eventhub": "se",
                "fully_qualified_namespace": "n.servicebus.windows.net",
                "connection_string_env": "X",
            },
            "sinks[1].connection_string_env: only for credential = connection-string",
        ),
        (
            {
                "eventhub": "se",
                "credential": "connection-string",
                "connection_string_env": "X",
                "client_id": "c",
            },
            "sinks[1].client_id: only for",
        ),
    ],
)
def test_validate_names_the_bad_key(raw, message):
    with pytest.raises(ConfigError) as info:
        eventhubs.validate(raw, "sinks[1]")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_validate_does_not_read_the_secret(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    options = eventhubs.validate(
        {"eventhub": "se", "credential": "connection-string", "connection_string_env": ENV}, "sinks[0]"
    )
    assert options["connection_string_env"] == ENV


def test_the_sink_module_does_not_import_azure_until_it_connects(tmp_path):
    code = (
        "import sys\n"
        "from types import SimpleNamespace\n"
        "from se_forwarder.sinks import eventhubs\n"
        "o = {'eventhub': 'se', 'fully_qualified_namespace': 'n.servicebus.windows.net'}\n"
        "o = eventhubs.validate(o, 's')\n"
        "eventhubs.create('eh', o, SimpleNamespace(state_dir='.'))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('azure', 'proton', 'uamqp')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_a_token_credential_that_cannot_get_a_token_gives_one_credential_line():
    """azure-eventhub 5.15.1 raises a plain EventHubError during azure-identity's error (seen
    against the local broker); the sink names the credential, not the network. TLS cannot be
    turned off in the sink, so this path is exercised with the SDK's exception as it raises it."""
    from azure.eventhub.exceptions import EventHubError
    from azure.identity import CredentialUnavailableError

    options = eventhubs.validate(
        {"eventhub": "se", "fully_qualified_namespace": "ns.servicebus.windows.net", "client_id": "abc"}, "s"
    )
    sink = eventhubs.create("eh", options, None)
    message = "ManagedIdentityCredential authentication unavailable. No identity has been assigned."
    try:
        try:
            raise CredentialUnavailableError(message)
        except CredentialUnavailableError:
            raise EventHubError(f"{message}\n{message}")  # noqa: B904 - the SDK's own shape
    except EventHubError as exc:
        outcome = sink._failure(exc)
    assert outcome == Retry(f"Event Hubs credential (managed-identity) failed: {message}")
