"""``[azure]`` (azure_config.py): Azure's feed as a second input, each key checked with one line naming
it; without the section the coordinator reads the agents only."""

from __future__ import annotations

from pathlib import Path

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator.config import from_dict

from .azure import BASE_CONFIG as BASE

SUB = "6e0fea51-f7a4-5898-88ed-282fb2a813c0"


def azure(section: dict):
    return from_dict({**BASE, "azure": section}, environ={})


def test_without_azure_the_coordinator_reads_the_agents_only():
    settings = from_dict(BASE, environ={})
    assert settings.azure is None
    assert (settings.policy.acknowledge, settings.policy.azure_fresh_for) == (False, 0.0)


def test_the_defaults_observe_azure_and_approve_only_through_agents():
    settings = azure({"subscriptions": [SUB.upper()]})
    a = settings.azure
    assert a is not None and a.feed is None
    assert (a.subscriptions, a.arm_endpoint, a.arg_interval, a.acknowledge, a.credential) == (
        (SUB,), "https://management.azure.com", 300.0, False, "managed-identity")
    assert (a.scope, a.verify, a.fresh_for) == ("https://management.azure.com/.default", True, 600.0)
    assert (settings.policy.acknowledge, settings.policy.azure_fresh_for) == (False, 600.0)


def test_a_full_section_with_its_feed_hub(tmp_path: Path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    settings = azure({"subscriptions": [SUB], "arm_endpoint": "https://127.0.0.1:8443/", "ca_file": str(ca),
                      "arg_interval": "10s", "acknowledge": True, "credential": "default", "client_id": "c",
                      "feed": {"fully_qualified_namespace": "ns.servicebus.windows.net",
                               "consumer_group": "coordinator"}})
    a = settings.azure
    assert a is not None and a.feed is not None
    assert (a.feed.eventhub, a.feed.consumer_group, a.feed.where) == (
        "azure-feed", "coordinator", "azure.feed")
    assert (a.arm_endpoint, a.verify, a.arg_interval, a.fresh_for) == (
        "https://127.0.0.1:8443", str(ca), 10, 60)
    assert settings.policy.acknowledge


@pytest.mark.parametrize(("section", "said"), [
    ({}, "azure.subscriptions: give the managed subscription ids"),
    ({"subscriptions": "x"}, "azure.subscriptions: give the managed subscription ids"),
    ({"subscriptions": ["not-a-guid"]}, "azure.subscriptions[0]: 'not-a-guid' is not a subscription id"),
    ({"subscriptions": [SUB], "arm_endpoint": "http://management.azure.com"},
     "azure.arm_endpoint: 'http://management.azure.com' must be https:// (TLS is always verified)"),
    ({"subscriptions": [SUB], "arm_endpoint": "https://management.azure.com/x"},
     "azure.arm_endpoint: 'https://management.azure.com/x' must be https://host[:port] and nothing more"),
    ({"subscriptions": [SUB], "ca_file": "/nowhere/ca.pem"}, "azure.ca_file: /nowhere/ca.pem cannot be read"),
    ({"subscriptions": [SUB], "arg_interval": "1s"}, "azure.arg_interval: '1s' is out of range"),
    ({"subscriptions": [SUB], "acknowledge": "yes"}, "azure.acknowledge: must be true or false"),
    ({"subscriptions": [SUB], "credential": "connection-string"},
     "azure.credential: 'connection-string' must be managed-identity or default"),
    ({"subscriptions": [SUB], "feed": {"eventhub": "x"}},
     "azure.feed.fully_qualified_namespace: missing"),
    ({"subscriptions": [SUB], "feed": {"fully_qualified_namespace": "ns", "consumer_group": "bad group"}},
     "azure.feed.consumer_group: 'bad group' is not a consumer group name"),
    ({"subscriptions": [SUB], "feed": "azure-feed"}, "azure.feed: must be a table"),
    ({"subscriptions": [SUB], "interval": "5m"}, "azure.interval: unknown key"),
])
def test_each_bad_key_is_one_line_naming_it(section: dict, said: str):
    with pytest.raises(ConfigError) as caught:
        azure(section)
    assert str(caught.value).startswith(said)
    assert "\n" not in str(caught.value)


def test_a_ca_file_without_a_certificate_is_refused(tmp_path: Path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"^azure.ca_file: .* holds no PEM certificate$"):
        azure({"subscriptions": [SUB], "ca_file": str(ca)})
