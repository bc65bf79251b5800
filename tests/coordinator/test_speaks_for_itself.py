"""A VM speaks only for itself: what a verified VM's reports can and cannot do to its peers in the
fold (fold_reports.py) and in the count of who is unavailable (availability.py). The attacker Y is
web-5: a member of the availability set, with its own key, reporting as itself about its peers'
events. Then what an unverified report may do with ``require_signed_reports = false``."""

from __future__ import annotations

from se_forwarder.fleet.coordinator import Budget, Policy, prune, status
from se_forwarder.fleet.coordinator.decide import index, resolve, unavailable
from se_forwarder.fleet.coordinator.fold import Sender
from se_forwarder.fleet.coordinator.fold import claimed as fold_event

from .fleet import SET, T0, AgentVm, Fleet, approved, avset, heartbeat, kinds, rejected, report

Y = SET[5]
VICTIM = SET[1]


def down(fleet: Fleet, now: float) -> dict[str, str]:
    return unavailable(fleet.state, fleet.policy, index(fleet.state, fleet.policy), now)


def started_for(fleet: Fleet, event_id: str, vms: list[AgentVm], t: float) -> None:
    fleet.announce(event_id, vms, SET, t=t - 60, not_before=t + 600)
    fleet.transition("started", event_id, vms, t=t)


def test_a_peers_completed_report_leaves_a_started_vm_unavailable():
    fleet = avset()
    started_for(fleet, "E1", [VICTIM], T0 + 10)
    fleet.fold(report("completed", Y, "E1", T0 + 20, resources=[VICTIM.name]))
    fleet.beat(*SET, t=T0 + 30)
    assert down(fleet, T0 + 30)[VICTIM.key] == "started"
    assert "e1" in fleet.state.open_events


def test_an_event_one_of_its_vms_never_reported_over_is_not_pruned_until_forgotten():
    fleet = avset()
    started_for(fleet, "E1", [VICTIM], T0 + 10)
    fleet.fold(report("completed", Y, "E1", T0 - 2 * 86400, resources=[VICTIM.name]))  # dated two days ago
    prune(fleet.state, fleet.policy, T0 + 3600)
    assert "e1" in fleet.state.events
    fleet.fold(report("completed", VICTIM, "E1", T0 + 60, resources=[VICTIM.name]))
    assert "e1" not in fleet.state.open_events
    prune(fleet.state, fleet.policy, T0 + 60 + 86400 + 1)
    assert "e1" in fleet.state.gone


def test_a_vm_that_missed_the_end_of_an_event_is_done_once_its_heartbeats_stop_listing_it():
    policy = Policy(heartbeat_timeout=180, min_healthy=300)
    fleet = avset(policy)
    started_for(fleet, "E1", [VICTIM, SET[2]], T0 + 10)
    fleet.fold(report("completed", SET[2], "E1", T0 + 100, resources=[VICTIM.name, SET[2].name]))
    fleet.beat(*SET, t=T0 + 200)  # lists nothing, but within heartbeat_timeout of the last report
    assert down(fleet, T0 + 200)[VICTIM.key] == "started"
    fleet.beat(*SET, t=T0 + 300)
    assert down(fleet, T0 + 300)[VICTIM.key] == "completed"  # min_healthy from last report + timeout
    fleet.beat(*SET, t=T0 + 600)
    assert VICTIM.key not in down(fleet, T0 + 600)


def test_peers_that_see_an_event_started_on_imds_are_not_counted_down_by_it():
    """In an availability set every VM's IMDS lists its peers' events too, so every agent reports
    a peer's event Started: that is its word about the event, not about itself."""
    fleet = avset()
    fleet.announce("E1", [VICTIM], SET, t=T0, not_before=T0 + 600)
    for vm in SET:
        fleet.fold(report("started", vm, "E1", T0 + 10, resources=[VICTIM.name]))
    fleet.beat(*SET, t=T0 + 20)
    assert down(fleet, T0 + 20) == {VICTIM.key: "started"}


