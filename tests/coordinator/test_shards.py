"""Shards (``[shard]``): a coordinator that owns some subscriptions reads, counts and approves only
those. Its configuration, the cheap check at its edge, and the last line in its decisions."""

from __future__ import annotations

import queue
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.approvals import signing
from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator.azure import parts
from se_forwarder.fleet.coordinator.config import AzureSettings, from_dict
from se_forwarder.fleet.coordinator.config.limits import Limits
from se_forwarder.fleet.coordinator.config.trust import TrustSettings
from se_forwarder.fleet.coordinator.decide.arm_path import arm_target
from se_forwarder.fleet.coordinator.decide.control import ControlRefused, approve_now
from se_forwarder.fleet.coordinator.decide.scopes import index
from se_forwarder.fleet.coordinator.edge.shard import OTHER_SHARD, claimed_subscription, other_shard
from se_forwarder.fleet.coordinator.fold import FleetState, fold_catch_up, fold_event
from se_forwarder.fleet.coordinator.input.admission import BatchAdmission
from se_forwarder.fleet.coordinator.input.azure import AzureInput
from se_forwarder.fleet.coordinator.input.hub_reader import Batch, Position

from .azure import BASE_CONFIG as BASE
from .azure import catch_up, facts, feed, policy, vm_row
from .fleet import SUB, T0, AgentVm, Fleet, approvals, heartbeat, report
from .signed import SignedVm

OTHER = "99999999-8888-7777-6666-555555555555"
SHARD = {"name": "eu", "subscriptions": [SUB]}


def sharded(**more):
    return from_dict({**BASE, "shard": SHARD, **more}, environ={})


# -- configuration ---------------------------------------------------------------------------------

def test_a_shard_carries_its_name_in_its_source_lease_snapshot_and_consumer_group():
    settings = sharded(coordinator={"name": "prod"})
    assert settings.unit == "prod/eu"
    assert settings.source == "urn:se-forwarder:coordinator:prod/eu"
    assert settings.eventhub.consumer_group == "coordinator-eu"
    assert settings.policy.subscriptions == {SUB}
    assert settings.trust.subscriptions == (SUB,)  # registrations only from its own subscriptions


def test_without_a_shard_nothing_changes():
    settings = from_dict({**BASE, "coordinator": {"name": "prod"}}, environ={})
    assert (settings.unit, settings.shard, settings.policy.subscriptions) == ("prod", None, frozenset())
    assert settings.eventhub.consumer_group == "coordinator"


def test_a_consumer_group_given_is_kept_and_azure_defaults_to_the_shards_subscriptions():
    hub = {**BASE["eventhub"], "consumer_group": "mine"}
    feed_hub = {"fully_qualified_namespace": "ns.servicebus.windows.net"}
    settings = sharded(eventhub=hub, azure={"feed": feed_hub})
    assert settings.eventhub.consumer_group == "mine"
    assert settings.azure is not None and settings.azure.subscriptions == (SUB,)
    assert settings.azure.shard == {SUB}
    assert settings.azure.feed is not None and settings.azure.feed.consumer_group == "coordinator-eu"


@pytest.mark.parametrize(("shard", "more", "said"), [
    ({"subscriptions": [SUB]}, {}, "shard.name: missing"),
    ({"name": "eu", "subscriptions": []}, {}, "shard.subscriptions: give the subscription ids"),
    ({"name": "eu"}, {}, "shard.subscriptions: give the subscription ids"),
    ({"name": "eu", "subscriptions": [SUB, SUB.upper()]}, {}, f"subscriptions[1]: {SUB} is listed twice"),
    ({"name": "eu", "subscriptions": ["prod"]}, {}, "subscriptions[0]: 'prod' is not a subscription id"),
    ({"name": "e/u", "subscriptions": [SUB]}, {}, "shard.name: 'e/u' must be"),
    ({"name": "e" * 39, "subscriptions": [SUB]}, {}, "must be 1-38 letters"),  # coordinator-<name>: 50
    ({**SHARD, "owner": "me"}, {}, "shard.owner: unknown key"),
    ({**SHARD, "peers": {"us": "ftp://x"}}, {}, "shard.peers.us: 'ftp://x' is not a base URL"),
    ({**SHARD, "peers": {"eu": "http://10.0.0.5:8470"}}, {}, "shard.peers.eu: is this shard's own name"),
    (SHARD, {"azure": {"subscriptions": [OTHER]}}, f"azure.subscriptions: {OTHER} is not one of [shard]"),
    (SHARD, {"trust": {"subscriptions": [OTHER]}}, f"trust.subscriptions: {OTHER} is not one of [shard]"),
])
def test_a_bad_shard_is_one_line_naming_the_key(shard, more, said):
    with pytest.raises(ConfigError) as caught:
        from_dict({**BASE, "shard": shard, **more}, environ={})
    assert said in str(caught.value) and "\n" not in str(caught.value)


# -- the edge: another shard's events dropped on their claim ---------------------------------------

EU = AgentVm("web-eu")
US = AgentVm("web-us", sub=OTHER)


def test_a_report_or_registration_of_another_subscription_is_another_shards():
    assert other_shard(heartbeat(US, T0), {SUB}) == OTHER
    registration = {"type": "com.azure.scheduledevents.identity", "data": {"Vm": US.data(), "PublicKey": "x"}}
    assert other_shard(registration, {SUB}) == OTHER
    assert other_shard(heartbeat(EU, T0), {SUB}) is None
    assert other_shard(heartbeat(US, T0), frozenset()) is None  # no [shard]: every one is this one's


