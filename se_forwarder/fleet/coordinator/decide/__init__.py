"""The decision pass and what people decide, pure: the fold, the policy and the clock in, decisions out.

``evaluate.evaluate`` walks the rule chain (``rules``) over every open event: who is unavailable
(``availability``), the budgets per scope (``scopes``), VMs whose queue another shares
(``queues``), the path through ARM's ``acknowledge`` when no agent watches (``arm_path``), and which VMs a
shard may approve for (``ownership``).
``control`` turns pause, resume, hold, release and approve-now into decisions; ``events`` makes
each decision its CloudEvent, and ``wording`` the words of its reason.
"""

from __future__ import annotations

from .arm_path import acknowledge_path, acknowledged
from .availability import unavailable, used
from .control import ControlRefused
from .events import Decision, VmRef, sent, signed, to_dict
from .queues import QueueConflictLog, queue_of
from .scopes import index, resolve

__all__ = [
    "ControlRefused", "Decision", "QueueConflictLog", "VmRef", "acknowledge_path", "acknowledged", "index",
    "queue_of", "resolve", "sent", "signed", "to_dict", "unavailable", "used"
]
