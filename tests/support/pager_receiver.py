"""Local stand-ins for PagerDuty's Events API v2 and Opsgenie's Alert API, over real HTTP.

Neither service can run here, so these play their side as their references document it, and
check every request against the documented schema before answering:

- ``PagerDutyReceiver``: ``POST /v2/enqueue``; ``routing_key`` (the integration's 32 letters and
  digits, and the one this service was given), ``event_action`` (trigger, acknowledge, resolve),
  ``dedup_key`` (at most 255 characters), and for a trigger ``payload`` with ``summary`` (at most
  1024), ``source``, ``severity`` (critical, error, warning, info) and the optional ``timestamp``
  (ISO 8601), ``component``, ``group``, ``class``, ``custom_details`` (an object); top level
  ``images``, ``links``, ``client``, ``client_url``. Nothing else. Answers ``202`` with
  ``{"status": "success", "message": "Event processed", "dedup_key": ...}``; an invalid event
  ``400`` ``{"status": "invalid event", "message": "Event object is invalid", "errors": [...]}``.
- ``OpsgenieReceiver``: ``POST /v2/alerts`` (create) and ``POST /v2/alerts/{alias}/close
  ?identifierType=alias``, each with ``Authorization: GenieKey <key>`` (else ``401``); the create's
  ``message`` (required, at most 130), ``alias`` (512), ``description`` (15,000), ``tags`` (at most
  20 of 50), ``details`` (string values, 8,000 in all), ``entity`` (512), ``source`` (100),
  ``priority`` (P1-P5), ``user`` (100), ``note`` (25,000), ``responders``, ``visibleTo``,
  ``actions``; the close's ``user``, ``source``, ``note``. Answers ``202`` with ``{"result":
  "Request will be processed", "took": ..., "requestId": ...}``; a body that breaks the schema
  ``422``.

Both keep what an on-call person would see: one alert per key, opened by a trigger (or create)
when none is open, folded into the open one otherwise (PagerDuty: a trigger log entry; Opsgenie:
its count), and closed by a resolve (close). ``opened[key]`` counts the alerts a key opened, so a
trigger that came after its resolve (a repeat out of order) shows as a second alert. Problems go to
``errors``; scripted replies (``script(503, ...)``) answer before the service does. PagerDuty's
``hold`` delays the answer to the next event after it took effect (a client that dies meanwhile
never learns it was accepted).
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support.receiver import Receiver, Reply, Request

PAGERDUTY_PATH = "/v2/enqueue"
OPSGENIE_CREATE = "/v2/alerts"
_CLOSE = re.compile(r"^/v2/alerts/(?P<alias>[^/]+)/close$")


def _json(reply: dict[str, Any], status: int) -> Reply:
    return Reply(status, {"Content-Type": "application/json"}, json.dumps(reply).encode())


class _AlertBook:
    """One alert per key, as the service keeps them (module docstring)."""

    def __init__(self) -> None:
        self.open: set[str] = set()
        self.opened: Counter[str] = Counter()
        self.folded: Counter[str] = Counter()  # triggers/creates added to an open alert
        self.closed: Counter[str] = Counter()
        self.unmatched: list[str] = []  # resolves/closes with no open alert
        self.states: list[tuple[str, str, str]] = []  # (key, action, the agent's State detail)

    def trigger(self, key: str, state: str) -> None:
        self.states.append((key, "trigger", state))
        if key in self.open:
            self.folded[key] += 1
        else:
            self.open.add(key)
            self.opened[key] += 1

    def resolve(self, key: str, state: str) -> None:
        self.states.append((key, "resolve", state))
        if key in self.open:
            self.open.discard(key)
            self.closed[key] += 1
        else:
            self.unmatched.append(key)

    def triggers_per_state(self) -> Counter[tuple[str, str]]:
        """How often each (key, State) was triggered, repeats included."""
        return Counter((k, s) for k, a, s in self.states if a == "trigger")


def _text_field(body: dict[str, Any], name: str, limit: int, problems: list[str], *,
                required: bool = False) -> None:
    if name not in body:
        if required:
            problems.append(f"{name} is missing")
        return
    value = body[name]
    if not isinstance(value, str) or (required and not value.strip()):
        problems.append(f"{name} is not a non-empty string: {value!r}")
    elif len(value) > limit:
        problems.append(f"{name} has {len(value)} characters, more than {limit}")


PD_TOP = {"routing_key", "event_action", "dedup_key", "payload", "images", "links", "client", "client_url"}
PD_PAYLOAD = {"summary", "source", "severity", "timestamp", "component", "group", "class", "custom_details"}
OG_CREATE = {"message", "alias", "description", "responders", "visibleTo", "actions", "tags", "details",
             "entity", "source", "priority", "user", "note"}
OG_CLOSE = {"user", "source", "note"}


def pagerduty_problems(body: Any) -> list[str]:
    """What breaks the Events API v2 schema in one event body (module docstring)."""
    if not isinstance(body, dict):
        return ["not a JSON object"]
    problems = [f"unknown field {k!r}" for k in sorted(set(body) - PD_TOP)]
    key = body.get("routing_key")
    if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z0-9]{32}", key):
        problems.append("routing_key is not 32 letters and digits")
    action = body.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        problems.append(f"event_action {action!r}")
    _text_field(body, "dedup_key", 255, problems, required=action != "trigger")
    if action == "trigger":
        problems += _payload_problems(body.get("payload"))
    elif "payload" in body:
        problems.append(f"a {action} carries a payload")
    return problems


def _payload_problems(payload: Any) -> list[str]:
    if not isinstance(payload, dict):
        return ["payload is not an object"]
    problems = [f"unknown payload field {k!r}" for k in sorted(set(payload) - PD_PAYLOAD)]
    _text_field(payload, "summary", 1024, problems, required=True)
    _text_field(payload, "source", 10_000, problems, required=True)
    if payload.get("severity") not in ("critical", "error", "warning", "info"):
        problems.append(f"severity {payload.get('severity')!r}")
    for name in ("component", "group", "class"):
        _text_field(payload, name, 10_000, problems)
    if "timestamp" in payload:
        try:
            datetime.fromisoformat(str(payload["timestamp"]).replace("Z", "+00:00"))
        except ValueError:
            problems.append(f"timestamp {payload['timestamp']!r} is not ISO 8601")
    if "custom_details" in payload and not isinstance(payload["custom_details"], dict):
        problems.append("custom_details is not an object")
    return problems


def opsgenie_problems(body: Any, closing: bool) -> list[str]:
    """What breaks the Alert API's schema in a create (or, ``closing``, a close) body."""
    if not isinstance(body, dict):
        return ["not a JSON object"]
    problems = [f"unknown field {k!r}" for k in sorted(set(body) - (OG_CLOSE if closing else OG_CREATE))]
    for name, limit in (("user", 100), ("source", 100), ("note", 25_000)):
        _text_field(body, name, limit, problems)
    if closing:
        return problems
    for name, limit, required in (("message", 130, True), ("alias", 512, False),
                                  ("description", 15_000, False), ("entity", 512, False)):
        _text_field(body, name, limit, problems, required=required)
    if "alias" not in body:
        problems.append("no alias: the alert could not be closed by it")
    if body.get("priority", "P3") not in ("P1", "P2", "P3", "P4", "P5"):
        problems.append(f"priority {body.get('priority')!r}")
    tags = body.get("tags", [])
    if not isinstance(tags, list) or len(tags) > 20 or not all(
            isinstance(t, str) and 0 < len(t) <= 50 for t in tags):
        problems.append(f"tags {tags!r}")
    details = body.get("details", {})
    if not isinstance(details, dict) or not all(isinstance(v, str) for v in details.values()):
        problems.append("details is not an object of strings")
    elif sum(len(k) + len(v) for k, v in details.items()) > 8000:
        problems.append("details exceed 8000 characters")
    return problems


