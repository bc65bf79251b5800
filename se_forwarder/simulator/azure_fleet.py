"""Where Azure files each simulated VM: resource ids, its availability set or scale set, zone,
fault and update domain, tags; and under which resource a scheduled event lives.

The facts come from the same place as each VM's instance metadata (``wire.compute_metadata`` with
the topology's overrides), so IMDS, Resource Graph and the feed tell one story. Ids follow ARM
(see ``docs/azure-feed.md``):

- a VM of an availability set or a flexible scale set is ``.../virtualMachines/<name>``;
- a uniform scale set's VM is ``.../virtualMachineScaleSets/<set>/virtualMachines/<instanceId>``;
- a scheduled event is ``<owner>/providers/Microsoft.Maintenance/scheduledevents/<EventId>``,
  where the owner is the scale set for scale-set VMs and the first VM of ``Resources`` otherwise.

Without a topology the simulated VMs form one availability set, ``DEFAULT_SET``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from se_forwarder.simulator.topology import SCALE_SET, STANDALONE, Topology
from se_forwarder.simulator.wire import (
    DEFAULT_LOCATION,
    DEFAULT_RESOURCE_GROUP,
    DEFAULT_SUBSCRIPTION_ID,
    compute_metadata,
)

TENANT_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/se-forwarder/simulator/tenant"))
DEFAULT_SET = "sim-avset"
EVENT_PROVIDER = "providers/Microsoft.Maintenance/scheduledevents"


def group_id(kind: str, name: str) -> str:
    """The ARM id of an availability set or scale set of the simulated resource group."""
    collection = "virtualMachineScaleSets" if kind == SCALE_SET else "availabilitySets"
    return (
        f"/subscriptions/{DEFAULT_SUBSCRIPTION_ID}/resourceGroups/{DEFAULT_RESOURCE_GROUP}"
        f"/providers/Microsoft.Compute/{collection}/{name}"
    )


@dataclass(frozen=True)
class VmFacts:
    """What Azure knows of one simulated VM."""

    name: str
    vm_id: str  # the vmId (uuid)
    resource_id: str
    zone: str
    fault_domain: int
    update_domain: int
    tags: dict[str, str] = field(hash=False)
    availability_set: str | None  # ARM id
    scale_set: str | None  # ARM id
    orchestration: str  # "" | uniform | flexible
    instance_id: str | None  # uniform scale-set VMs

    @property
    def group_id(self) -> str:
        return self.scale_set or self.availability_set or self.resource_id

    @property
    def uniform(self) -> bool:
        return self.orchestration == "uniform"


class AzureFleet:
    """The simulated VMs as Azure files them (module docstring)."""

    def __init__(self, vm_names: Sequence[str], topology: Topology | None = None) -> None:
        self.subscription = DEFAULT_SUBSCRIPTION_ID
        self.resource_group = DEFAULT_RESOURCE_GROUP
        self.location = DEFAULT_LOCATION
        self.tenant = TENANT_ID
        self.topology = topology
        self._vms = {name: self._facts(name, i) for i, name in enumerate(vm_names)}

    def _facts(self, name: str, index: int) -> VmFacts:
        topology = self.topology
        compute = compute_metadata(name, index, topology.compute_overrides(name) if topology else None)
        group = topology.group(name) if topology else None
        kind, set_name = (group.kind, group.name) if group else ("availability-set", DEFAULT_SET)
        orchestration = group.orchestration if group else ""
        in_set = group.vms.index(name) if group else index
        return VmFacts(
            name=name,
            vm_id=compute["vmId"],
            resource_id=compute["resourceId"],
            zone=compute["zone"],
            fault_domain=int(compute["platformFaultDomain"]),
            update_domain=int(compute["platformUpdateDomain"]),
            tags={t["name"]: t["value"] for t in compute["tagsList"]},
            availability_set=None if kind in (SCALE_SET, STANDALONE) else group_id(kind, set_name),
            scale_set=group_id(kind, set_name) if kind == SCALE_SET else None,
            orchestration=orchestration,
            instance_id=str(in_set) if orchestration == "uniform" else None,
        )

    # -- look-ups --------------------------------------------------------------------------------

    @property
    def vms(self) -> list[VmFacts]:
        return list(self._vms.values())

    def vm(self, name: str) -> VmFacts | None:
        return self._vms.get(name)

    def event_owner(self, resources: Sequence[str]) -> str:
        """The ARM id a scheduled event for ``resources`` is filed under (module docstring)."""
        first = next((self._vms[r] for r in resources if r in self._vms), None)
        if first is None:
            return (
                f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
                f"/providers/Microsoft.Compute/virtualMachines/{resources[0] if resources else 'unknown'}"
            )
        if first.scale_set:
            return first.scale_set
        return first.resource_id

    def event_id(self, event_id: str, resources: Sequence[str]) -> str:
        return f"{self.event_owner(resources)}/{EVENT_PROVIDER}/{event_id}"

    def zones(self, resources: Sequence[str]) -> list[str]:
        return sorted({f.zone for r in resources if (f := self._vms.get(r)) is not None and f.zone})

    def scopes(self, vm: str) -> set[str]:
        """The ARM ids (lower case) under which an acknowledge may name ``vm``'s events: the VM,
        its availability set or its scale set."""
        facts = self._vms.get(vm)
        if facts is None:
            return set()
        return {i.lower() for i in (facts.resource_id, facts.availability_set, facts.scale_set) if i}

    def row(self, rid: str, name: str, kind: str) -> dict[str, Any]:
        """The columns every Resource Graph row has, for a resource of this resource group."""
        return {
            "id": rid,
            "name": name,
            "type": kind,
            "tenantId": self.tenant,
            "kind": "",
            "location": self.location,
            "resourceGroup": self.resource_group.lower(),
            "subscriptionId": self.subscription,
            "managedBy": "",
            "sku": None,
            "plan": None,
            "properties": {},
            "tags": {},
            "identity": None,
            "zones": None,
            "extendedLocation": None,
        }

    def describe(self) -> dict[str, Any]:
        return {
            "subscription": self.subscription,
            "resourceGroup": self.resource_group,
            "tenant": self.tenant,
            "location": self.location,
            "vms": {f.name: {"id": f.resource_id, "group": f.group_id} for f in self.vms},
        }
