"""Where the simulated VMs stand: availability sets and scale sets, as Azure places them.

Without a topology every simulated VM sees one shared event list and the same instance metadata
(``wire.compute_metadata``). With one, the simulator behaves as Azure does for a fleet:

- each VM belongs to one *group* (an availability set or a scale set; a VM named in no group is a
  group of its own);
- an event is seen by every VM of a group that holds a VM named in its ``Resources``, and by no
  other VM (so co-reception of EventIds reveals the groups, as in Azure);
- each group has its own ``DocumentIncarnation``: it goes up when what that group sees changes
  (counted when a VM of the group asks for its document, so two changes between two polls may
  show as one step; Azure promises only that a change shows a new number);
- each VM has its own instance metadata: ``platformFaultDomain``, ``platformUpdateDomain``,
  ``zone``, ``vmScaleSetName``, ``placementGroupId``, ``resourceId`` and tags.

Described in TOML or JSON (``se-forwarder simulate --topology FILE``)::

    [[availability_sets]]
    name = "web"            # VMs web-0 .. web-5 (or give the names: vms = ["a", "b"])
    vms = 6
    fault_domains = 3       # VM i is in fault domain i % 3 (default 2)
    update_domains = 5      # and update domain i % 5 (default 5)
    tags = { tier = "web" } # on every VM of the set
    agentless = ["web-4"]   # VMs that run no agent (tests start none there; Azure's side
                            # still plays their events to ARM and the feed)
    subscription = "..."    # the set's subscription id in its VMs' instance metadata and attested
                            # documents (default: the simulator's one; every group key takes it)

    [[scale_sets]]
    name = "api"            # VMs api_0 .. api_3, as scale-set instances are named
    vms = 4
    zones = ["1", "2"]      # VM i is in zone zones[i % 2] (default: no zone)
    fault_domains = 1       # default 1 (a zonal scale set spreads by zone)
    orchestration = "uniform"   # or "flexible": how Azure names the VMs' resource ids

    [[standalone]]
    name = "db"             # one VM in no availability set or scale set: a group of its own
    zone = "1"              # default: no zone
    tags = { tier = "db" }
    agentless = false

``Topology.build`` makes the same from Python. ``Placement`` is what the engine asks: which VMs
exist and what each is shown (the shared list without a topology, its group's part with one).
"""

from __future__ import annotations

import json
import re
import tomllib
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from se_forwarder.errors import ConfigError
from se_forwarder.simulator.wire import DEFAULT_RESOURCE_GROUP, DEFAULT_SUBSCRIPTION_ID

AVAILABILITY_SET, SCALE_SET, STANDALONE = "availability-set", "scale-set", "standalone"
_GROUP_KEYS = {
    "availability_sets": ("name", "vms", "fault_domains", "update_domains", "tags", "agentless",
                          "subscription"),
    "scale_sets": ("name", "vms", "zones", "fault_domains", "update_domains", "tags", "agentless",
                   "orchestration", "subscription"),
    "standalone": ("name", "zone", "tags", "agentless", "subscription"),
}
ORCHESTRATIONS = ("uniform", "flexible")
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/se-forwarder/simulator/topology")
VM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class TopologyError(ConfigError, ValueError):
    """VM names or a topology description that cannot be used; the message names the key."""


@dataclass(frozen=True)
class Group:
    name: str
    kind: str  # availability-set | scale-set
    vms: tuple[str, ...]
    agentless: frozenset[str] = frozenset()
    orchestration: str = ""  # scale sets: uniform | flexible


@dataclass
class _Seen:
    fingerprint: str = ""
    incarnation: int = 0