class PagerDutyReceiver(Receiver):
    """PagerDuty's Events API v2, played on loopback (module docstring)."""

    def __init__(self, routing_key: str, **kwargs: Any) -> None:
        super().__init__(path=PAGERDUTY_PATH, **kwargs)
        self.routing_key = routing_key
        self.alerts = _AlertBook()
        self.hold = 0.0  # seconds the next accepted event's answer waits, after it took effect
        self.respond_with(self._answer)

    @property
    def enqueue_url(self) -> str:
        return self.url

    def bodies(self) -> list[dict[str, Any]]:
        """The events accepted, in arrival order."""
        return [json.loads(r.body) for r in self.accepted()]

    def _parse(self, request: Request) -> None:
        request.mode = "pagerduty"
        problems = self.problems(request)
        self.errors += problems
        request.verified_with = [] if problems else [0]

    def problems(self, request: Request) -> list[str]:
        problems: list[str] = []
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            problems.append(f"content-type {request.headers.get('content-type')!r}, not application/json")
        try:
            body = json.loads(request.body)
        except ValueError as exc:
            return [*problems, f"not JSON: {exc}"]
        return problems + pagerduty_problems(body)

    def _answer(self, request: Request) -> Reply | None:
        if not request.verified_with:
            errors = self.problems(request) or ["Event object is invalid"]
            return _json({"status": "invalid event", "message": "Event object is invalid",
                          "errors": errors}, 400)
        body = json.loads(request.body)
        if body["routing_key"] != self.routing_key:
            return _json({"status": "invalid event", "message": "Event object is invalid",
                          "errors": ["Invalid routing key"]}, 400)
        with self._lock:
            if self._script:
                return self._script.popleft()
            key = body["dedup_key"]
            state = str(body.get("payload", {}).get("custom_details", {}).get("State", ""))
            if body["event_action"] == "trigger":
                self.alerts.trigger(key, state)
            elif body["event_action"] == "resolve":
                self.alerts.resolve(key, state)
            hold, self.hold = self.hold, 0.0
        reply = _json({"status": "success", "message": "Event processed", "dedup_key": key}, 202)
        return Reply(reply.status, reply.headers, reply.body, delay=hold)


