"""The fleet coordinator's pure core: policy, fold, decision, decision events, snapshot, read model.

No I/O and no clock in here: the service around it reads the hub, keeps the lease, sends the
signed messages and serves the API, and passes ``now`` (UTC epoch seconds) in. One pass::

    policy = load_policy(tomllib.load(f))              # ConfigError naming the key
    state = FleetState()                                # or restore(snapshot_json)
    gate = Gate(Edge(SOURCE, lambda: verify_keys, trust.Attestation(anchors)))   # gate.py
    gate.admit(state, cloud_event_dict, enqueued)       # every event read from the hub: folded only
                                                        # as trust.py lets it in (its sender's word)
    prune(state, policy, now)                           # now and then
    result = evaluate(state, policy, now)               # result.decisions: publish these
    for d in result.decisions:
        fold_event(state, to_dict(d, SOURCE))           # fold at once, then publish it signed:
        # events.signed(d, SOURCE, key)
    for ident in result.sends:                          # approvals whose message is to go out now:
        ...                                             # send a signed message to its target's queue,
        # message id = ident; once it is in the queue, fold and publish (signed, like a decision)
        # events.sent(record, queue, when)
    status(state, policy, now, result); groups(state, policy, now, result)   # the read model
"""

from .config.policy import POLICY_SECTIONS, Blackout, Budget, Policy, load_policy, parse_duration
from .decide.control import ControlRefused, approve_now, hold, normalize_scope, pause, release, resume
from .decide.evaluate import DecisionPass, Evaluation, Verdict, evaluate
from .decide.events import BudgetUse, Decision, VmRef, to_cloudevent, to_dict, to_json
from .fold.dispatch import FoldStats, claimed, fold_event, fold_json
from .fold.retention import Pruned, prune
from .fold.snapshot import restore, snapshot
from .fold.state import FleetState
from .view.status import groups, status

__all__ = [
    "POLICY_SECTIONS", "Blackout", "Budget", "BudgetUse", "ControlRefused", "Decision", "DecisionPass",
    "Evaluation", "FleetState", "FoldStats", "Policy", "Pruned", "Verdict", "VmRef", "approve_now",
    "claimed", "evaluate", "fold_event", "fold_json", "groups", "hold", "load_policy", "normalize_scope",
    "parse_duration", "pause", "prune", "release", "restore", "resume", "snapshot", "status",
    "to_cloudevent", "to_dict", "to_json",
]
