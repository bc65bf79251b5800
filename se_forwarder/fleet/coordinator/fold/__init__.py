"""The fleet state and how each admitted event changes it, pure and in O(1) per report.

``dispatch.fold_event`` routes one CloudEvent by type: agents' ``reports`` (a VM speaks only for
itself, within the ``caps`` of ``[limits]``), the coordinator's ``decisions`` (with the sequence
rule of ``switches``), and, through ``azure``, Azure's own word (``azure_state``, ``topology``).
``identities`` binds each vmId to its key; ``state`` holds the typed records; ``snapshot`` is the
fold as JSON and back; ``retention`` forgets what is old. No I/O and no clock: ``now`` comes in.
"""

from __future__ import annotations

from .azure import fold_catch_up, fold_event
from .azure_state import CatchUp, EventFacts, VmFacts
from .dispatch import Sender, claimed
from .identities import Claim
from .snapshot import restore
from .state import DecisionRecord, FleetState, Identity

__all__ = [
    "CatchUp", "Claim", "DecisionRecord", "EventFacts", "FleetState", "Identity", "Sender", "VmFacts",
    "claimed", "fold_catch_up", "fold_event", "restore"
]
