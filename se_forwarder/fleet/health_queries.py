"""Resource Graph queries for Azure's word on the fleet's health: each VM's Resource Health and the
fired Azure Monitor alerts. Text only (no client, no Azure SDK), for the coordinator's catch-up and
alert gates; ``tests/simulator/test_azure_health.py`` runs each against the simulator's Resource
Graph.

- ``AVAILABILITY``: one row per VM or scale-set VM (``healthresources``, type
  ``microsoft.resourcehealth/availabilitystatuses``), whatever its state, so that ``Available``
  frees a VM as ``Unavailable`` or ``Degraded`` counts it down. A row's ``properties`` hold
  ``targetResourceId`` (the VM's ARM id; compare it case-insensitively), ``targetResourceType``,
  ``availabilityState`` (``Available``, ``Unavailable``, ``Degraded``, ``Unknown``),
  ``previousAvailabilityState`` and ``occurredTime`` (Resource Health's own API spells it
  ``occuredTime``: read both).
- ``fired_alerts(...)``: the alerts whose ``properties.essentials.monitorCondition`` is ``Fired``
  and that nobody closed (``alertState`` not ``Closed``), optionally only some severities, some
  alert rules, or targets under one ARM scope. ``FIRED_ALERTS`` is it without filters.

Both keep ``id``, without which Resource Graph gives no ``$skipToken`` for the next page.
"""

from __future__ import annotations

from collections.abc import Sequence

VM_TYPES = ("microsoft.compute/virtualmachines", "microsoft.compute/virtualmachinescalesets/virtualmachines")
SEVERITIES = ("Sev0", "Sev1", "Sev2", "Sev3", "Sev4")
COLUMNS = "project id, name, type, subscriptionId, resourceGroup, properties"

AVAILABILITY = (
    "healthresources | where type =~ 'microsoft.resourcehealth/availabilitystatuses' "
    f"| where tostring(properties.targetResourceType) in~ ({', '.join(map(repr, VM_TYPES))}) "
    f"| {COLUMNS}"
)


def kql_string(value: str) -> str:
    """``value`` as a single-quoted KQL string literal (backslashes and quotes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fired_alerts(severities: Sequence[str] = (), rules: Sequence[str] = (),
                 scope: str | None = None) -> str:
    """The query for fired, not closed alerts; ``severities`` (``Sev0``..``Sev4``), alert rule
    ``rules`` (names, any case) and an ARM ``scope`` (a subscription, resource group or resource
    id the target is under) narrow it. ValueError for a severity that is not one."""
    bad = [s for s in severities if s not in SEVERITIES]
    if bad:
        raise ValueError(f"{bad[0]!r} is not an alert severity ({', '.join(SEVERITIES)})")
    parts = [
        "alertsmanagementresources | where type =~ 'microsoft.alertsmanagement/alerts'",
        "where tostring(properties.essentials.monitorCondition) == 'Fired' "
        "and tostring(properties.essentials.alertState) != 'Closed'",
    ]
    if severities:
        parts.append(f"where tostring(properties.essentials.severity) in "
                     f"({', '.join(kql_string(s) for s in severities)})")
    if rules:
        parts.append(f"where name in~ ({', '.join(kql_string(r) for r in rules)})")
    if scope:
        target, under = "tolower(tostring(properties.essentials.targetResource))", scope.rstrip("/").lower()
        parts.append(f"where {target} == {kql_string(under)} "
                     f"or {target} startswith {kql_string(under + '/')}")
    return " | ".join([*parts, COLUMNS])


FIRED_ALERTS = fired_alerts()
