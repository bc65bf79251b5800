"""Which VMs of the fleet would share an approval queue. Pure (the agents' queue-name rules).

The coordinator sends a VM's approval to the queue the agents' template names for it
(``approvals/queue/names.py``, as output/messages.py does). The rules make VMs of different names different
queues (``web_1`` and ``web-1`` differ: a changed name gets a hash), but two VMs of the same name
in other resource groups or subscriptions (``web-1`` and ``WEB-1``), or every VM under a template
without ``{vm_name}`` or ``{vm_id}``, share one. An approval put there could be taken by the
other VM's agent, so the decision pass never targets a VM whose queue another VM shares
(decide/evaluate.py); status lists each such queue, and the service logs it and counts it in ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Protocol

from ....approvals.queue.names import queue_name
from ....errors import ConfigError
from ..fold.state import FleetState


class Shared(Protocol):
    """What the log reads of scopes.ScopeIndex: VM key -> its queue, for the VMs sharing one."""

    @property
    def shared_queue(self) -> Mapping[str, str]: ...


@lru_cache(maxsize=65_536)
def queue_of(template: str, name: str, vm_id: str) -> str | None:
    """The VM's approval queue, or None when the template cannot name it (no ``vm_id`` yet)."""
    try:
        return queue_name(template, name, vm_id)
    except ConfigError:
        return None


def shared_queues(state: FleetState, members: list[str], template: str) -> dict[str, str]:
    """VM key -> its queue, for every VM of ``members`` whose queue another member's is too."""
    by_queue: dict[str, list[str]] = {}
    for key in members:
        vm = state.vms[key]
        queue = queue_of(template, vm.name, vm.vm_id) if vm.name else None
        if queue is not None:
            by_queue.setdefault(queue, []).append(key)
    return {key: queue for queue, keys in by_queue.items() if len(keys) > 1 for key in keys}


def queue_conflicts(state: FleetState, shared: Mapping[str, str]) -> list[dict[str, Any]]:
    """``[{"queue", "vms": [names]}]``: each queue more than one VM of the fleet would use
    (``shared``: VM key -> its queue, as ``shared_queues`` found)."""
    by_queue: dict[str, list[str]] = {}
    for key, queue in shared.items():
        by_queue.setdefault(queue, []).append(key)
    return [{"queue": queue, "vms": sorted(f"{state.vms[k].name} ({state.vms[k].vm_id or k})" for k in keys)}
            for queue, keys in sorted(by_queue.items())]


class QueueConflictLog:
    """Says each shared queue once, when it first appears (and that it is gone, when it is)."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[str, ...]] = {}

    def news(self, state: FleetState, idx: Shared | None) -> list[str]:
        shared = idx.shared_queue if idx is not None else {}
        now = {c["queue"]: tuple(c["vms"]) for c in queue_conflicts(state, shared)}
        lines = [f"approval queue {queue} would be shared by {', '.join(vms)}: none of them is sent an "
                 "approval (rename a VM, or put {vm_id} in [queues] queue and the agents' template)"
                 for queue, vms in now.items() if self.known.get(queue) != vms]
        lines += [f"approval queue {queue} is no longer shared" for queue in self.known if queue not in now]
        self.known = now
        return lines
