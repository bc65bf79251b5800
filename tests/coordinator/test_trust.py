"""trust.py, the coordinator's edge: which CloudEvents from the hub may change the fold.

One test per row of its reason table, then property tests that throw forged and mutated decisions
at it: a signed decision with any single change never verifies.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator import approve_now, hold, pause
from se_forwarder.fleet.coordinator.decide import acknowledged, sent, signed, to_dict
from se_forwarder.fleet.coordinator.edge import attestation, trust
from se_forwarder.fleet.coordinator.fold import DecisionRecord
from se_forwarder.fleet.coordinator.fold import identities as registrations

from .fleet import SET, SOURCE, T0, avset, heartbeat, report

KEY = signing.generate_private_key()  # this coordinator's
STANDBY = signing.generate_private_key()  # [trust] coordinator_keys: a standby's, or the previous one
ATTACKER = signing.generate_private_key()  # a key someone made for themselves
TRUSTED = signing.VerifyKeys([KEY.public_key(), STANDBY.public_key()])


def decisions() -> list[Any]:
    """One decision of each shape the coordinator publishes (and a ``sent`` and an ``acknowledge``
    record)."""
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET, not_before=T0 + 600)
    fleet.announce("E2", [SET[2], SET[3]], SET, not_before=T0 + 700)
    made = list(fleet.decide(T0 + 1, apply=False).decisions)  # approve, breach, defer
    made.append(pause(fleet.state, fleet.policy, T0, "fleet", "person:ops", "incident"))
    made.append(hold(fleet.state, fleet.policy, T0, "E9", "person:ops", "database primary"))
    made.append(approve_now(fleet.state, fleet.policy, T0, "E1", "person:ops", "asked", ["all"]))
    approval = next(d for d in made if d.kind == "approve")
    record = DecisionRecord(approval.id, approval.kind, approval.time, approval.data())
    made.append(sent(record, "q", T0 + 2))
    made.append(acknowledged(record, "forbidden", "ARM answered 403", T0 + 3))
    return made


DECISIONS = decisions()


def check(event: dict[str, Any]) -> trust.Verdict:
    return trust.check(event, source=SOURCE, keys=TRUSTED)


def test_the_table_names_every_reason_code():
    doc = trust.__doc__ or ""
    for code in trust.REASON_CODES:
        suffix = code.removeprefix("identity-")
        if suffix in attestation.REASONS and code != "identity-malformed":
            assert f"``{suffix}``" in doc and "``identity-<reason>``" in doc, code
        elif suffix in registrations.REFUSALS:
            assert f"``identity-{suffix}``" in doc and f"``{suffix}``" in (registrations.__doc__ or ""), code
        else:
            assert f"``{code}``" in doc, code


def test_a_type_the_fold_does_not_read_passes_as_sent():
    event = {**report("scheduled", SET[0], "E1", T0), "type": "com.example.other"}
    assert check(event) == trust.PASS


def test_an_agent_report_is_no_decision_and_is_judged_as_a_report():
    for event in (report("scheduled", SET[0], "E1", T0), heartbeat(SET[0], T0)):
        assert check(event).code == "unsigned"


@pytest.mark.parametrize("decision", DECISIONS, ids=lambda d: d.kind)
def test_a_decision_signed_with_this_coordinators_key_is_trusted(decision):
    verdict = check(signed(decision, SOURCE, KEY))
    assert verdict.trusted and verdict.keyid == signing.keyid(KEY)


def test_a_decision_signed_with_a_configured_coordinator_key_is_trusted():
    verdict = check(signed(DECISIONS[0], SOURCE, STANDBY))
    assert verdict.trusted and verdict.keyid == signing.keyid(STANDBY)


def test_a_decision_with_the_right_source_and_no_signature_is_forged():
    verdict = check(to_dict(DECISIONS[0], SOURCE))
    assert (verdict.trusted, verdict.code) == (False, "forged")
    assert "no signature" in verdict.detail


def test_a_decision_signed_with_a_key_nobody_configured_is_forged():
    verdict = check(signed(DECISIONS[0], SOURCE, ATTACKER))
    assert (verdict.trusted, verdict.code) == (False, "forged")
    assert f"keyid {signing.keyid(ATTACKER)} is not a configured verify key" in verdict.detail


def test_a_decision_whose_signature_was_copied_from_another_is_forged():
    genuine = signed(DECISIONS[0], SOURCE, KEY)
    other = signed(DECISIONS[1], SOURCE, KEY)
    verdict = check({**other, "signature": genuine["signature"]})
    assert (verdict.code, verdict.detail) == (
        "forged", f"the decision does not verify (signature does not verify with key {signing.keyid(KEY)})")


def test_a_decision_whose_source_is_no_coordinators_is_forged_even_when_signed():
    event = signed(DECISIONS[0], SET[0].source, KEY)
    assert (check(event).trusted, check(event).code) == (False, "forged")


@pytest.mark.parametrize("key", [None, KEY, ATTACKER], ids=["unsigned", "our key", "another key"])
def test_another_coordinators_decision_is_foreign_whatever_it_carries(key):
    other = "urn:se-forwarder:coordinator:shadow"
    event = to_dict(DECISIONS[0], other) if key is None else signed(DECISIONS[0], other, key)
    verdict = check(event)
    assert (verdict.trusted, verdict.code) == (False, "foreign")


def test_a_snapshot_is_taken_only_when_a_trusted_key_signed_it():
    document = {"format": 1, "hub": "ns/hub/cg", "state": {"vms": [], "decisions": []}}
    assert trust.snapshot(signing.sign(document, KEY), TRUSTED).trusted
    assert trust.snapshot(document, TRUSTED).code == "forged"
    assert trust.snapshot(signing.sign(document, ATTACKER), TRUSTED).code == "forged"
    changed = signing.sign(document, KEY)
    changed["state"]["vms"].append({"key": "x"})
    assert trust.snapshot(changed, TRUSTED).code == "forged"


# -- properties ----------------------------------------------------------------------------------


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every member and item of a JSON value, at every depth."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((*prefix, key))
            out += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.append((*prefix, i))
            out += paths(item, (*prefix, i))
    return out


def at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a signed decision, the same with one change: a member or item changed, added or removed)."""
    original = signed(draw(st.sampled_from(DECISIONS)), SOURCE, KEY)
    event = copy.deepcopy(original)
    path = draw(st.sampled_from([p for p in paths(event) if p != ("signature",)]))
    parent, last = at(event, path[:-1]), path[-1]
    how = draw(st.sampled_from(["change", "add", "remove"]))
    if how == "change":
        parent[last] = draw(json_values)
    elif how == "remove":
        del parent[last]
    elif isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in parent))] = draw(json_values)
    else:
        parent.insert(draw(st.integers(0, len(parent))), draw(json_values))
    return original, event


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_a_signed_decision_with_any_single_change_never_verifies(pair):
    original, event = pair
    assume(json.dumps(event, sort_keys=True) != json.dumps(original, sort_keys=True))
    assert not signing.verify(event, TRUSTED)
    verdict = check(event)
    if isinstance(event.get("type"), str) and event["type"].startswith(trust.DECISION_PREFIX):
        assert not verdict.trusted and verdict.code in trust.REASON_CODES
    else:  # no longer a decision at all: judged as whatever it now is, and verified by no trusted key
        assert verdict.keyid is None and (verdict is trust.PASS or not verdict.trusted)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(DECISIONS), st.data())
