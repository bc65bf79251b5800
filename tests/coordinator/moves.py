"""Fold steps for the scope index's and the digest's property tests: any mix of reports, new VMs,
renames, moves, host: records, scale sets, Azure's topology, Terminates, prunes, confirmed
placements, health verdicts in heartbeats and Resource Health's word, and looks at the index in between."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import Budget, FleetState, Policy
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.decide.control import ControlRefused, confirm
from se_forwarder.fleet.coordinator.decide.events import to_dict
from se_forwarder.fleet.coordinator.decide.scopes import FLEET
from se_forwarder.fleet.coordinator.fold import fold_catch_up
from se_forwarder.fleet.coordinator.fold.azure_state import AVAILABILITY_STATES, HealthFacts
from se_forwarder.fleet.coordinator.fold.health import fold_azure_health
from se_forwarder.fleet.coordinator.fold.retention import prune

from .azure import catch_up, vm_row
from .fleet import SOURCE, T0, AgentVm, heartbeat, report

NAMES = ["web-0", "web-1", "web-2", "WEB-0", "db-0"]
POLICY = Policy(budgets=(Budget("group", count=1), Budget("zone", percent=34),
                         Budget("fault_domain", count=1)), group_tag="tier", azure_fresh_for=600)
POLICY_ID = Policy(budgets=(Budget("fleet", percent=50),), queue_template="se-approvals-{vm_id}")

# The strategies the steps draw from, made once (made anew for each draw, making and validating
# them cost a tenth of the property tests' time).
NAME = st.sampled_from(NAMES)
RG = st.sampled_from(("rg-a", "rg-b"))
FD = st.sampled_from(("0", "1"))
UD = st.sampled_from(("0", "1", ""))
ZONE = st.sampled_from(("", "1", "2"))
SCALE_SET = st.sampled_from(("", "", "ss"))
TAGS = st.sampled_from(((), (("tier", "front"),), (("tier", "back"), ("team", "x"))))
KIND = st.sampled_from(("beat", "beat", "report", "report", "look", "look", "azure", "prune", "confirm",
                        "health"))
VERDICT = st.sampled_from((None, {"Verdict": "healthy"}, {"Verdict": "unknown"},
                           {"Verdict": "unhealthy", "Probe": "web", "Reason": "503"}))
AVAILABILITY = st.sampled_from(AVAILABILITY_STATES)
VIA = st.sampled_from(("feed", "graph"))
EVENT = st.sampled_from((("E1", "Reboot"), ("E2", "Redeploy"), ("T3", "Terminate")))
RESOURCES = st.lists(NAME, min_size=1, max_size=3, unique=True)
WHAT = st.sampled_from(("scheduled", "scheduled", "started", "completed", "canceled"))
AVSET = st.sampled_from(("", "av1"))


@st.composite
def a_vm(draw: st.DrawFn) -> AgentVm:
    """A VM as its agent says it is now: its name, group, zone and domains may change."""
    name = draw(NAME)
    return AgentVm(
        name, rg=draw(RG), fd=draw(FD), ud=draw(UD), zone=draw(ZONE), scale_set=draw(SCALE_SET),
        tags=draw(TAGS), complete=draw(st.integers(0, 5)) > 0)


@st.composite
def step(draw: st.DrawFn) -> tuple:
    kind = draw(KIND)
    t = T0 + draw(st.integers(0, 900))
    if kind == "beat":
        beat = heartbeat(draw(a_vm()), t)
        beat["data"]["Health"] = copy.deepcopy(draw(VERDICT))
        return ("fold", beat)
    if kind == "health":  # Resource Health's word on a VM (feed or graph)
        said = draw(AVAILABILITY)
        via = draw(VIA)
        return ("health", HealthFacts(draw(a_vm()).resource_id.lower(), said, t, via))
    if kind == "report":
        event_id, event_type = draw(EVENT)
        names = draw(RESOURCES)
        what = draw(WHAT)
        return ("fold", report(what, draw(a_vm()), event_id, t, event_type=event_type, resources=names,
                               not_before=T0 + 1200))
    if kind == "azure":
        listed = draw(st.lists(a_vm().filter(lambda v: v.complete), max_size=3))
        return ("azure", catch_up(t, [vm_row(v, avset=draw(AVSET)) for v in listed]))
    if kind in ("prune", "confirm"):
        return (kind, t)
    return ("look", t)


def fold_step(state: FleetState, what: str, arg: Any, policy: Policy) -> bool:
    """Fold one step of the fold's kinds (an agent's report, Azure's catch-up, a prune, an operator's
    confirmation of where every VM claims to be, when any is outside its inventory); False for a
    step of another kind."""
    if what == "fold":
        fold_event(state, copy.deepcopy(arg))
    elif what == "azure":
        fold_catch_up(state, arg)
    elif what == "health":
        fold_azure_health(state, arg)
    elif what == "prune":
        prune(state, policy, arg + 3000)
    elif what == "confirm":
        with contextlib.suppress(ControlRefused):  # refused: every VM counts where it claims to be
            fold_event(state, to_dict(confirm(state, policy, arg, FLEET, "person:ops", "checked"), SOURCE))
    else:
        return False
    return True
