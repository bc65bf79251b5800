"""The coordinator over AMQP over WebSockets (``transport = "amqp-websockets"``, port 443 in Azure), for
networks that let only HTTPS out: its hub reader, its producer and ``check``, for the agents' hub
and the Azure feed hub alike, through tests/eventhubs/websocket_front.py (the Event Hubs WebSocket
endpoint played in front of the broker fixture). The SDK's WebSocket URL carries no port of its
own, so ``custom_endpoint_address`` points it at the front, as it would at an application gateway."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator.check.services import hub
from se_forwarder.fleet.coordinator.config.azure import load_azure
from se_forwarder.fleet.coordinator.config.hub import load_eventhub
from se_forwarder.fleet.coordinator.input import Batch, HubReader
from se_forwarder.fleet.coordinator.output import HubProducer
from tests.eventhubs.broker import EventHubsBroker
from tests.eventhubs.websocket_front import PATH, WebSocketFront
from tests.support.waiting import wait_for

ENV = "COORD_WS_HUB"


@pytest.fixture
def front(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[EventHubsBroker, WebSocketFront]]:
    with EventHubsBroker(partition_count=2, consumer_groups=("coordinator",)) as broker, \
            WebSocketFront(broker.port) as ws:
        monkeypatch.setenv(ENV, broker.connection_string())
        yield broker, ws


def settings(ws: WebSocketFront, where: str = "eventhub") -> Any:
    return load_eventhub({"eventhub": "scheduled-events", "credential": "connection-string",
                          "connection_string_env": ENV, "transport": "amqp-websockets",
                          "custom_endpoint_address": f"http://127.0.0.1:{ws.port}"}, where)


def test_decisions_are_published_and_read_back_over_websockets_only(front):
    broker, ws = front
    hub_settings = settings(ws)
    producer = HubProducer(hub_settings, partition_key="coordinator")
    try:
        producer.publish([json.dumps({"specversion": "1.0", "type": "t", "source": "s", "id": f"d{n}"})
                          for n in range(3)])
    finally:
        producer.drop()
    assert sum(1 for _ in broker.all_messages()) == 3
    read: list[Batch] = []
    reader = HubReader(hub_settings, {}, read.append)
    reader.start()
    try:
        wait_for(lambda: sum(len(b.events) for b in read) == 3, 30, "the three events read back")
    finally:
        reader.close()
    assert {e["id"] for b in read for e, _ in b.events if e} == {"d0", "d1", "d2"}
    assert ws.paths and set(ws.paths) == {PATH}  # every connection was a WebSocket one


def test_check_reads_the_consumer_group_and_opens_a_sender_over_websockets(front):
    _, ws = front
    ok, text = hub(settings(ws), send=True)
    assert ok is True and "read in consumer group coordinator; decisions may be published" in text
    assert set(ws.paths) == {PATH}


def test_the_azure_feed_hub_takes_the_same_keys():
    azure = load_azure({"subscriptions": ["00000000-0000-0000-0000-000000000001"],
                        "feed": {"fully_qualified_namespace": "ns.servicebus.windows.net",
                                 "transport": "amqp-websockets",
                                 "custom_endpoint_address": "https://gateway.example.com"}})
    assert azure is not None and azure.feed is not None
    assert (azure.feed.transport, azure.feed.custom_endpoint_address) == (
        "amqp-websockets", "https://gateway.example.com")


@pytest.mark.parametrize(("table", "message"), [
    ({"transport": "websocket"}, "eventhub.transport"),
    ({"custom_endpoint_address": "http://gateway.example.com"}, "eventhub.custom_endpoint_address"),
    ({"custom_endpoint_address": "https://gw.example.com/path"}, "give the scheme, host and port only"),
])
def test_bad_transport_settings_are_one_line(table, message):
    with pytest.raises(ConfigError) as info:
        load_eventhub({"fully_qualified_namespace": "ns.servicebus.windows.net", **table})
    assert message in str(info.value) and "\n" not in str(info.value)
