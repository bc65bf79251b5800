"""The check's ``[azure]`` parts: Resource Graph, and the right to acknowledge (check/__init__.py).

Both use the coordinator's own clients (azure/graph.py, azure/acknowledge.py) and change nothing:
the acknowledge probe names the nil EventId on a VM the identity can read, which ARM answers 404
when the identity may acknowledge, 403 when it lacks the role or a policy denies it.
"""

from __future__ import annotations

import time

from ..azure import clients as access
from ..config.azure import AzureSettings
from .services import WARN, Result


class AzureParts:
    """Resource Graph and the acknowledge probe, with the coordinator's own clients (azure/graph.py)."""

    NIL = "00000000-0000-0000-0000-000000000000"

    def __init__(self, settings: AzureSettings) -> None:
        self.settings = settings
        self.vm = ""  # a VM the identity can read, for the probe

    def read(self) -> Result:
        from ..azure.graph import EVENTS, Graph

        settings = self.settings
        graph = Graph(settings, access.azure_credential(settings), deadline=60)
        try:
            ends = time.monotonic() + 60
            vms, _ = graph.rows("resources | where type =~ 'microsoft.compute/virtualmachines' | project id "
                                "| limit 1000", settings.subscriptions[:100], ends)
            events, _ = graph.rows(EVENTS + " | limit 1000", settings.subscriptions[:100], ends)
        finally:
            graph.close()
        self.vm = str(vms[0].get("id") or "") if vms else ""
        subs = f"{len(settings.subscriptions)} subscription(s)"
        if not vms:
            return WARN, f"{settings.arm_endpoint}: the identity can read no VM in {subs} (it needs Reader)"
        return True, (f"{settings.arm_endpoint}: {len(vms)}{'+' if len(vms) == 1000 else ''} VM(s) and "
                      f"{len(events)} scheduled event(s) readable in {subs}")

    def acknowledge(self) -> Result:
        from ..azure.acknowledge import Acknowledger, single_path

        if not self.vm:
            return None, "no VM readable to probe the acknowledge permission on"
        probe = Acknowledger(self.settings, access.azure_credential(self.settings), lambda *_: None)
        try:
            path = single_path(f"{self.vm}/providers/Microsoft.Maintenance/scheduledevents/{self.NIL}")
            code, reason = probe.post(path)
        finally:
            probe.close()
        if code in ("not-found", "approved"):
            return True, "the identity may acknowledge scheduled events (a probe for the nil EventId: " \
                         f"{reason}; nothing was approved)"
        if code == "disallowed-by-policy":
            return False, f"an Azure Policy denies acknowledging ({reason}); or set acknowledge = false"
        if code in ("forbidden", "unauthorized"):
            return False, f"the identity may not acknowledge ({reason}), or set acknowledge = false"
        return False, reason
