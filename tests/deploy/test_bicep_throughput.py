"""The Azure feed has throughput of its own (issue 31): its hub is in an Event Hubs namespace of its
own, the agents' namespace auto-inflates, and throttling on either is alerted on."""

from __future__ import annotations

from .bicep_tree import expr, module_body


def test_the_azure_feed_hub_lives_in_a_namespace_of_its_own(bicep_docs: dict[str, dict]) -> None:
    hub = bicep_docs["hub.bicep"]["modules"]
    feed = module_body(hub["azureFeed"])["params"]
    assert expr(feed["namespaceName"]) == "feedNamespace.outputs.namespaceName"
    namespace = module_body(hub["feedNamespace"])["params"]
    assert expr(namespace["namespaceName"]) != expr(module_body(hub["eventHubs"])["params"]["namespaceName"])
    # Event Grid delivers from outside the networks: trusted services on the feed's namespace only
    rules = bicep_docs["modules/feed-namespace.bicep"]["resources"]["networkRules"]["config"]["properties"]
    assert rules["trustedServiceAccessEnabled"] is True
    agents = bicep_docs["modules/eventhubs.bicep"]["resources"]["networkRules"]["config"]["properties"]
    assert agents["trustedServiceAccessEnabled"] is False
    # each VM subscription's topic delivers to the feed's namespace (the agents' for an older hub)
    topic = module_body(bicep_docs["agents.bicep"]["modules"]["feedTopic"])["params"]
    assert "azureFeedNamespaceName" in expr(topic["namespaceName"])


def test_the_agents_namespace_auto_inflates(bicep_docs: dict[str, dict]) -> None:
    props = bicep_docs["modules/eventhubs.bicep"]["resources"]["namespace"]["config"]["properties"]
    assert props["isAutoInflateEnabled"] == "autoInflate"
    assert expr(props["maximumThroughputUnits"]) == "conditional(autoInflate, maximumThroughputUnits, 0)"
    hub = bicep_docs["hub.bicep"]["parameters"]
    assert hub["eventHubsAutoInflate"]["default"] is True
    assert hub["eventHubsMaximumThroughputUnits"]["default"] == 10


def test_throttled_requests_on_each_namespace_raise_an_azure_monitor_alert(
        bicep_docs: dict[str, dict]) -> None:
    alert = bicep_docs["modules/throttling-alert.bicep"]["resources"]["alert"]["config"]
    (criterion,) = alert["properties"]["criteria"]["allOf"]
    assert (criterion["metricNamespace"], criterion["metricName"], criterion["operator"],
            criterion["threshold"], criterion["timeAggregation"]) == (
        "Microsoft.EventHub/namespaces", "ThrottledRequests", "GreaterThan", 0, "Total")
    assert alert["properties"]["scopes"] == ["namespaceId"]
    for path in ("modules/eventhubs.bicep", "modules/feed-namespace.bicep"):
        module = module_body(bicep_docs[path]["modules"]["throttling"])
        assert expr(module["params"]["namespaceId"]) == "namespace.id", path
        assert expr(module["params"]["actionGroupIds"]) == "alertActionGroupIds", path
