"""The fleet page's document at fleet scale (view/page.py, view/groups.py): groups summarised above
a size, a group's VMs and a name search read later from the context a document was made from.

The fleet is tests/fleet_page/local.py's: real agent CloudEvents folded by the pure core.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from se_forwarder.fleet.coordinator import evaluate, to_dict
from se_forwarder.fleet.coordinator.fold import claimed as fold_event
from se_forwarder.fleet.coordinator.view import groups, page_view
from se_forwarder.fleet.coordinator.view import page as page_module
from se_forwarder.fleet.coordinator.view.page import group_view, page_document, search_view
from tests.fleet_page.local import POLICY, SOURCE, fleet_state, report, rollout_state

NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def fleet() -> Any:
    """600 VMs (52 groups), 20 Reboots of one VM each (approved), and one Reboot of every VM of
    ``web30`` (pending: ten at once would breach its budget of one)."""
    state, members = fleet_state(600, 20, NOW)
    web30 = next(m for m in members if m[0]["tags"]["group"] == "web30")
    event_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "whole-group")).upper()
    for v in web30:
        fold_event(state, report("scheduled", v, event_id, [m["name"] for m in web30], NOW - 1, NOW + 3600))
    for decision in evaluate(state, POLICY, NOW).decisions:  # as the service folds what it publishes
        fold_event(state, to_dict(decision, SOURCE))
    return state, members


def summarised(state: Any, now: float = NOW) -> tuple[dict[str, Any], Any]:
    return page_document(state, POLICY, now, inline=0)


def resolved(rows: list[list[Any]], events: list[dict[str, Any]]) -> list[list[Any]]:
    """Rows with their event index replaced by the event (indices differ between documents)."""
    return [[*v[:6], events[v[6]] if v[6] >= 0 else None, *v[7:]] for v in rows]


def test_a_fleet_up_to_the_inline_size_travels_whole(fleet) -> None:
    state, _ = fleet
    doc = page_view(state, POLICY, NOW, inline=600)
    assert doc["summarised"] is False
    assert sum(len(g["vms"]) for g in doc["groups"]) == 600


def test_a_summarised_group_counts_its_vms_by_state_as_view_groups_gives_them(fleet) -> None:
    state, _ = fleet
    doc, _ = summarised(state)
    assert doc["summarised"] is True
    expected = {g["group"]: (g["size"], g["unavailable"], Counter(v["state"] for v in g["vms"]))
                for g in groups(state, POLICY, NOW)}
    got = {g["group"]: (g["size"], g.get("unavailable", 0), Counter(g["counts"])) for g in doc["groups"]}
    assert got == expected
    assert {s for _, _, counts in got.values() for s in counts} >= {"ok", "pending", "approved"}


def test_a_summarised_group_lists_only_its_vms_that_are_not_ok_at_most_listed_per_group(
        fleet, monkeypatch) -> None:
    state, _ = fleet
    monkeypatch.setattr(page_module, "LISTED_PER_GROUP", 3)
    doc, _ = summarised(state)
    web30 = next(g for g in doc["groups"] if g["group"] == "tag/web30")
    assert web30["notable"] == 10 and len(web30["vms"]) == 3  # its ten VMs pending, three listed
    assert {v[4] for g in doc["groups"] for v in g.get("vms", [])} <= {"pending", "approved"}
    quiet = [g for g in doc["groups"] if set(g["counts"]) == {"ok"}]
    assert quiet and all("vms" not in g and "notable" not in g for g in quiet)  # left out at []/0


def test_all_summarised_groups_together_list_at_most_listed_in_all(fleet, monkeypatch) -> None:
    state, _ = fleet
    monkeypatch.setattr(page_module, "LISTED_IN_ALL", 5)
    doc, _ = summarised(state)
    assert sum(len(g.get("vms", [])) for g in doc["groups"]) == 5
    assert sum(g.get("notable", 0) for g in doc["groups"]) == 20 + 10  # counted all the same


def test_a_group_read_from_the_context_has_the_rows_the_whole_document_has(fleet) -> None:
    state, _ = fleet
    whole = page_view(state, POLICY, NOW)
    _, context = summarised(state)
    for name in ("tag/web30", "tag/web3", "tag/ss0"):
        expected = next(g for g in whole["groups"] if g["group"] == name)
        got = group_view(context, name)
        assert got is not None and got["size"] == expected["size"]
        assert resolved(got["vms"], got["events"]) == resolved(expected["vms"], whole["events"])


def test_a_group_is_read_a_page_at_a_time_and_an_unknown_one_is_none(fleet) -> None:
    state, _ = fleet
    _, context = summarised(state)
    everything = group_view(context, "tag/ss0")
    assert everything is not None and everything["size"] == len(everything["vms"]) == 50
    page = group_view(context, "tag/ss0", offset=20, limit=10)
    assert page is not None and page["offset"] == 20
    assert [v[0] for v in page["vms"]] == [v[0] for v in everything["vms"][20:30]]
    assert group_view(context, "tag/no-such-group") is None


def test_a_search_names_at_most_its_limit_and_counts_every_match_whatever_the_case(fleet) -> None:
    state, members = fleet
    _, context = summarised(state)
    wanted = members[-1][7]["name"]
    one = search_view(context, wanted.upper())
    assert one["count"] == 1 and [[v[0] for v in g["vms"]] for g in one["groups"]] == [[wanted]]
    many = search_view(context, "web", limit=7)
    assert many["count"] == sum("web" in v["name"] for m in members for v in m) > 7
    assert sum(len(g["vms"]) for g in many["groups"]) == 7


def test_a_summarised_group_s_timeline_counts_the_spans_the_whole_one_draws() -> None:
    now = NOW
    state, _ = rollout_state(now, ("web0", "ss0"))
    whole = page_view(state, POLICY, now)
    doc, context = summarised(state, now)
    for g in whole["groups"]:
        s = next(x for x in doc["groups"] if x["group"] == g["group"])
        started = sum(whole["timeline"]["kinds"][span[1]] == "started" for span in g["spans"])
        ends = [span[3] for span in g["spans"]]
        assert (s.get("spanCount", 0), s.get("started", 0), s.get("down", []), s.get("peak", 0)) == \
            (len(g["spans"]), started, g["down"], g["peak"])
        if ends:
            assert s.get("spanEnd") == (None if None in ends else max(ends))
        fetched = group_view(context, g["group"])
        assert fetched is not None and len(fetched["spans"]) == len(g["spans"])
    assert any(g["spans"] for g in whole["groups"])