class OpsgenieReceiver(Receiver):
    """Opsgenie's Alert API, played on loopback (module docstring)."""

    def __init__(self, api_key: str, **kwargs: Any) -> None:
        super().__init__(path=OPSGENIE_CREATE, **kwargs)
        self.api_key = api_key
        self.alerts = _AlertBook()

    @property
    def base_url(self) -> str:
        return self.url[: -len(OPSGENIE_CREATE)]

    def bodies(self) -> list[tuple[str, dict[str, Any]]]:
        """(path, body) of the requests accepted, in arrival order."""
        return [(r.path, json.loads(r.body)) for r in self.requests
                if r.method == "POST" and 200 <= r.status < 300]

    def _handle(self, request: Request) -> Reply:
        parts = urlsplit(request.path)
        close = _CLOSE.match(parts.path)
        if request.method != "POST" or (parts.path != OPSGENIE_CREATE and close is None):
            if request.method == "GET" and parts.path.startswith("/v2/alerts/requests/"):
                if request.headers.get("authorization") != f"GenieKey {self.api_key}":
                    return _json({"message": "Could not authenticate", "took": 0.0}, 401)
                return _json({"message": "Request not found", "took": 0.001}, 404)
            return _json({"message": "Not found", "took": 0.0}, 404)
        if request.headers.get("authorization") != f"GenieKey {self.api_key}":
            return _json({"message": "Could not authenticate", "took": 0.0,
                          "requestId": str(uuid.uuid4())}, 401)
        request.mode = "opsgenie"
        problems = self._problems(request, close is not None, parse_qs(parts.query))
        self.errors += problems
        if problems:
            return _json({"message": "Request body is not processable. " + "; ".join(problems),
                          "took": 0.0, "requestId": str(uuid.uuid4())}, 422)
        with self._lock:
            if self._script:
                return self._script.popleft()
            body = json.loads(request.body or b"{}")
            if close is not None:
                self.alerts.resolve(unquote(close["alias"]), "")
            else:
                self.alerts.trigger(body["alias"], str(body.get("details", {}).get("State", "")))
        return _json({"result": "Request will be processed", "took": 0.002, "requestId": str(uuid.uuid4())},
                     202)

    def _problems(self, request: Request, closing: bool, query: dict[str, list[str]]) -> list[str]:
        problems: list[str] = []
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            problems.append(f"content-type {request.headers.get('content-type')!r}, not application/json")
        try:
            body = json.loads(request.body or b"{}")
        except ValueError as exc:
            return [*problems, f"not JSON: {exc}"]
        if closing and query.get("identifierType") != ["alias"]:
            problems.append(f"identifierType {query.get('identifierType')!r}, not alias")
        return problems + opsgenie_problems(body, closing)