def test_an_event_that_claims_no_subscription_goes_on_to_the_checks_that_verify():
    assert other_shard(heartbeat(AgentVm("booting", complete=False), T0), {SUB}) is None
    decision = {"type": "com.azure.scheduledevents.coordinator.approve", "source": "urn:x",
                "data": {"Vm": US.data()}}
    assert claimed_subscription(decision) is None


def test_an_azure_feed_event_claims_its_source_subscription():
    assert other_shard(feed("E1", "Scheduled", [US], T0, not_before=T0 + 900), {SUB}) == OTHER
    assert other_shard(feed("E1", "Scheduled", [EU], T0, not_before=T0 + 900), {SUB}) is None


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=40),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                max_size=4), max_leaves=20))
def test_the_check_never_raises_whatever_the_event_holds(value):
    event = value if isinstance(value, dict) else {"data": value}
    claimed = other_shard(event, {SUB})
    assert claimed is None or (isinstance(claimed, str) and claimed != SUB)


def batch(*events):
    return Batch("0", [(e, Position(i, str(i), T0)) for i, e in enumerate(events)], time.monotonic())


def test_another_shards_report_is_dropped_before_any_signature_is_checked():
    admission = BatchAdmission("urn:se-forwarder:coordinator:prod/eu", lambda: signing.VerifyKeys(()),
                               TrustSettings(), Limits(),
                               owned=frozenset({SUB}))
    forged = {**heartbeat(US, T0), "keyid": "0" * 16, "signature": "AAAA"}  # would not verify
    state = FleetState()
    admission.fold(state, batch(forged, heartbeat(US, T0 + 1)))
    counts = admission.counts(state)
    assert counts.refused[OTHER_SHARD] == 2
    assert counts.refused["bad-signature"] == counts.refused["unregistered"] == 0  # never reached the gate
    assert counts.waiting == 0  # nor held for a registration that this shard would never see
    assert not state.vms
    admission.fold(state, batch(heartbeat(EU, T0)))  # its own: on to the trust check
    assert admission.counts(state).refused["unsigned"] == 1


def test_another_shards_reports_and_registrations_never_reach_the_verifiers_workers():
    """Marked as they are handed on, before the stage: no signature check, no registration quota."""
    out: queue.Queue[Batch] = queue.Queue()
    admission = BatchAdmission("urn:se-forwarder:coordinator:prod/eu", lambda: signing.VerifyKeys(()),
                               TrustSettings(verify_workers=1), Limits(), deliver=out.put,
                               owned=frozenset({SUB}))
    try:
        them, us = SignedVm(US), SignedVm(EU)
        admission.put(batch(them.identity(), them.sign(heartbeat(US, T0)), us.identity(),
                            us.sign(heartbeat(EU, T0 + 1))))
        got = out.get(timeout=120)
        verifier = admission.verifier
        assert verifier is not None and (verifier.registrations, verifier.reports) == (1, 1)  # its own only
        state = FleetState()
        admission.fold(state, got)
        counts = admission.counts(state)
        assert counts.refused[OTHER_SHARD] == 2
        assert US.vm_id not in state.vms and US.vm_id not in state.identities
    finally:
        admission.close()


def test_another_shards_feed_events_are_skipped_not_refused():
    settings = AzureSettings((SUB,), shard=frozenset({SUB}))
    reach = parts(*AzureInput.parts(settings))
    azure = AzureInput(settings, reach, lambda _: None)
    state = FleetState()
    feed_batch = Batch("feed:azure-feed/0", [(feed("E1", "Scheduled", [US], T0, not_before=T0 + 900),
                                              Position(0, "0"))], time.monotonic())
    azure.fold_feed(state, feed_batch)
    assert azure.counts == {"feed-other-shard": 1}
    assert not state.events
    assert azure.feed_watch is None or azure.feed_watch.reachable


# -- decide: approvals only ever for owned VMs -----------------------------------------------------

def shard_fleet(*vms: AgentVm) -> Fleet:
    fleet = Fleet(policy(subscriptions=frozenset({SUB}), acknowledge=False))
    fleet.beat(*vms, t=T0)
    return fleet


def test_an_event_of_another_shards_vm_that_slipped_into_the_fold_is_never_approved():
    fleet = shard_fleet(EU, US)
    fleet.announce("E-US", [US], t=T0)
    fleet.announce("E-EU", [EU], t=T0)
    result = fleet.decide(T0 + 1)
    assert approvals(result) == ["E-EU"]
    assert fleet.verdict(result, "E-US").code == OTHER_SHARD
    with pytest.raises(ControlRefused) as refused:
        approve_now(fleet.state, fleet.policy, T0 + 2, "E-US", "ops", "now", ["all"])
    assert refused.value.code == OTHER_SHARD


def test_a_vm_whose_subscription_nobody_knows_is_not_owned():
    booting = AgentVm("booting", complete=False)
    fleet = shard_fleet(booting)
    fleet.fold(report("scheduled", booting, "E1", T0, not_before=T0 + 900))
    result = fleet.decide(T0 + 1)
    assert approvals(result) == [] and fleet.verdict(result, "E1").code == OTHER_SHARD


def test_acknowledge_is_never_called_for_another_subscriptions_event():
    agentless = AgentVm("db-1")
    for owned, expected in ((frozenset({SUB}), "db-1"), (frozenset({OTHER}), None)):
        fleet = Fleet(policy(subscriptions=owned))
        fold_catch_up(fleet.state, catch_up(T0, [vm_row(agentless)]))
        fold_event(fleet.state, facts(feed("E9", "Scheduled", [agentless], T0, not_before=T0 + 900)))
        idx = index(fleet.state, fleet.policy)
        record = fleet.state.events["e9"]
        target = arm_target(fleet.state, fleet.policy, idx, record, (agentless.key,))
        assert (target.name if target else None) == expected
