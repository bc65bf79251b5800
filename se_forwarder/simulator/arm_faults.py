"""Refusals of the simulated ARM: its error bodies, and the faults a test asks for.

A fault spec (``POST /control/arm/faults``, ``ArmApi.faults.add``)::

    {"status": 429, "retry_after": "1", "count": 2, "route": "query"}
    {"status": 403, "code": "RequestDisallowedByPolicy", "policy": "No early maintenance",
     "route": "acknowledge", "seconds": 60}

``status``: any HTTP error (401, 403 and 429 answer as ARM does: ``InvalidAuthenticationToken``,
``AuthorizationFailed``, ``RateLimiting``); ``count`` (default 1) or ``seconds`` (every matching
request for that long); ``route``: ``query``, ``acknowledge``, ``instance_view`` or ``any``;
``retry_after`` adds a ``Retry-After`` header. Errors are ARM's ``{"error": {"code", "message"}}``.

A 403 is one of two refusals (``code``): ``AuthorizationFailed`` (the default: the principal lacks
the role) or ``RequestDisallowedByPolicy`` (an Azure Policy assignment denies the request, whatever
the role), which ARM words as for a deployment a policy refuses: ``error.target`` (the resource's
name), a message naming the policy assignment and definition, and ``error.additionalInfo`` holding
one ``{"type": "PolicyViolation", "info": {...}}`` with the policy's ``policyDefinitionDisplayName``,
``policyDefinitionId``, ``policyDefinitionName``, ``policyDefinitionEffect`` (``deny``) and its
assignment's ``policyAssignmentDisplayName``, ``policyAssignmentId``, ``policyAssignmentName`` and
``policyAssignmentScope`` (Microsoft's "Resolve errors for request disallowed by policy"). ``policy``
names the policy (default ``DEFAULT_POLICY``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ROUTES = ("query", "acknowledge", "instance_view", "any")
FORBIDDEN_CODES = ("AuthorizationFailed", "RequestDisallowedByPolicy")
DEFAULT_POLICY = "Deny early approval of maintenance"
POLICY_ID = "5e1f0c3d-7a4b-4c2e-9d8f-00000000c0de"  # the simulated policy's definition and assignment
_SUBSCRIPTION = re.compile(r"^/subscriptions/([^/]+)", re.I)
_RESOURCE = re.compile(r"/providers/microsoft\.compute/[^/]+/([^/]+)", re.I)
#: The action a 403 names (the acknowledge action's name is the simulator's: see docs/azure-feed.md).
ACTIONS = {
    "query": "Microsoft.ResourceGraph/resources/read",
    "acknowledge": "Microsoft.Maintenance/scheduledevents/acknowledge/action",
    "instance_view": "Microsoft.Compute/virtualMachines/instanceView/read",
}
Reply = tuple[int, dict[str, str], Any]


def error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> Reply:
    return status, dict(headers or {}), {"error": {"code": code, "message": message}}


def forbidden(principal: str, route: str, path: str) -> Reply:
    return error(
        403,
        "AuthorizationFailed",
        f"The client '{principal}' with object id '{principal}' does not have authorization "
        f"to perform action '{ACTIONS[route]}' over scope '{path}' or the scope is invalid.",
    )


def disallowed_by_policy(route: str, path: str, policy: str) -> Reply:
    """ARM's 403 ``RequestDisallowedByPolicy`` for a request to ``path`` (module docstring)."""
    sub = _SUBSCRIPTION.match(path)
    scope = f"/subscriptions/{sub[1] if sub else POLICY_ID}"
    definition = f"{scope}/providers/Microsoft.Authorization/policyDefinitions/{POLICY_ID}"
    assignment = f"{scope}/providers/Microsoft.Authorization/policyAssignments/{POLICY_ID}"
    resource = _RESOURCE.search(path)
    identifiers = json.dumps([{"policyAssignment": {"name": policy, "id": assignment},
                               "policyDefinition": {"name": policy, "id": definition}}],
                             separators=(",", ":"))
    info = {
        "policyDefinitionId": definition, "policyDefinitionName": POLICY_ID,
        "policyDefinitionDisplayName": policy, "policyDefinitionEffect": "deny",
        "policyAssignmentId": assignment, "policyAssignmentName": POLICY_ID,
        "policyAssignmentDisplayName": policy, "policyAssignmentScope": scope,
        "policyAssignmentParameters": {}, "policyExemptionIds": [], "policyEnrollmentIds": [],
    }
    return 403, {}, {"error": {
        "code": "RequestDisallowedByPolicy",
        "target": resource[1] if resource else path.rstrip("/").rsplit("/", 1)[-1],
        "message": f"The resource action '{ACTIONS[route]}' is disallowed by one or more policies. "
                   f"Policy identifier(s): '{identifiers}'.",
        "additionalInfo": [{"type": "PolicyViolation", "info": info}],
    }}


