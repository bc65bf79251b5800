"""Faults the simulator injects into IMDS answers, parsed from the control API or ``--fault``.

A fault spec is a JSON object (or the flag form ``key=value,key,...``) with one kind:

=====================  =====================================================================
``status``             answer this HTTP status (``retry_after`` adds a Retry-After header)
``delay_seconds``      answer normally, this many real seconds late (combines with the others)
``hang``               never answer: hold the connection until the client gives up
``body``               answer 200 with this text as the body (e.g. ``"not json"``)
``truncate``           announce the whole document's length, send half of it, close
``huge_body``          answer the document padded with whitespace to 10 MiB (or ``size``)
``incarnation_reset``  set DocumentIncarnation back to 1 (or the given number); not per request
=====================  =====================================================================

and optionally ``count`` (how many matching requests; default 1), ``seconds`` (instead of a count:
every matching request for that many real seconds, e.g. ``{"status": 429, "seconds": 3}`` is "429
without Retry-After for 3 s"; with ``count`` too, whichever ends first), ``route``
(``scheduledevents`` default, ``compute``, ``instance``, ``attested``, ``any``), ``vm``, ``method`` and
``after_seconds`` (armed that many real seconds after it was added).
Body faults (``body``, ``truncate``, ``huge_body``) only hit GETs: they are about documents.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from se_forwarder.errors import ConfigError

KINDS = ("status", "hang", "body", "truncate", "huge_body", "incarnation_reset")
ROUTES = ("scheduledevents", "compute", "instance", "attested", "any")
HUGE_DEFAULT = 10 * 1024 * 1024
_ALLOWED = {
    *KINDS,
    "delay_seconds",
    "count",
    "route",
    "vm",
    "method",
    "after_seconds",
    "retry_after",
    "size",
    "hang_seconds",
    "seconds",
}
UNLIMITED = 10**9  # the count of a fault limited by ``seconds`` only


class FaultError(ConfigError, ValueError):
    """A fault spec that cannot be used; the message names the offending key."""


@dataclass
class Fault:
    """One armed fault; ``remaining`` counts down as matching requests hit it."""

    kind: str
    remaining: int
    status: int | None = None
    delay_seconds: float = 0.0
    body: str | None = None
    size: int = HUGE_DEFAULT
    retry_after: str | None = None
    reset_to: int = 1
    hang_seconds: float | None = None
    route: str = "scheduledevents"
    vm: str | None = None
    method: str | None = None
    armed_at: float = 0.0
    until: float | None = None  # with ``seconds``: no request is hit from then on

    def expired(self, now: float) -> bool:
        return self.remaining <= 0 or (self.until is not None and now >= self.until)

    def matches(self, route: str, vm: str, method: str, now: float) -> bool:
        """Whether a request to ``route`` of ``vm`` with ``method`` is hit by this fault now."""
        if self.expired(now) or now < self.armed_at or self.kind == "incarnation_reset":
            return False
        if self.route != "any" and self.route != route:
            return False
        if self.vm is not None and self.vm != vm:
            return False
        if self.kind in ("body", "truncate", "huge_body") and method != "GET":
            return False
        return self.method is None or self.method == method

    def describe(self) -> dict[str, Any]:
        """A JSON-able view for ``GET /control/faults`` and the request log."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        out["armed_at"] = round(self.armed_at, 3)
        return out


def _number(spec: dict[str, Any], key: str, *, minimum: float = 0.0) -> float:
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise FaultError(f"fault {key} must be a number >= {minimum:g}, got {value!r}")
    return float(value)


def _int(spec: dict[str, Any], key: str, *, minimum: int) -> int:
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FaultError(f"fault {key} must be an integer >= {minimum}, got {value!r}")
    return value


