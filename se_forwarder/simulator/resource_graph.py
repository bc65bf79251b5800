"""The simulated Azure Resource Graph: its tables' rows and one query with paging.

``POST /providers/Microsoft.ResourceGraph/resources?api-version=2021-03-01`` takes a
``QueryRequest`` (``subscriptions``, ``managementGroups``, ``query``, ``options`` with ``$top``,
``$skip``, ``$skipToken``, ``resultFormat``) and answers a ``QueryResponse`` (``totalRecords``,
``count``, ``resultTruncated``, ``$skipToken``, ``data``, ``facets``) as documented
(``docs/azure-feed.md``). A page holds at most ``$top`` rows (default and maximum 1000). The
``$skipToken`` of a truncated answer gives the next page of the same query; as in Azure, only a
query whose rows keep their ``id`` column gets one.

Tables (rows shaped as Resource Graph shows them):

- ``maintenanceresources``: the latest state of every scheduled event (``azure_ledger.py``);
- ``resources``: the VMs of availability sets and flexible scale sets
  (``microsoft.compute/virtualmachines``), the availability sets and the scale sets (each with
  the opt-in ``scheduledEventsPolicy`` of ``OPTED_IN``: the simulator plays every VM's events to
  Azure's side);
- ``computeresources``: the VMs of uniform scale sets
  (``microsoft.compute/virtualmachinescalesets/virtualmachines``).

Resource Graph has no fault or update domain for these VMs: ARM's instance view has them
(``arm.py`` serves it).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from se_forwarder.simulator import kql
from se_forwarder.simulator.azure_fleet import AzureFleet, VmFacts, group_id
from se_forwarder.simulator.azure_ledger import AzureLedger

API_VERSIONS = ("2019-04-01", "2020-04-01-preview", "2021-03-01", "2022-10-01", "2024-04-01")
MAX_TOP = 1000
OPTED_IN = {"scheduledEventsAdditionalPublishingTargets": {
    "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": "2020-07-01"}}}


class QueryError(ValueError):
    """A request Resource Graph answers with 400; ``code`` is ARM's error code."""

    def __init__(self, message: str, code: str = "BadRequest") -> None:
        super().__init__(message)
        self.code = code


def vm_row(fleet: AzureFleet, vm: VmFacts) -> dict[str, Any]:
    """A VM's row: ``resources`` (availability set, flexible scale set) or ``computeresources``."""
    uniform = vm.uniform
    kind = (
        "microsoft.compute/virtualmachinescalesets/virtualmachines"
        if uniform
        else "microsoft.compute/virtualmachines"
    )
    row = fleet.row(vm.resource_id, vm.instance_id if uniform and vm.instance_id else vm.name, kind)
    props: dict[str, Any] = {
        "vmId": vm.vm_id,
        "provisioningState": "Succeeded",
        "hardwareProfile": {"vmSize": "Standard_D2s_v5"},
        "osProfile": {"computerName": vm.name},
        "extended": {
            "instanceView": {"powerState": {"code": "PowerState/running", "displayStatus": "VM running"}}
        },
    }
    if vm.availability_set:
        props["availabilitySet"] = {"id": vm.availability_set}
    if vm.scale_set and not uniform:
        props["virtualMachineScaleSet"] = {"id": vm.scale_set}
        props["platformFaultDomain"] = vm.fault_domain  # set on a flexible scale set's VMs
    if uniform:
        props["instanceId"] = vm.instance_id
        row["managedBy"] = vm.scale_set or ""
    row.update(properties=props, tags=dict(vm.tags), zones=[vm.zone] if vm.zone else None)
    return row


def group_rows(fleet: AzureFleet) -> list[dict[str, Any]]:
    """The availability sets and scale sets, as ``resources`` rows."""
    rows: dict[str, dict[str, Any]] = {}
    for vm in fleet.vms:
        gid = vm.scale_set or vm.availability_set
        if gid is None or gid in rows:
            continue
        name = gid.rsplit("/", 1)[-1]
        if vm.scale_set:
            row = fleet.row(gid, name, "microsoft.compute/virtualmachinescalesets")
            mode = "Uniform" if vm.uniform else "Flexible"
            row["properties"] = {"orchestrationMode": mode, "provisioningState": "Succeeded",
                                 "scheduledEventsPolicy": OPTED_IN}
        else:
            row = fleet.row(group_id("availability-set", name), name, "microsoft.compute/availabilitysets")
            members = [v for v in fleet.vms if v.availability_set == gid]
            row["properties"] = {
                "platformFaultDomainCount": 1 + max(v.fault_domain for v in members),
                "platformUpdateDomainCount": 1 + max(v.update_domain for v in members),
                "virtualMachines": [{"id": v.resource_id} for v in members],
                "scheduledEventsPolicy": OPTED_IN,
            }
        rows[gid] = row
    return list(rows.values())