def test_a_signed_decision_with_any_byte_of_its_signature_changed_never_verifies(decision, data):
    event = signed(decision, SOURCE, KEY)
    raw = bytearray(base64.b64decode(event["signature"]))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    event["signature"] = base64.b64encode(bytes(raw)).decode()
    verdict = check(event)
    assert (verdict.trusted, verdict.code) == (False, "forged")


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["type", "source", "id", "keyid", "signature", "data", "time"]),
                       json_values, max_size=7), st.booleans())
def test_any_input_gets_a_verdict_and_no_decision_without_a_valid_signature_is_trusted(event, typed):
    if typed:
        event = {**event, "type": "com.azure.scheduledevents.coordinator.approve", "source": SOURCE}
    verdict = check(event)
    if isinstance(event.get("type"), str) and event["type"].startswith(trust.DECISION_PREFIX):
        assert not verdict.trusted and verdict.code in trust.REASON_CODES
    else:
        assert verdict is trust.PASS or not verdict.trusted


def test_azures_own_event_types_on_the_agents_hub_are_refused_whatever_their_form():
    for kind in ("Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted",
                 "microsoft.resourcenotifications.HealthResources.AvailabilityStatusChanged",
                 "microsoft.maintenance/scheduledevents/write"):
        verdict = check({"specversion": "1.0", "type": kind, "id": "x", "source": "/subscriptions/s"})
        assert (verdict.trusted, verdict.code) == (False, "azure")