def parse_fault(spec: Any, *, vm_names: tuple[str, ...] = (), now: float | None = None) -> Fault:
    """A Fault from its JSON form; FaultError naming the problem otherwise."""
    if not isinstance(spec, dict):
        raise FaultError('a fault must be a JSON object, e.g. {"status": 500, "count": 2}')
    unknown = sorted(set(spec) - _ALLOWED)
    if unknown:
        raise FaultError(f"unknown fault key {unknown[0]!r} (known: {', '.join(sorted(_ALLOWED))})")
    kinds = [k for k in KINDS if k in spec and spec[k] is not False]
    if len(kinds) > 1:
        raise FaultError(f"a fault has one kind, got {' and '.join(kinds)}")
    if not kinds and "delay_seconds" not in spec:
        raise FaultError(f"a fault needs one of: {', '.join(KINDS)}, delay_seconds")
    kind = kinds[0] if kinds else "delay"
    if "seconds" in spec and kind == "incarnation_reset":
        raise FaultError("an incarnation reset happens once; it takes no seconds")
    default_count = UNLIMITED if "seconds" in spec else 1
    fault = Fault(kind=kind,
                  remaining=_int(spec, "count", minimum=1) if "count" in spec else default_count)
    if "delay_seconds" in spec:
        fault.delay_seconds = _number(spec, "delay_seconds")
    if kind == "status":
        fault.status = _int(spec, "status", minimum=100)
        if fault.status > 599:
            raise FaultError(f"fault status must be an HTTP status 100-599, got {fault.status}")
    elif kind == "body":
        if not isinstance(spec["body"], str):
            raise FaultError("fault body must be a string")
        fault.body = spec["body"]
    elif kind == "huge_body":
        size = spec.get("size", spec["huge_body"])
        if size is True:
            size = HUGE_DEFAULT
        fault.size = _int({"size": size}, "size", minimum=1)
    elif kind == "incarnation_reset":
        target = spec["incarnation_reset"]
        fault.reset_to = 1 if target is True else _int(spec, "incarnation_reset", minimum=0)
    elif kind == "hang" and "hang_seconds" in spec:
        fault.hang_seconds = _number(spec, "hang_seconds")
    if "retry_after" in spec:
        fault.retry_after = str(spec["retry_after"])
    if "route" in spec:
        if spec["route"] not in ROUTES:
            raise FaultError(f"fault route must be one of {', '.join(ROUTES)}, got {spec['route']!r}")
        fault.route = spec["route"]
    if "vm" in spec:
        if vm_names and spec["vm"] not in vm_names:
            raise FaultError(f"fault vm {spec['vm']!r} is not simulated here")
        fault.vm = spec["vm"]
    if "method" in spec:
        method = str(spec["method"]).upper()
        if method not in ("GET", "POST"):
            raise FaultError(f"fault method must be GET or POST, got {spec['method']!r}")
        fault.method = method
    after = _number(spec, "after_seconds") if "after_seconds" in spec else 0.0
    fault.armed_at = (time.time() if now is None else now) + after
    if "seconds" in spec:
        fault.until = fault.armed_at + _number(spec, "seconds")
    return fault


class ArmedFaults:
    """The faults armed on a simulator, oldest first (the engine calls these under its lock)."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def arm(self, fault: Fault) -> None:
        self._faults.append(fault)

    def describe(self, now: float) -> list[dict[str, Any]]:
        """The faults still pending at ``now`` (one limited by ``seconds`` ends with them)."""
        return [f.describe() for f in self._faults if f.kind == "incarnation_reset"
                or not f.expired(now)]

    def clear(self) -> None:
        self._faults.clear()

    def due_resets(self, now: float) -> list[Fault]:
        """The incarnation resets armed by ``now``, disarmed (they apply once)."""
        due = [f for f in self._faults if f.kind == "incarnation_reset" and f.armed_at <= now]
        self._faults = [f for f in self._faults if f not in due]
        return due

    def take(self, route: str, vm: str, method: str, now: float) -> Fault | None:
        """The fault hitting this request, if any (its count goes down by one)."""
        self._faults = [f for f in self._faults if f.kind == "incarnation_reset"
                        or not f.expired(now)]  # a fault limited by seconds ran out
        for fault in self._faults:
            if fault.matches(route, vm, method, now):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None


def _flag_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_fault_flag(text: str) -> dict[str, Any]:
    """The JSON form of a ``--fault`` flag: JSON itself, or ``status=503,count=3`` / ``hang``."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            parsed: dict[str, Any] = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise FaultError(f"--fault {text!r} is not valid JSON: {exc.msg}") from exc
        return parsed
    spec: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in stripped.split(","))):
        key, sep, value = part.partition("=")
        spec[key.strip()] = _flag_value(value.strip()) if sep else True
    if not spec:
        raise FaultError("--fault needs a spec, e.g. status=503,count=3")
    return spec