def test_a_vm_that_reports_started_an_event_naming_no_known_vm_is_counted_down():
    fleet = avset()
    fleet.fold(report("started", SET[2], "E1", T0 + 10, resources=["web-99"]))
    fleet.beat(*SET, t=T0 + 20)
    assert down(fleet, T0 + 20) == {SET[2].key: "started"}


def test_a_heartbeat_that_still_lists_the_event_keeps_its_vm_unavailable():
    fleet = avset(Policy(heartbeat_timeout=180))
    started_for(fleet, "E1", [VICTIM], T0 + 10)
    fleet.fold(heartbeat(VICTIM, T0 + 400, (("E1", "Started", "Reboot"),)))
    assert down(fleet, T0 + 400)[VICTIM.key] == "started"


def test_resources_are_the_union_of_the_reports_and_never_shrink():
    fleet = avset()
    fleet.announce("E1", [VICTIM, SET[2]], [VICTIM, SET[2]], t=T0)
    fleet.fold(report("scheduled", Y, "E1", T0 + 500, resources=[SET[2].name]))
    record = fleet.state.events["e1"]
    assert record.resources == (VICTIM.name, SET[2].name)
    assert resolve(fleet.state, index(fleet.state, fleet.policy), record).vms == (VICTIM.key, SET[2].key)


def test_an_echo_from_a_vm_not_in_resources_counts_nothing():
    fleet = avset()
    fleet.announce("E1", [VICTIM], SET, t=T0, not_before=T0 + 900)
    fleet.fold(approved(Y, "E1", T0 + 1, resources=[VICTIM.name]))
    assert VICTIM.key not in down(fleet, T0 + 2)
    assert kinds(fleet.decide(T0 + 2)) == [("approve", "E1", "fits")]


def test_an_echo_from_a_vm_in_resources_counts():
    fleet = avset()
    fleet.announce("E1", [VICTIM], SET, t=T0, not_before=T0 + 900)
    fleet.fold(approved(VICTIM, "E1", T0 + 1))
    assert down(fleet, T0 + 2)[VICTIM.key] == "approved" and kinds(fleet.decide(T0 + 2)) == []


def test_a_rejection_counts_only_from_the_vm_the_approval_was_sent_to():
    fleet = avset(Policy(echo_timeout=120))
    fleet.announce("E1", [VICTIM, SET[2]], SET, t=T0, not_before=T0 + 900)
    fleet.policy = Policy(echo_timeout=120, budgets=(Budget("group", count=2),))
    (made,) = fleet.decide(T0 + 1).decisions
    fleet.fold(rejected(Y, "E1", T0 + 2, made.id, "expired"))
    assert kinds(fleet.decide(T0 + 3)) == []  # not resent before echo_timeout
    target = next(vm for vm in SET if vm.name == made.target.name)
    fleet.fold(rejected(target, "E1", T0 + 4, made.id, "expired"))
    assert [d.code for d in fleet.decide(T0 + 5).decisions] == ["retry-rejected"]


def test_a_report_dated_far_ahead_is_taken_at_the_hubs_time_plus_the_skew():
    fleet = avset(Policy(heartbeat_timeout=180))
    fold_event(fleet.state, heartbeat(Y, T0 + 86400 * 365 * 70), received=T0, skew=60)
    assert fleet.state.vms[Y.key].last_heartbeat == T0 + 60
    assert Y.key in down(fleet, T0 + 60 + 181)  # not watched for ever
    moved = AgentVm(Y.name, fd="2")
    fold_event(fleet.state, heartbeat(moved, T0 + 120), received=T0 + 120)
    assert fleet.state.vms[Y.key].fault_domain == "2"  # a later report wins over the 2099 one


def test_two_vms_that_claim_one_name_are_both_unavailable_and_shown():
    fleet = avset()
    impostor = AgentVm(VICTIM.name, rg="rg-web", fd="1", sub="99999999-2222-3333-4444-555555555555")
    fleet.beat(impostor, t=T0)
    fleet.announce("E9", [VICTIM], [VICTIM, impostor], t=T0)  # the impostor joins the set
    now = T0 + 1
    assert down(fleet, now)[VICTIM.key] == down(fleet, now)[impostor.key] == "name-conflict"
    (shown,) = status(fleet.state, fleet.policy, now)["nameConflicts"]
    assert shown["name"] == VICTIM.name and len(shown["vms"]) == 2


