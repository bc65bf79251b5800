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

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Protocol

from ....approvals.queue.names import MAX_QUEUE_NAME, PLACEHOLDER, queue_name
from ....errors import ConfigError
from ..fold.state import FleetState


class Shared(Protocol):
    """What the log reads of scopes.ScopeIndex: VM key -> its queue, for the VMs sharing one."""

    @property
    def shared_queue(self) -> Mapping[str, str]: ...


LEGAL = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def queue_of(template: str, name: str, vm_id: str) -> str | None:
    """The VM's approval queue, or None when the template cannot name it (no ``vm_id`` yet).
    ``queue_name``'s rules; a name they leave as it is (lower case letters, digits and single
    hyphens, short enough: nearly every VM's) is filled in without them."""
    if _plain(template):
        lowered = name.lower()
        text = template.replace("{vm_id}", vm_id).replace("{vm_name}", lowered)
        if (3 <= len(text) <= MAX_QUEUE_NAME and LEGAL.fullmatch(lowered) and LEGAL.fullmatch(text)
                and (vm_id or "{vm_id}" not in template)):
            return text
    return _queue_of(template, name, vm_id)


@lru_cache(maxsize=64)
def _plain(template: str) -> bool:
    """Whether ``template`` has no placeholder but ``{vm_name}`` and ``{vm_id}``."""
    return all(name in ("vm_name", "vm_id") for name in PLACEHOLDER.findall(template))


@lru_cache(maxsize=4_096)
def _queue_of(template: str, name: str, vm_id: str) -> str | None:
    try:
        return queue_name(template, name, vm_id)
    except ConfigError:
        return None


def queue_conflicts(state: FleetState, shared: Mapping[str, str]) -> list[dict[str, Any]]:
    """``[{"queue", "vms": [names]}]``: each queue more than one VM of the fleet would use
    (``shared``: VM key -> its queue, as the scope index keeps it: scopes.py)."""
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