@dataclass
class Topology:
    """Groups of VMs and each VM's instance metadata (module docstring)."""

    groups: tuple[Group, ...]
    compute: dict[str, dict[str, Any]]  # VM name -> compute metadata overrides
    _group_of: dict[str, str] = field(default_factory=dict, repr=False)
    _seen: dict[str, _Seen] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for group in self.groups:
            for vm in group.vms:
                if vm in self._group_of:
                    raise TopologyError(f"VM {vm!r} is in two groups ({self._group_of[vm]}, {group.name})")
                self._group_of[vm] = group.name
        self._members = {g.name: frozenset(g.vms) for g in self.groups}

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def build(cls, availability_sets: Iterable[Mapping[str, Any]] = (),
              scale_sets: Iterable[Mapping[str, Any]] = (),
              standalone: Iterable[Mapping[str, Any]] = ()) -> Topology:
        """From the same mappings as the file's ``[[availability_sets]]``, ``[[scale_sets]]`` and
        ``[[standalone]]``."""
        return cls.from_mapping({"availability_sets": list(availability_sets),
                                 "scale_sets": list(scale_sets), "standalone": list(standalone)})

    @classmethod
    def load(cls, path: str | Path) -> Topology:
        """From a ``.toml`` or ``.json`` file; TopologyError naming the problem."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TopologyError(f"topology {path}: cannot be read ({exc})") from None
        try:
            data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise TopologyError(f"topology {path}: not valid {path.suffix.lstrip('.') or 'TOML'}: {exc}") \
                from None
        return cls.from_mapping(data, str(path))

    @classmethod
    def from_mapping(cls, data: Any, where: str = "topology") -> Topology:
        if not isinstance(data, Mapping):
            raise TopologyError(f"{where}: must be a table")
        unknown = sorted(set(data) - set(_GROUP_KEYS))
        if unknown:
            raise TopologyError(f"{where}: unknown key {unknown[0]!r} ({', '.join(_GROUP_KEYS)})")
        groups: list[Group] = []
        compute: dict[str, dict[str, Any]] = {}
        for section, keys in _GROUP_KEYS.items():
            items = data.get(section, [])
            if not isinstance(items, list):
                raise TopologyError(f"{where}.{section}: must be an array of tables")
            for i, item in enumerate(items):
                spot = f"{where}.{section}[{i}]"
                if not isinstance(item, Mapping):
                    raise TopologyError(f"{spot}: must be a table")
                extra = sorted(set(item) - set(keys))
                if extra:
                    raise TopologyError(f"{spot}: unknown key {extra[0]!r} ({', '.join(keys)})")
                standalone = section == "standalone"
                group, placed = _standalone(item, spot) if standalone else _group(section, item, spot)
                if any(g.name == group.name for g in groups):
                    raise TopologyError(f"{spot}.name: {group.name!r} is used twice")
                groups.append(group)
                compute.update(placed)
        if not groups:
            raise TopologyError(f"{where}: give at least one availability set, scale set or standalone VM")
        return cls(tuple(groups), compute)

    # -- what the engine and the server ask -----------------------------------------------------

    @property
    def vm_names(self) -> tuple[str, ...]:
        return tuple(vm for g in self.groups for vm in g.vms)

    def group_of(self, vm: str) -> str:
        return self._group_of.get(vm, vm)

    def group(self, vm: str) -> Group | None:
        """The availability set or scale set ``vm`` is in (None for a VM of no group)."""
        name = self._group_of.get(vm)
        return next((g for g in self.groups if g.name == name), None)

    @property
    def agentless(self) -> frozenset[str]:
        """The VMs marked as running no agent (``agentless = [...]`` in their group)."""
        return frozenset(vm for g in self.groups for vm in g.agentless)

    def members(self, vm: str) -> frozenset[str]:
        return self._members.get(self.group_of(vm), frozenset((vm,)))

    def sees(self, vm: str, resources: Sequence[str]) -> bool:
        """Whether ``vm`` sees an event for ``resources``: one of them is in its group."""
        members = self.members(vm)
        return any(r in members for r in resources)

    def view(self, vm: str, events: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
        """(the events ``vm`` sees, its group's DocumentIncarnation); call under the engine's lock."""
        shown = [e for e in events if self.sees(vm, e.get("Resources") or ())]
        seen = self._seen.setdefault(self.group_of(vm), _Seen())
        fingerprint = json.dumps(shown, sort_keys=True)
        if fingerprint != seen.fingerprint or not seen.incarnation:
            seen.fingerprint = fingerprint
            seen.incarnation += 1
        return shown, seen.incarnation

    def compute_overrides(self, vm: str) -> dict[str, Any]:
        """The instance metadata fields that differ per VM (merged over the simulator's defaults)."""
        return dict(self.compute.get(vm, {}))

    def describe(self) -> dict[str, Any]:
        """``GET /control/topology``."""
        return {
            "groups": [{"name": g.name, "kind": g.kind, "vms": list(g.vms), "agentless": sorted(g.agentless),
                        **({"orchestration": g.orchestration} if g.orchestration else {})}
                       for g in self.groups],
            "vms": {vm: {k: self.compute[vm][k] for k in ("platformFaultDomain", "platformUpdateDomain",
                                                           "zone", "vmScaleSetName", "placementGroupId")}
                    for vm in self.vm_names},
        }


class Placement:
    """The simulated VMs and what each one is shown: without a topology every VM sees the one
    shared list under the one DocumentIncarnation; with one, its group's part (``Topology.view``).
    """

    def __init__(self, vm_names: Sequence[str], topology: Topology | None = None) -> None:
        names = topology.vm_names if topology is not None else tuple(vm_names)
        if not names:
            raise TopologyError("at least one VM name is needed")
        for name in names:
            if not isinstance(name, str) or not VM_NAME.match(name):
                raise TopologyError(f"bad VM name {name!r}: use letters, digits, '-', '_' and '.'")
        if len(set(names)) != len(names):
            raise TopologyError(f"VM names must be unique, got {', '.join(names)}")
        self.vm_names: tuple[str, ...] = names
        self.topology = topology

    def check(self, vm: str | None) -> None:
        """KeyError naming the VMs when ``vm`` (None: the first VM) is not simulated here."""
        if vm is not None and vm not in self.vm_names:
            raise KeyError(f"no VM named {vm!r} here (VMs: {', '.join(self.vm_names)})")

    def view(self, vm: str | None, events: list[dict[str, Any]],
             incarnation: int) -> tuple[Sequence[Mapping[str, Any]], int]:
        """(the events ``vm`` sees, the DocumentIncarnation it is shown); under the engine's lock."""
        if self.topology is None:
            return events, incarnation
        return self.topology.view(vm or self.vm_names[0], events)

    @property
    def sees(self) -> Callable[[str, Sequence[str]], bool] | None:
        """Whether a VM sees an event for some Resources; None when every VM sees every event."""
        return None if self.topology is None else self.topology.sees


def _group(section: str, item: Mapping[str, Any], spot: str) -> tuple[Group, dict[str, dict[str, Any]]]:
    name = item.get("name")
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise TopologyError(f"{spot}.name: give a name of letters, digits, '-', '_' and '.'")
    scale_set = section == "scale_sets"
    names = _vm_names(item.get("vms"), name, "_" if scale_set else "-", f"{spot}.vms")
    fds = _count(item.get("fault_domains", 1 if scale_set else 2), f"{spot}.fault_domains", 1, 20)
    uds = _count(item.get("update_domains", 5), f"{spot}.update_domains", 1, 20)
    zones = item.get("zones", [])
    if not isinstance(zones, list) or not all(isinstance(z, str) and z for z in zones):
        raise TopologyError(f"{spot}.zones: must be a list of zone names, e.g. [\"1\", \"2\"]")
    tags = _tags(item, spot)
    agentless = item.get("agentless", [])
    if not isinstance(agentless, list) or not all(isinstance(v, str) and v in names for v in agentless):
        raise TopologyError(f"{spot}.agentless: must be a list of this group's VM names")
    orchestration = item.get("orchestration", "uniform") if scale_set else ""
    if scale_set and orchestration not in ORCHESTRATIONS:
        raise TopologyError(f"{spot}.orchestration: must be one of {', '.join(ORCHESTRATIONS)}")
    placed: dict[str, dict[str, Any]] = {}
    for i, vm in enumerate(names):
        compute: dict[str, Any] = {
            "platformFaultDomain": str(i % fds),
            "platformUpdateDomain": str(i % uds),
            "zone": zones[i % len(zones)] if zones else "",
            "vmScaleSetName": name if scale_set else "",
            "placementGroupId": str(uuid.uuid5(_NAMESPACE, f"placement:{name}")) if scale_set else "",
            **_tag_fields(tags), **_subscription(item, spot),
        }
        if orchestration == "uniform":
            sub = compute.get("subscriptionId", DEFAULT_SUBSCRIPTION_ID)
            compute["resourceId"] = (
                f"/subscriptions/{sub}/resourceGroups/{DEFAULT_RESOURCE_GROUP}/providers/"
                f"Microsoft.Compute/virtualMachineScaleSets/{name}/virtualMachines/{i}")
        placed[vm] = compute
    kind = SCALE_SET if scale_set else AVAILABILITY_SET
    return Group(name, kind, names, frozenset(agentless), orchestration), placed


def _standalone(item: Mapping[str, Any], spot: str) -> tuple[Group, dict[str, dict[str, Any]]]:
    """One VM in no availability set or scale set (``[[standalone]]``): a group of its own."""
    name = item.get("name")
    if not isinstance(name, str) or not VM_NAME.match(name):
        raise TopologyError(f"{spot}.name: give a VM name of letters, digits, '-', '_' and '.'")
    zone = item.get("zone", "")
    if not isinstance(zone, str):
        raise TopologyError(f"{spot}.zone: must be a zone name, e.g. \"1\"")
    agentless = item.get("agentless", False)
    if not isinstance(agentless, bool):
        raise TopologyError(f"{spot}.agentless: must be true or false")
    tags = _tags(item, spot)
    compute = {"platformFaultDomain": "0", "platformUpdateDomain": "0", "zone": zone, "vmScaleSetName": "",
               "placementGroupId": "", **_tag_fields(tags), **_subscription(item, spot)}
    return Group(name, STANDALONE, (name,), frozenset((name,) if agentless else ())), {name: compute}


def _tags(item: Mapping[str, Any], spot: str) -> Mapping[str, str]:
    tags = item.get("tags", {})
    if not isinstance(tags, Mapping) or not all(isinstance(v, str) for v in tags.values()):
        raise TopologyError(f"{spot}.tags: must be a table of strings")
    return tags


def _subscription(item: Mapping[str, Any], spot: str) -> dict[str, Any]:
    """``subscriptionId`` for the group's VMs when it names one (``subscription``)."""
    if "subscription" not in item:
        return {}
    try:
        return {"subscriptionId": str(uuid.UUID(str(item["subscription"])))}
    except ValueError:
        raise TopologyError(f"{spot}.subscription: {str(item['subscription'])[:60]!r} is not a subscription "
                            "id (a GUID)") from None


def _tag_fields(tags: Mapping[str, str]) -> dict[str, Any]:
    return {"tags": ";".join(f"{k}:{v}" for k, v in tags.items()),
            "tagsList": [{"name": k, "value": v} for k, v in tags.items()]}


def _vm_names(value: Any, group: str, sep: str, where: str) -> tuple[str, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return tuple(f"{group}{sep}{i}" for i in range(_count(value, where, 1, 1000)))
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        if len(set(value)) != len(value):
            raise TopologyError(f"{where}: a VM name is given twice")
        return tuple(value)
    raise TopologyError(f"{where}: give a number of VMs or a list of their names")


def _count(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TopologyError(f"{where}: must be a whole number from {low} to {high}")
    return value
