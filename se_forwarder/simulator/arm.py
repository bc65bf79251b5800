"""The subset of Azure Resource Manager a coordinator uses, over HTTPS with a test CA.

Routes (paths are case-insensitive, as in ARM; every request needs ``Authorization: Bearer
<token>`` and an ``api-version`` the route knows)::

    POST /providers/Microsoft.ResourceGraph/resources                   Resource Graph query
    POST /subscriptions/{s}/resourcegroups/{rg}/providers/Microsoft.Compute/{type}/{name}
         /providers/Microsoft.Maintenance/scheduledevents/{EventId}/acknowledge
    POST .../providers/Microsoft.Maintenance/scheduledevents            {"value": [EventIds]}
    GET  /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}
         /instanceView                                                  fault and update domain
    GET  .../virtualMachineScaleSets/{set}/virtualMachines/{instanceId}/instanceView

An acknowledge starts the event exactly as a StartRequests from one of its VMs does (through the
engine, recorded in ``sim.approvals()`` with ``via: "arm"``), and answers ``{"value":
"Successfully Approved"}``; the list variant (``AcknowledgeList``, api-version 2025-10-01-preview
and later) does so for every EventId of its body, or for none when one of them is not the
resource's. Refusals are ARM's ``{"error": {"code", "message"}}``: 401 without the test token
(``WWW-Authenticate: Bearer``), 403 ``AuthorizationFailed`` when the principal lacks the role
(``roles``; ``give_back`` restores a role later, as an assignment reaches ARM minutes after it is
made), 404 for an event that is not (or no longer) the resource's, 429 with ``Retry-After`` and
401/403/5xx on request (``faults``, ``arm_faults.py``: a 403 there may be a policy's
``RequestDisallowedByPolicy``). Resource Graph answers carry ``x-ms-user-quota-remaining`` and
``x-ms-user-quota-resets-after``. The request log (``requests()``) keeps each request's status, the
error code of a refusal and, for an acknowledge, the EventIds it named.
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from se_forwarder.simulator import resource_graph
from se_forwarder.simulator.arm_faults import FaultBook, Reply, error, forbidden
from se_forwarder.simulator.azure_fleet import AzureFleet
from se_forwarder.simulator.azure_ledger import AzureLedger
from se_forwarder.timestamps import rfc3339

ACK_VERSIONS = ("2023-10-01-preview", "2025-10-01-preview", "2025-11-01", "2026-02-01-preview")
#: AcknowledgeList (``{"value": [EventIds]}``) is not in 2023-10-01-preview.
LIST_ACK_VERSIONS = ACK_VERSIONS[1:]
COMPUTE_VERSIONS = ("2023-09-01", "2024-03-01", "2024-07-01", "2024-11-01", "2025-04-01", "2025-11-01")
QUOTA_WINDOW = 5.0
_COMPUTE = r"/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute"
_PATTERNS = [
    ("query", "POST", re.compile(r"/providers/microsoft\.resourcegraph/resources", re.I)),
    (
        "acknowledge",
        "POST",
        re.compile(
            _COMPUTE + r"/(?P<kind>[^/]+)/(?P<name>[^/]+)/providers/"
            r"microsoft\.maintenance/scheduledevents/(?P<event>[^/]+)/acknowledge",
            re.I,
        ),
    ),
    (
        "acknowledge",
        "POST",
        re.compile(
            _COMPUTE + r"/(?P<kind>[^/]+)/(?P<name>[^/]+)/providers/"
            r"microsoft\.maintenance/scheduledevents",
            re.I,
        ),
    ),
    ("instance_view", "GET", re.compile(_COMPUTE + r"/virtualmachines/(?P<vm>[^/]+)/instanceview", re.I)),
    (
        "instance_view",
        "GET",
        re.compile(
            _COMPUTE + r"/virtualmachinescalesets/(?P<set>[^/]+)/virtualmachines/"
            r"(?P<instance>[^/]+)/instanceview",
            re.I,
        ),
    ),
]

Approve = Callable[[str, str, str], None]  # (EventId, voting VM, client)


class ArmApi:
    """What the simulated ARM answers (module docstring); HTTP-free, so tests can call it too."""

    def __init__(
        self,
        fleet: AzureFleet,
        ledger: AzureLedger,
        approve: Approve,
        token: str,
        principal: str = "00000000-0000-0000-0000-00000000c0de",
        tables: Callable[[str], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.fleet, self.ledger, self._approve = fleet, ledger, approve
        self.tables = tables or (lambda name: resource_graph.table(name, fleet, ledger))
        self.token, self.principal = token, principal
        self.roles = {"query": True, "acknowledge": True, "instance_view": True}
        self._given_back: dict[str, float] = {}  # route -> when its role comes back (monotonic)
        self.arg_quota = 0  # queries per 5 s window per principal; 0: not enforced
        self.faults = FaultBook()
        self._window: collections.deque[float] = collections.deque()
        self._requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=10_000)
        self._lock = threading.Lock()

    # -- faults, roles, request log -------------------------------------------------------------

    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._requests]

    def give_back(self, routes: list[str], after: float | None) -> None:
        """The roles of ``routes`` come back ``after`` seconds from now (a role assignment that
        takes a while to reach ARM); None: not by themselves."""
        with self._lock:
            for route in routes:
                if after is None:
                    self._given_back.pop(route, None)
                else:
                    self._given_back[route] = time.monotonic() + after

    def roles_back_in(self) -> dict[str, float]:
        """Route -> seconds until its role comes back, for the roles still away."""
        self._restore_roles()
        now = time.monotonic()
        with self._lock:
            return {route: round(when - now, 3) for route, when in self._given_back.items()}

    def _restore_roles(self) -> None:
        now = time.monotonic()
        with self._lock:
            for route in [r for r, when in self._given_back.items() if when <= now]:
                self.roles[route] = True
                del self._given_back[route]

    # -- one request ------------------------------------------------------------------------------

    def handle(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
        client: str,
    ) -> Reply:
        entry: dict[str, Any] = {
            "time": rfc3339(time.time(), milliseconds=True),
            "client": client,
            "method": method,
            "path": path,
            "api_version": query.get("api-version"),
            "route": None,
            "status": None,
            "fault": None,
        }
        reply = self._answer(entry, method, path, query, headers, body, client)
        entry["status"] = reply[0]
        error = reply[2].get("error") if isinstance(reply[2], dict) else None
        entry["code"] = error.get("code") if isinstance(error, dict) else None
        with self._lock:
            self._requests.append(entry)
        return reply

    def _answer(self, entry: dict[str, Any], method: str, path: str, query: Mapping[str, str],
                headers: Mapping[str, str], body: bytes, client: str) -> Reply:
        """The reply to one request (``handle``); the route found is noted in its log ``entry``."""
        match = next(
            ((r, m) for r, verb, p in _PATTERNS if verb == method and (m := p.fullmatch(path.rstrip("/")))),
            None,
        )
        if match is None:
            return error(404, "NotFound", f"No route for {method} {path} on the simulated ARM.")
        route, found = match
        entry["route"] = route
        if route == "acknowledge":
            entry["event_ids"] = _named(found, body)
        auth = headers.get("authorization") or ""
        if not auth.startswith("Bearer "):
            return error(
                401,
                "AuthenticationFailed",
                "Authentication failed. The 'Authorization' header is missing.",
                {"WWW-Authenticate": 'Bearer authorization_uri="https://login.microsoftonline.com/"'},
            )
        if auth[len("Bearer ") :].strip() != self.token:
            return error(
                401,
                "InvalidAuthenticationToken",
                "The access token is invalid.",
                {
                    "WWW-Authenticate": 'Bearer authorization_uri="https://login.microsoftonline.com/", '
                    'error="invalid_token", error_description="The access token is invalid."'
                },
            )
        known = {
            "query": resource_graph.API_VERSIONS,
            "acknowledge": ACK_VERSIONS if found.groupdict().get("event") else LIST_ACK_VERSIONS,
            "instance_view": COMPUTE_VERSIONS,
        }[route]
        if query.get("api-version") not in known:
            return error(
                400,
                "InvalidApiVersionParameter",
                f"The api-version '{query.get('api-version')}' is invalid. Supported: {', '.join(known)}.",
            )
        fault = self.faults.take(route)
        if fault is not None:
            entry["fault"] = fault.status
            return fault.reply(self.principal, route, path)
        self._restore_roles()
        if not self.roles.get(route, True):
            return forbidden(self.principal, route, path)
        if route == "query":
            return self._query(body)
        if route == "acknowledge":
            return self._acknowledge(found, body, client)
        return self._instance_view(found)

    # -- Resource Graph ----------------------------------------------------------------------------

    def _quota(self) -> tuple[bool, dict[str, str]]:
        now = time.monotonic()
        with self._lock:
            while self._window and self._window[0] <= now - QUOTA_WINDOW:
                self._window.popleft()
            limit = self.arg_quota or 15
            allowed = not self.arg_quota or len(self._window) < limit
            if allowed:
                self._window.append(now)
            resets = QUOTA_WINDOW - (now - self._window[0]) if self._window else QUOTA_WINDOW
            remaining = max(0, limit - len(self._window)) if self.arg_quota else limit
        stamp = time.strftime("%H:%M:%S", time.gmtime(max(1, round(resets))))
        return allowed, {"x-ms-user-quota-remaining": str(remaining), "x-ms-user-quota-resets-after": stamp}

    def _query(self, body: bytes) -> Reply:
        allowed, headers = self._quota()
        if not allowed:
            retry = str(int(headers["x-ms-user-quota-resets-after"].split(":")[-1]) or 1)
            return error(
                429,
                "RateLimiting",
                "Too many requests: the user quota is used up.",
                {**headers, "Retry-After": retry},
            )
        try:
            request = json.loads(body.decode("utf-8") or "null")
            answer = resource_graph.query(
                request,
                self.tables,
                self.fleet.subscription,
            )
        except (UnicodeDecodeError, json.JSONDecodeError):
            return error(400, "InvalidRequestContent", "The request body is not JSON.", headers)
        except resource_graph.QueryError as exc:
            return (
                400,
                headers,
                {
                    "error": {
                        "code": "BadRequest",
                        "message": str(exc),
                        "details": [{"code": exc.code, "message": str(exc)}],
                    }
                },
            )
        return 200, headers, answer

    # -- acknowledge ---------------------------------------------------------------------------------

    def _acknowledge(self, found: re.Match[str], body: bytes, client: str) -> Reply:
        scope = (
            f"/subscriptions/{found['sub']}/resourcegroups/{found['rg']}/providers/microsoft.compute/"
            f"{found['kind']}/{found['name']}"
        ).lower()
        ids: Any
        if found.groupdict().get("event"):
            ids = [found["event"]]
        else:
            try:
                data = json.loads(body.decode("utf-8") or "null")
            except (UnicodeDecodeError, json.JSONDecodeError):
                return error(400, "InvalidRequestContent", "The request body is not JSON.")
            ids = data.get("value") if isinstance(data, dict) else None
            if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
                return error(
                    400, "InvalidRequestContent", 'The body must be {"value": ["<scheduled event id>", ...]}.'
                )
        voters: list[tuple[str, str]] = []
        for event_id in ids:
            record = self.ledger.get(event_id)
            resources = record.properties["Resources"] if record else []
            voter = next((vm for vm in resources if scope in self.fleet.scopes(vm)), None)
            if record is None or voter is None:
                return error(
                    404,
                    "ResourceNotFound",
                    f"Scheduled event '{event_id}' was not found under '{found['kind']}/{found['name']}'.",
                )
            if record.finished:
                return error(
                    404,
                    "ResourceNotFound",
                    f"Scheduled event '{event_id}' is {record.status} and can no longer be acknowledged.",
                )
            voters.append((record.event_id, voter))
        try:
            for event_id, voter in voters:
                self._approve(event_id, voter, client)
        except ValueError as exc:  # it left the document between the check and the approval
            return error(404, "ResourceNotFound", str(exc))
        return 200, {}, {"value": "Successfully Approved"}

    # -- instance view --------------------------------------------------------------------------------

    def _instance_view(self, found: re.Match[str]) -> Reply:
        groups = found.groupdict()
        if groups.get("vm"):
            facts = next(
                (v for v in self.fleet.vms if v.name.lower() == groups["vm"].lower() and not v.uniform), None
            )
        else:
            facts = next(
                (
                    v
                    for v in self.fleet.vms
                    if v.uniform
                    and v.instance_id == groups["instance"]
                    and (v.scale_set or "").lower().endswith("/" + groups["set"].lower())
                ),
                None,
            )
        if facts is not None and not facts.resource_id.lower().startswith(
            f"/subscriptions/{groups['sub']}/resourcegroups/{groups['rg']}/".lower()
        ):
            facts = None
        if facts is None:
            return error(404, "ResourceNotFound", "The Resource was not found.")
        return (
            200,
            {},
            {
                "platformUpdateDomain": facts.update_domain,
                "platformFaultDomain": facts.fault_domain,
                "computerName": facts.name,
                "osName": "ubuntu",
                "osVersion": "22.04",
                "statuses": [
                    {
                        "code": "ProvisioningState/succeeded",
                        "level": "Info",
                        "displayStatus": "Provisioning succeeded",
                    },
                    {"code": "PowerState/running", "level": "Info", "displayStatus": "VM running"},
                ],
            },
        )


def _named(found: re.Match[str], body: bytes) -> list[Any]:
    """The EventIds an acknowledge names (its path's, or its body's list), as sent, for the log."""
    if found.groupdict().get("event"):
        return [found["event"]]
    try:
        data = json.loads(body.decode("utf-8") or "null")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return []
    ids = data.get("value") if isinstance(data, dict) else None
    return list(ids) if isinstance(ids, list) else []