def table(name: str, fleet: AzureFleet, ledger: AzureLedger) -> list[dict[str, Any]]:
    """Every row of table ``name`` (one of ``kql.TABLES``)."""
    if name == "maintenanceresources":
        return [ledger.row(r) for r in ledger.records()]
    if name == "computeresources":
        return [vm_row(fleet, vm) for vm in fleet.vms if vm.uniform]
    return [vm_row(fleet, vm) for vm in fleet.vms if not vm.uniform] + group_rows(fleet)


def _token(offset: int, digest: str) -> str:
    raw = json.dumps({"offset": offset, "query": digest}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _offset(token: str, digest: str) -> int:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        offset = int(data["offset"])
        same = data["query"] == digest
    except (ValueError, TypeError, KeyError):
        raise QueryError("The $skipToken is not valid.", "InvalidSkipToken") from None
    if not same or offset < 0:
        raise QueryError("The $skipToken belongs to another query.", "InvalidSkipToken")
    return offset


def _int_option(options: Mapping[str, Any], key: str, default: int, high: int | None = None) -> int:
    value = options.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (high and value > high):
        raise QueryError(
            f"options.{key} must be a whole number from 0 to {high or 'any'}", "InvalidQueryOptions"
        )
    return value


def query(request: Any, rows_of: Callable[[str], list[dict[str, Any]]], subscription: str) -> dict[str, Any]:
    """Answer one ``QueryRequest`` (module docstring); QueryError for a bad one."""
    if not isinstance(request, dict) or not isinstance(request.get("query"), str):
        raise QueryError("The request body needs a query string.", "InvalidRequestContent")
    subs = request.get("subscriptions")
    if subs is not None and (not isinstance(subs, list) or not all(isinstance(s, str) for s in subs)):
        raise QueryError("subscriptions must be a list of subscription ids.", "InvalidRequestContent")
    options = request.get("options") or {}
    if not isinstance(options, dict):
        raise QueryError("options must be an object.", "InvalidRequestContent")
    try:
        parsed = kql.parse(request["query"])
    except kql.KqlError as exc:
        raise QueryError(f"Query is invalid. {exc}", "InvalidQuery") from None
    fmt = options.get("resultFormat") or "objectArray"
    if fmt not in ("objectArray", "table"):
        raise QueryError("options.resultFormat must be objectArray or table.", "InvalidQueryOptions")
    top = _int_option(options, "$top", MAX_TOP, MAX_TOP)
    skip = _int_option(options, "$skip", 0)
    digest = hashlib.sha256(json.dumps([request["query"], sorted(subs or [])]).encode()).hexdigest()[:16]
    token = options.get("$skipToken")
    start = _offset(token, digest) if token else skip
    rows = rows_of(parsed.table)
    if subs is not None:
        wanted = {s.lower() for s in subs}
        rows = [r for r in rows if str(r.get("subscriptionId", subscription)).lower() in wanted]
    matched = kql.run(parsed, rows)
    page = matched[start : start + top]
    more = start + len(page) < len(matched)
    answer: dict[str, Any] = {
        "totalRecords": len(matched),
        "count": len(page),
        "resultTruncated": "true" if more else "false",
        "facets": [],
    }
    if more and page and all("id" in r for r in page):
        answer["$skipToken"] = _token(start + len(page), digest)
        answer["resultTruncated"] = "false"
    answer["data"] = _table(page) if fmt == "table" else page
    return answer


def _table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]

    def kind(name: str) -> str:
        value = next((r[name] for r in rows if r.get(name) is not None), None)
        return "string" if isinstance(value, str) else "object" if value is not None else "string"

    return {
        "columns": [{"name": c, "type": kind(c)} for c in columns],
        "rows": [[r.get(c) for c in columns] for r in rows],
    }
