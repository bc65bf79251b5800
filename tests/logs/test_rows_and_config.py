"""The row each CloudEvent becomes, and the sink's configuration errors (one line, naming the key)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder import config
from se_forwarder.errors import ConfigError
from se_forwarder.sinks import default_name
from se_forwarder.sinks.logs_rows import COLUMNS, to_row
from tests.notify.events import agent_event, decision, heartbeat, vm
from tests.support.ingestion_endpoint import _fits

from .conftest import RULE_ID

TYPES = dict(COLUMNS)


def test_a_scheduled_event_fills_the_event_and_vm_columns() -> None:
    row = to_row(agent_event("scheduled", machine=vm("web-3", fd="1", ud="4", zone="2")))

    assert {k: row[k] for k in ("EventId", "EventType", "State", "EventStatus", "NotBefore", "EventSource",
                                "VmName", "Zone", "FaultDomain", "UpdateDomain", "Incarnation",
                                "TimeGenerated", "ResourceGroup", "Inferred")} == {
        "EventId": "6b0c1f52-aaaa-4bbb-8ccc-000000000001", "EventType": "Reboot", "State": "scheduled",
        "EventStatus": "Scheduled", "NotBefore": "2033-09-19T14:30:00Z", "EventSource": "Platform",
        "VmName": "web-3", "Zone": "2", "FaultDomain": 1, "UpdateDomain": 4, "Incarnation": 7,
        "TimeGenerated": "2033-09-19T14:15:00Z", "ResourceGroup": "rg", "Inferred": False,
    }
    assert row["Data"]["Description"] == "Host server is undergoing maintenance."
    assert row["Resources"] == ["web-3"]


def test_completed_and_canceled_carry_the_final_status_and_inference() -> None:
    row = to_row(agent_event("completed", Inferred=True, InferredFrom="approved"))
    assert (row["State"], row["EventStatus"], row["Inferred"]) == ("completed", "Completed", True)


def test_heartbeats_and_decisions_are_rows_too() -> None:
    beat = to_row(heartbeat())
    assert (beat["State"], beat["VmName"], beat["EventId"]) == ("heartbeat", "web-3", None)
    approve = to_row(decision("approve", VmName="web-3"))
    assert (approve["State"], approve["EventType"], approve["VmName"]) == \
        ("coordinator.approve", "Reboot", None)


def test_unknown_topology_is_null_not_a_guess() -> None:
    incomplete = {"name": "web-3", "vmId": "", "zone": "", "platformFaultDomain": "", "complete": False}
    row = to_row(agent_event("started", machine=incomplete))
    assert (row["Zone"], row["FaultDomain"], row["UpdateDomain"], row["VmId"]) == (None, None, None, None)


def test_every_row_has_exactly_the_stream_columns_with_their_types() -> None:
    row = to_row(agent_event("approved", ApprovedBy="cli"))
    assert list(row) == [name for name, _ in COLUMNS]
    assert all(value is None or _fits(value, TYPES[name]) for name, value in row.items())


@settings(max_examples=200, deadline=None)
@given(data=st.dictionaries(st.sampled_from(["Vm", "EventId", "NotBeforeUtc", "DurationInSeconds",
                                             "Resources", "AffectsThisVm", "Inferred", "Reason"]),
                            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
                            | st.dictionaries(st.sampled_from(["name", "platformFaultDomain", "zone"]),
                                              st.text(max_size=25) | st.integers()),
                            max_size=8))
def test_any_data_gives_a_row_of_the_declared_types(data) -> None:
    row = to_row({"type": "com.azure.scheduledevents.scheduled", "id": "x", "data": data})
    assert all(value is None or _fits(value, TYPES[name]) for name, value in row.items())


@pytest.mark.parametrize("event", [{}, {"type": "t"}, [], "x", {"id": "i", "type": 3}])
def test_something_that_is_not_a_cloudevent_is_refused(event) -> None:
    with pytest.raises(ValueError):
        to_row(event)


# -- configuration ---------------------------------------------------------------------------------

GOOD = f'endpoint = "https://se-dce-a1b2.westeurope-1.ingest.monitor.azure.com"\nrule_id = "{RULE_ID}"\n'


def load(tmp_path, extra: str):
    path = tmp_path / "config.toml"
    path.write_text(f'[[sinks]]\ntype = "logs-ingestion"\n{extra}')
    return config.load(path, env={})


def problem(tmp_path, extra: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, extra)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_minimal_config_loads_with_the_defaults(tmp_path) -> None:
    [sink] = load(tmp_path, GOOD).sinks
    assert sink.type == "logs-ingestion"
    assert sink.name == f"logs-ingestion:se-dce-a1b2.westeurope-1.ingest.monitor.azure.com/{RULE_ID}/" \
                        "Custom-SeForwarderEvents"
    assert sink.options["credential"] == "managed-identity"
    assert sink.options["batch_max_bytes"] == 1_000_000


@pytest.mark.parametrize(("extra", "said"), [
    (f'rule_id = "{RULE_ID}"\n', "sinks[0].endpoint: missing"),
    ('endpoint = "https://x.ingest.monitor.azure.com"\n', "sinks[0].rule_id: missing"),
    ('endpoint = "https://x.ingest.monitor.azure.com"\nrule_id = "/subscriptions/s/resourceGroups/rg/'
     'providers/Microsoft.Insights/dataCollectionRules/se"\n', "sinks[0].rule_id: '/subscriptions/"),
    (f'endpoint = "http://dce.example.com"\nrule_id = "{RULE_ID}"\n',
     "sinks[0].endpoint: plain http is allowed only to a loopback address"),
    (f'endpoint = "ftp://dce.example.com"\nrule_id = "{RULE_ID}"\n', "sinks[0].endpoint: 'ftp://dce.example.com'"),
    (GOOD + 'stream = "SeForwarderEvents"\n', "sinks[0].stream: 'SeForwarderEvents' is not a DCR stream"),
    (GOOD + 'credential = "connection-string"\n', "sinks[0].credential: 'connection-string' is not one of"),
    (GOOD + "batch_max_bytes = 2000000\n", "sinks[0].batch_max_bytes: 2000000 is out of range"),
    (GOOD + 'verify = false\n', "sinks[0].verify: unknown key"),
])
def test_each_bad_value_is_one_line_naming_the_key(tmp_path, extra, said) -> None:
    assert problem(tmp_path, extra).startswith(said)


def test_plain_http_to_loopback_is_allowed(tmp_path) -> None:
    [sink] = load(tmp_path, f'endpoint = "http://127.0.0.1:8080"\nrule_id = "{RULE_ID}"\n').sinks
    assert sink.options["endpoint"] == "http://127.0.0.1:8080"


def test_the_sink_name_is_derived_without_secrets() -> None:
    options = {"endpoint": "https://dce.example.com", "rule_id": RULE_ID, "stream": "Custom-X"}
    assert default_name("logs-ingestion", options) == f"logs-ingestion:dce.example.com/{RULE_ID}/Custom-X"
