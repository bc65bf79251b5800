"""Properties of the decision pass, for any generated fleet, events and policy."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import Budget, Evaluation, Policy, evaluate, to_dict
from se_forwarder.fleet.coordinator import (
    claimed as fold_event,
)
from se_forwarder.fleet.coordinator.decide import index, resolve, unavailable, used
from se_forwarder.fleet.coordinator.decide.availability import completions, own_ranks
from se_forwarder.fleet.coordinator.fold import FleetState
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot

from .fleet import PREFIX, SOURCE, T0, AgentVm, approved, heartbeat, iso, report

NOW = T0 + 1000
KINDS = ("group", "scale_set", "zone", "fault_domain", "update_domain", "resource_group", "fleet", "tag:tier")
# The strategies a world draws from that do not depend on what it drew before, made once: made
# anew for each draw, they cost a tenth of the module's time in making and validating strategies.
EVENT_TYPE = st.sampled_from(("Reboot", "Redeploy", "Freeze"))
BUDGET_KINDS = st.lists(st.sampled_from(KINDS), min_size=1, max_size=4, unique=True)
PERCENT = st.sampled_from((10, 25, 34, 50))
MANAGE = st.lists(EVENT_TYPE, unique=True, min_size=1)
MIN_HEALTHY = st.sampled_from((0, 300))
APPROVE_WITHIN = st.sampled_from((600, 3600, 7200))
ZONE = st.sampled_from(("", "1", "2"))
TIER = st.sampled_from(("a", "b"))
NOT_BEFORE = st.sampled_from((300, 600, 900, 1500, 2400, 5000, -60)) | st.integers(-60, 4000)
STATUS = st.sampled_from(("scheduled",) * 5 + ("started", "completed", "approved"))


@dataclass
class World:
    state: FleetState
    policy: Policy
    not_before: dict[str, float]


@st.composite
def budgets(draw: st.DrawFn) -> tuple[Budget, ...]:
    kinds = draw(BUDGET_KINDS)
    out = []
    for kind in kinds:
        if draw(st.booleans()):
            out.append(Budget(kind, count=draw(st.integers(1, 3))))
        else:
            out.append(Budget(kind, percent=draw(PERCENT)))
    return tuple(out)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    policy = Policy(
        budgets=draw(budgets()),
        manage=frozenset(draw(MANAGE)),
        min_healthy=draw(MIN_HEALTHY),
        require_prepared=draw(st.integers(0, 3)) == 0,
        approve_within=draw(APPROVE_WITHIN),
    )
    state = FleetState()
    groups: list[list[AgentVm]] = []
    for g in range(draw(st.integers(1, 3))):
        scale_set = f"ss{g}" if draw(st.booleans()) else ""
        size = draw(st.integers(1, 6))
        groups.append([
            AgentVm(f"g{g}-{i}", rg=f"rg{draw(st.integers(0, 1))}", fd=str(draw(st.integers(0, 2))),
                    ud=str(draw(st.integers(0, 2))), zone=draw(ZONE),
                    scale_set=scale_set, tags=(("tier", draw(TIER)),))
            for i in range(size)
        ])
    for members in groups:
        for vm in members:
            silent = draw(st.integers(0, 9)) == 0
            fold_event(state, heartbeat(vm, NOW - (400 if silent else 30)))
        for vm in members:  # co-reception: the group learns itself
            fold_event(state, report("completed", vm, f"past-{members[0].name}", T0 - 9000,
                                     resources=[members[0].name]))
    not_before: dict[str, float] = {}
    for e in range(draw(st.integers(1, 8))):
        members = draw(st.sampled_from(groups))
        affected = draw(st.lists(st.sampled_from(members), min_size=1, max_size=3, unique=True))
        event_id = f"E{e}"
        kind = draw(EVENT_TYPE)
        nb = NOW + draw(NOT_BEFORE)
        names = [vm.name for vm in affected]
        status = draw(STATUS)
        for vm in members:
            fold_event(state, report("scheduled", vm, event_id, NOW - 100, event_type=kind, resources=names,
                                     not_before=nb))
        if status == "approved":
            fold_event(state, approved(affected[0], event_id, NOW - 50, resources=names, event_type=kind))
        elif status != "scheduled":
            for vm in affected:
                fold_event(state, report("started", vm, event_id, NOW - 60, event_type=kind, resources=names))
            if status == "completed":
                for vm in affected:
                    fold_event(state, report("completed", vm, event_id, NOW - 20, event_type=kind,
                                             resources=names))
        for vm in affected:
            if draw(st.integers(0, 3)) == 0:
                fold_event(state, report("prepared", vm, event_id, NOW - 90, event_type=kind,
                                         resources=names))
        if draw(st.integers(0, 9)) == 0:
            fold_event(state, control("hold", event_id, event_id, NOW - 10))
        not_before[event_id.lower()] = nb
    idx = index(state, policy)
    scopes = sorted({s for vm in idx.members for s in idx.scopes_of[vm]})
    for scope in draw(st.lists(st.sampled_from(scopes), max_size=2, unique=True)) * draw(st.booleans()):
        fold_event(state, control("pause", scope, None, NOW - 10))
    return World(state, policy, not_before)


def control(kind: str, subject: str, event_id: str | None, t: float) -> dict:
    return {"specversion": "1.0", "type": f"{PREFIX}coordinator.{kind}",
            "id": f"{subject}/coordinator/{kind}/1", "source": SOURCE, "subject": subject, "time": iso(t),
            "data": {"EventId": event_id, "Scope": subject, "Sequence": 1, "Actor": "person:p",
                     "Reason": "r"}}


def fresh(result: Evaluation) -> list:
    return [d for d in result.decisions if d.kind == "approve" and d.code == "fits"]


def touched_scopes(world: World, event_key: str) -> set[str]:
    idx = index(world.state, world.policy)
    vms = resolve(world.state, idx, world.state.events[event_key]).vms
    return {s for vm in vms for s in idx.scopes_of[vm]}


@settings(max_examples=250, deadline=None)
@given(worlds())
def test_applying_a_pass_never_takes_a_scope_over_its_budget(world):
    idx = index(world.state, world.policy)
    before = used(idx, unavailable(world.state, world.policy, idx, NOW))
    result = evaluate(world.state, world.policy, NOW)
    for decision in result.decisions:
        fold_event(world.state, to_dict(decision, SOURCE))
    after = used(idx, unavailable(world.state, world.policy, idx, NOW))
    for scope, count in after.items():
        assert count <= idx.limit(scope) or count == before[scope], (scope, before[scope], count)
    for decision in fresh(result):
        assert all(use.fits for use in decision.budgets)


@settings(max_examples=250, deadline=None)
@given(worlds())
def test_paused_scopes_held_events_and_unmanaged_types_never_get_an_approval(world):
    result = evaluate(world.state, world.policy, NOW)
    paused = {s for s, switch in world.state.pauses.items() if switch.on}
    for decision in result.decisions:
        if decision.kind != "approve":
            continue
        key = decision.event_id.lower()
        assert world.state.held(key) is None
        assert not touched_scopes(world, key) & (paused | ({"fleet"} if "fleet" in paused else set()))
        assert world.state.events[key].event_type in world.policy.manage


@settings(max_examples=250, deadline=None)
@given(worlds())
def test_the_earliest_not_before_goes_first(world):
    result = evaluate(world.state, world.policy, NOW)
    order = [world.not_before[d.event_id.lower()] for d in fresh(result)]
    assert order == sorted(order)
    idx = index(world.state, world.policy)
    for decision in fresh(result):
        key = decision.event_id.lower()
        added = {u.scope for u in decision.budgets if u.with_event > u.used}
        for other, verdict in result.verdicts.items():
            if verdict.code == "budget" and world.not_before[other] < world.not_before[key]:
                failed = {u.scope for u in verdict.budgets if not u.fits}
                own = resolve(world.state, idx, world.state.events[other]).vms
                never_fits = any(sum(s in idx.budget_scopes_of[v] for v in own) > idx.limit(s)
                                 for s in failed)
                assert never_fits or not added & failed, (decision.event_id, other)


@settings(max_examples=100, deadline=None)
@given(worlds())
def test_a_pass_changes_nothing_in_the_state_and_is_repeatable(world):
    before = snapshot(world.state)
    first = evaluate(world.state, world.policy, NOW)
    second = evaluate(world.state, world.policy, NOW)
    assert snapshot(world.state) == before
    assert first.decisions == second.decisions


@settings(max_examples=100, deadline=None)
@given(worlds())
def test_folding_a_pass_then_deciding_again_at_the_same_time_decides_nothing_new(world):
    for decision in evaluate(world.state, world.policy, NOW).decisions:
        fold_event(world.state, to_dict(decision, SOURCE))
    assert evaluate(world.state, world.policy, NOW).decisions == []


def in_policy_order(world: World, scopes: set[str]) -> list[str]:
    idx = index(world.state, world.policy)
    rank = {budget.kind: i for i, budget in enumerate(world.policy.budgets)}
    return sorted(scopes, key=lambda s: (rank[idx.kind_of[s]], s))


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_each_verdict_counts_its_budgets_as_a_plain_count_over_the_fleet_does(world):
    """Differential: the budget use a verdict gives (what approve and defer decisions publish)
    against a count over every VM: the budgeted scopes of the event's VMs in policy order, each
    one's size and limit, its VMs down before the pass or approved earlier in it, and those with
    the event's own VMs."""
    state, policy = world.state, world.policy
    idx = index(state, policy)
    down = set(unavailable(state, policy, idx, NOW))
    result = evaluate(state, policy, NOW)
    approved_now = {d.event_id.lower() for d in fresh(result)}
    for key, verdict in result.verdicts.items():
        own = set(verdict.affected)
        scopes = {s for vm in own for s in idx.budget_scopes_of[vm]}
        if key in approved_now or verdict.budgets:
            assert [u.scope for u in verdict.budgets] == in_policy_order(world, scopes)
        for use in verdict.budgets:
            members = {vm for vm in idx.members if use.scope in idx.budget_scopes_of[vm]}
            assert (use.kind, use.size, use.max) == \
                (idx.kind_of[use.scope], len(members), idx.limit(use.scope))
            assert (use.used, use.with_event) == (len(members & down), len(members & (down | own)))
        if key in approved_now:
            down |= own


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_a_breach_names_the_scopes_an_event_alone_exceeds_as_a_plain_count_finds_them(world):
    state, policy = world.state, world.policy
    idx = index(state, policy)
    before = used(idx, unavailable(state, policy, idx, NOW))
    result = evaluate(state, policy, NOW)
    for decision in result.decisions:
        if decision.kind != "breach":
            continue
        own = result.verdicts[decision.event_id.lower()].affected
        counts = Counter(s for vm in own for s in idx.budget_scopes_of[vm])
        over = in_policy_order(world, {s for s, n in counts.items() if n > idx.limit(s)})
        assert [(u.scope, u.used, u.with_event, u.max) for u in decision.budgets] == \
            [(s, before[s], counts[s], idx.limit(s)) for s in over]


@settings(max_examples=200, deadline=None)
@given(worlds(), st.randoms(use_true_random=False))
def test_when_a_vm_was_done_with_an_event_does_not_depend_on_which_other_vms_are_asked_about(world, rnd):
    """The decision pass asks ``completions`` only about the VMs whose answer it reads (those the
    event affects, and those that reported it Started when a name of it is no VM's)."""
    state, policy = world.state, world.policy
    idx = index(state, policy)
    for key in sorted(state.open_events | state.settling):
        record = state.events[key]
        ranks = own_ranks(idx, record)
        every = tuple(dict.fromkeys((*resolve(state, idx, record).vms, *ranks)))
        whole = completions(state, idx, record, every, policy, ranks)
        some = tuple(vm for vm in every if rnd.random() < 0.5)
        asked = completions(state, idx, record, some, policy, ranks)
        assert asked == {vm: whole[vm] for vm in some if vm in whole}
