"""The fleet coordinator: reads every agent's signed reports and Azure's own feed, decides approvals
within budgets, sends them signed, and serves the fleet page. Each folder is a box of its flow::

    hub ──▶ input/ ──▶ edge/ ──▶ fold/ ──▶ decide/ ──▶ output/ ──▶ approval message in the VM's queue
            (read,     (trust:   (the      (budgets:   (publish,      and the decision on the hub
             admit)     verdict)  state)    decisions)  send, chat)

beside them ``view/`` (the read model), ``ha/`` (lease, snapshot), ``azure/`` (Azure's clients and
deadlines), ``api/`` (the control API and the page) and ``config/`` (``coordinator.toml``). At the
top: ``service.py`` (the loop that wires them: the only thread that owns the fold), ``observe.py``
(``/metrics``, ``/healthz``, rendering ``stats.py``'s snapshots), ``signer.py`` (the Ed25519 key),
``schema.py`` (every CloudEvent type), ``check.py`` and ``addons.py``. edge, fold, decide and view
are pure: no I/O, no clock (``now`` comes in), no threads, no SDK; pyproject.toml's contracts keep
the flow one way.

This face re-exports the pure core and the service, for the CLI, the demo, benches and tests. One
pass, as the service runs it::

    policy = load_policy(tomllib.load(f))              # ConfigError naming the key
    state = FleetState()                                # or restore(snapshot_json)
    gate = Gate(Edge(SOURCE, lambda: verify_keys, trust.Attestation(anchors)))   # edge/gate.py
    gate.admit(state, cloud_event_dict, enqueued)       # every event read from the hub: folded only
                                                        # as edge/trust.py lets it in (its sender's word)
    prune(state, policy, now)                           # now and then
    result = evaluate(state, policy, now)               # result.decisions: publish these
    for d in result.decisions:
        fold_event(state, to_dict(d, SOURCE), sender=OWN)   # fold at once, then publish it signed:
        # events.signed(d, SOURCE, key)
    for ident in result.sends:                          # approvals whose message is to go out now:
        ...                                             # send a signed message to its target's queue,
        # message id = ident; once it is in the queue, fold and publish (signed, like a decision)
        # events.sent(record, queue, when)
    status(state, policy, now, result); groups(state, policy, now, result)   # the read model
"""

from .config.policy import POLICY_SECTIONS, Blackout, Budget, Policy, load_policy, parse_duration
from .config.service import ServiceSettings, load
from .decide.control import ControlRefused, approve_now, hold, normalize_scope, pause, release, resume
from .decide.evaluate import DecisionPass, Evaluation, Verdict, evaluate
from .decide.events import BudgetUse, Decision, VmRef, to_cloudevent, to_dict, to_json
from .fold.dispatch import OWN, FoldStats, claimed, fold_event, fold_json
from .fold.retention import Pruned, prune
from .fold.snapshot import restore, snapshot
from .fold.state import FleetState
from .ha.election import NotLeading
from .service import Service
from .view.groups import groups
from .view.status import status

__all__ = [
    "OWN", "POLICY_SECTIONS", "Blackout", "Budget", "BudgetUse", "ControlRefused", "Decision", "DecisionPass",
    "Evaluation", "FleetState", "FoldStats", "NotLeading", "Policy", "Pruned", "Service", "ServiceSettings",
    "Verdict", "VmRef", "approve_now", "claimed", "evaluate", "fold_event", "fold_json", "groups", "hold",
    "load", "load_policy", "normalize_scope", "parse_duration", "pause", "prune", "release", "restore",
    "resume", "snapshot", "status", "to_cloudevent", "to_dict", "to_json",
]
