"""The query subset the simulated Resource Graph answers: what it evaluates, and one clear line for
anything outside it."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.simulator import kql

ROWS = [
    {
        "id": "a",
        "type": "microsoft.maintenance/scheduledevents",
        "n": 10,
        "properties": {"EventStatus": "Scheduled"},
    },
    {
        "id": "b",
        "type": "Microsoft.Maintenance/scheduledEvents",
        "n": 9,
        "properties": {"EventStatus": "Completed"},
    },
    {"id": "c", "type": "microsoft.compute/virtualmachines", "n": 11, "properties": {"EventStatus": None}},
]


def ids(query: str) -> list[str]:
    return [r["id"] for r in kql.run(kql.parse(query), ROWS)]


def test_equality_is_case_sensitive_and_tilde_folds_case():
    assert ids("maintenanceresources | where type == 'microsoft.maintenance/scheduledevents'") == ["a"]
    assert ids("maintenanceresources | where type =~ 'microsoft.maintenance/scheduledevents'") == ["a", "b"]


def test_in_lists_and_and_combine_conditions():
    query = "resources | where properties.EventStatus in~ ('scheduled', 'completed') and n != 9"
    assert ids(query) == ["a"]


def test_or_joins_groups_of_conditions_and_and_binds_tighter():
    assert ids("resources | where n == 9 or n == 11") == ["b", "c"]
    assert ids("resources | where n == 9 or n == 11 and id == 'x'") == ["b"]
    assert ids("resources | where id == 'x' and n == 11 or id startswith 'a'") == ["a"]


def test_the_health_tables_are_in_the_subset():
    for table in ("healthresources", "alertsmanagementresources", "HealthResources"):
        assert kql.parse(f"{table} | where type =~ 'x'").table == table.lower()


def test_project_names_columns_and_order_sorts_numbers_as_numbers():
    rows = kql.run(
        kql.parse("resources | project id, s = tostring(properties.EventStatus), n | order by n desc"), ROWS
    )
    assert rows == [
        {"id": "c", "s": "", "n": 11},
        {"id": "a", "s": "Scheduled", "n": 10},
        {"id": "b", "s": "Completed", "n": 9},
    ]


def test_a_dotted_projection_is_named_with_underscores_and_limit_takes_the_first():
    assert kql.run(kql.parse("resources | project properties.EventStatus | limit 1"), ROWS) == [
        {"properties_EventStatus": "Scheduled"}
    ]


@pytest.mark.parametrize(
    "query, words",
    [
        ("", "empty"),
        ("securityresources", "table 'securityresources' is not simulated"),
        ("resources | summarize count()", "'summarize' is not in the simulator's subset"),
        ("resources | where n > 3", "cannot read the query"),
        ("resources | where id has 'a'", "operator 'has' is not in the simulator's subset"),
        ("resources | where id in 'a'", "in needs a parenthesised list"),
        ("resources | order name", "order needs by"),
    ],
)
def test_a_query_outside_the_subset_is_refused_naming_the_part(query, words):
    with pytest.raises(kql.KqlError, match=words):
        kql.parse(query)


@given(st.text(max_size=60))
def test_any_text_either_parses_or_is_refused_with_a_kql_error(text):
    with contextlib.suppress(kql.KqlError):
        kql.parse("resources | " + text)