def test_a_vm_that_only_saw_a_terminate_scheduled_is_not_retired_by_its_peers_completion():
    scale_set = [AgentVm(f"ss_{i}", scale_set="front") for i in range(3)]
    fleet = Fleet()
    fleet.beat(*scale_set, t=T0)
    fleet.announce("T1", [scale_set[0]], scale_set, t=T0, event_type="Terminate")
    fleet.fold(report("completed", scale_set[1], "T1", T0 + 120, event_type="Terminate", resources=["ss_0"]))
    assert scale_set[0].key in index(fleet.state, fleet.policy).members


def test_an_event_reported_under_two_types_is_managed_only_when_both_are():
    fleet = avset()
    fleet.announce("E1", [VICTIM], [VICTIM], t=T0, event_type="Freeze", not_before=T0 + 900)
    fleet.fold(report("scheduled", Y, "E1", T0 + 5, event_type="Reboot", resources=[VICTIM.name],
                      not_before=T0 + 900))
    verdict = fleet.verdict(fleet.decide(T0 + 6), "E1")
    assert verdict.code == "unmanaged" and "Freeze and Reboot" in verdict.reason


# -- unverified reports (require_signed_reports = false) -------------------------------------------

UNVERIFIED = Sender(None, verified=False)


def unverified(fleet: Fleet, *events: dict) -> None:
    for event in events:
        fold_event(fleet.state, event, fleet.stats, sender=UNVERIFIED)


def test_an_unverified_started_counts_the_events_vms_down():
    fleet = avset()
    fleet.announce("E1", [VICTIM], SET, t=T0, not_before=T0 + 900)
    unverified(fleet, report("started", Y, "E1", T0 + 1, resources=[VICTIM.name]))
    assert down(fleet, T0 + 2)[VICTIM.key] == "started"
    assert fleet.state.events["e1"].reports.get(Y.key) == 1  # its own status did not change


def test_an_unverified_heartbeat_listing_an_event_started_counts_it_down_but_never_watches():
    fleet = avset(Policy(heartbeat_timeout=180))
    fleet.announce("E1", [VICTIM], SET, t=T0, not_before=T0 + 900)
    newcomer = AgentVm("web-9")
    unverified(fleet, heartbeat(newcomer, T0 + 1, (("E1", "Started", "Reboot"),)))
    assert down(fleet, T0 + 2)[VICTIM.key] == "started"
    assert fleet.state.vms[newcomer.key].last_heartbeat is None
    assert down(fleet, T0 + 2)[newcomer.key] == "not-watched"


def test_unverified_completed_echo_prepared_and_scheduled_count_nothing():
    fleet = avset()
    fleet.announce("E1", [VICTIM], SET, t=T0, not_before=T0 + 900)
    fleet.transition("started", "E1", [VICTIM], t=T0 + 10)
    unverified(fleet, report("completed", VICTIM, "E1", T0 + 20), approved(VICTIM, "E2", T0 + 20),
               report("prepared", VICTIM, "E1", T0 + 20), report("scheduled", VICTIM, "E3", T0 + 20))
    record = fleet.state.events["e1"]
    assert record.reports[VICTIM.key] == 2 and record.prepared == {} and record.echoes == {}
    assert "e2" not in fleet.state.events and "e3" not in fleet.state.events
    assert down(fleet, T0 + 30)[VICTIM.key] == "started"


def test_unverified_reports_join_no_group():
    fleet = Fleet()
    a, b = AgentVm("a-0"), AgentVm("b-0")
    fleet.beat(a, b, t=T0)
    fleet.announce("E1", [a], [a], t=T0)
    unverified(fleet, report("scheduled", b, "E1", T0 + 1, resources=["a-0"]))
    idx = index(fleet.state, fleet.policy)
    assert idx.group_of[a.key] != idx.group_of[b.key]