@dataclass
class ArmFault:
    status: int
    remaining: int
    route: str = "any"
    retry_after: str | None = None
    until: float | None = None
    code: str = "AuthorizationFailed"  # a 403's (FORBIDDEN_CODES)
    policy: str = DEFAULT_POLICY

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "count": self.remaining,
            "route": self.route,
            "retry_after": self.retry_after,
        }
        if self.status == 403:
            out["code"] = self.code
            if self.code == "RequestDisallowedByPolicy":
                out["policy"] = self.policy
        return out

    def reply(self, principal: str, route: str, path: str) -> Reply:
        headers = {"Retry-After": self.retry_after} if self.retry_after else {}
        if self.status == 401:
            return error(
                401,
                "InvalidAuthenticationToken",
                "The access token is invalid.",
                {**headers, "WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        if self.status == 403:
            concrete = "acknowledge" if route == "any" else route
            status, extra, data = (disallowed_by_policy(concrete, path, self.policy)
                                   if self.code == "RequestDisallowedByPolicy"
                                   else forbidden(principal, concrete, path))
            return status, {**headers, **extra}, data
        if self.status == 429:
            return error(
                429,
                "RateLimiting",
                "Too many requests. Please retry after the time given in Retry-After.",
                headers,
            )
        return error(self.status, "SimulatedFault", f"Simulated fault: HTTP {self.status}", headers)


def parse_fault(spec: Any, now: float) -> ArmFault:
    """An ``ArmFault`` from a spec (module docstring); ValueError naming a bad key."""
    if not isinstance(spec, dict):
        raise ValueError('an ARM fault is a JSON object, e.g. {"status": 429, "retry_after": "1"}')
    keys = ("status", "count", "route", "retry_after", "seconds", "code", "policy")
    unknown = sorted(set(spec) - set(keys))
    if unknown:
        raise ValueError(f"unknown ARM fault key {unknown[0]!r} ({', '.join(keys)})")
    status, count, route = spec.get("status"), spec.get("count", 1), spec.get("route", "any")
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        raise ValueError("status must be an HTTP error status from 400 to 599")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError("count must be a whole number >= 1")
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)}")
    retry_after, seconds = spec.get("retry_after"), spec.get("seconds")
    if retry_after is not None and not (isinstance(retry_after, str | int) and str(retry_after).isdigit()):
        raise ValueError("retry_after must be a whole number of seconds")
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0
    ):
        raise ValueError("seconds must be a number > 0")
    code, policy = spec.get("code", "AuthorizationFailed"), spec.get("policy", DEFAULT_POLICY)
    if ("code" in spec or "policy" in spec) and status != 403:
        raise ValueError("code and policy apply to status 403 only")
    if code not in FORBIDDEN_CODES:
        raise ValueError(f"code must be one of {', '.join(FORBIDDEN_CODES)}")
    if "policy" in spec and (code != "RequestDisallowedByPolicy" or not isinstance(policy, str)
                             or not policy.strip()):
        raise ValueError('policy (a non-empty name) goes with code "RequestDisallowedByPolicy"')
    return ArmFault(
        status,
        10**9 if seconds and "count" not in spec else count,
        route,
        None if retry_after is None else str(retry_after),
        None if seconds is None else now + seconds,
        code,
        policy.strip(),
    )


class FaultBook:
    """The armed ARM faults; ``take(route)`` hands out the next one hitting a request."""

    def __init__(self) -> None:
        self._faults: list[ArmFault] = []
        self._lock = threading.Lock()

    def add(self, spec: Any) -> dict[str, Any]:
        fault = parse_fault(spec, time.monotonic())
        with self._lock:
            self._faults.append(fault)
        return fault.describe()

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [f.describe() for f in self._faults]

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, route: str) -> ArmFault | None:
        now = time.monotonic()
        with self._lock:
            self._faults = [f for f in self._faults if f.remaining > 0 and (f.until is None or now < f.until)]
            fault = next((f for f in self._faults if f.route in ("any", route)), None)
            if fault is not None:
                fault.remaining -= 1
            return fault
