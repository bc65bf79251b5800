"""The simulated IMDS routes: what one request to ``/metadata/...`` gets.

Checks are made in IMDS's order: throttling (429), ``X-Forwarded-For`` (400), ``Metadata: true``
(400), api-version (400); then the first-call delay, injected faults, and the answer (with an
``ETag``, and ``If-None-Match`` gets 304, unless the server runs with ``etag=False``: the Azure
documentation describes IMDS without either, so clients must not count on them).

``/metadata/attested/document`` answers what ``attestation.py`` signs for the VM.

``instance_endpoint`` imitates stand-ins and failures of the instance metadata routes alone:
``ok`` (the default), ``missing`` (404, as in IMDS mock servers that only serve scheduled events)
or ``hang`` (accept the request and answer nothing while the mode lasts; a request still held when
the mode changes back is answered then, late).
"""

from __future__ import annotations

import collections
import hashlib
import json
import socket
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from se_forwarder.simulator.attestation import ATTESTED_VERSIONS, NonceError
from se_forwarder.simulator.faults import Fault
from se_forwarder.simulator.host import SimulatorHost
from se_forwarder.simulator.wire import (
    INSTANCE_VERSIONS,
    SCHEDULED_EVENTS_VERSIONS,
    ApprovalError,
    compute_metadata,
    network_metadata,
    newest_versions,
    parse_start_requests,
    version_error,
)
from se_forwarder.timestamps import rfc3339

IMDS_ROUTES = {
    "/metadata/scheduledevents": "scheduledevents",
    "/metadata/instance/compute": "compute",
    "/metadata/instance": "instance",
    "/metadata/attested/document": "attested",
}
JSON_TYPE = "application/json; charset=utf-8"


class Throttle:
    """At most ``rps`` requests in any one-second window per key (client address, VM)."""

    def __init__(self, rps: float | None) -> None:
        self.rps = rps
        self._hits: dict[tuple[str, str], collections.deque[float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: tuple[str, str]) -> bool:
        rps = self.rps
        if not rps:
            return True
        now = time.monotonic()
        with self._lock:
            hits = self._hits.setdefault(key, collections.deque())
            while hits and hits[0] <= now - 1.0:
                hits.popleft()
            if len(hits) >= rps:
                return False
            hits.append(now)
            return True

    def clear(self) -> None:
        with self._lock:
            self._hits.clear()


class ImdsHandler(BaseHTTPRequestHandler):
    """The IMDS half of the simulator's request handler (``server.py`` adds dispatch and control).

    Its server carries a ``SimulatorHost`` as ``owner``.
    """

    @property
    def owner(self) -> SimulatorHost:
        owner: SimulatorHost = self.server.owner  # type: ignore[attr-defined]
        return owner

    def _send(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = JSON_TYPE,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if status != 304:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and status != 304:
            self.wfile.write(body)

    def _json(self, status: int, data: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode("utf-8"), JSON_TYPE, headers)

    # --- IMDS ----------------------------------------------------------------------------------

    def _imds(self, method: str, route: str, vm: str, query: dict[str, str], body: bytes) -> None:
        started = time.monotonic()
        entry: dict[str, Any] = {
            "time": rfc3339(time.time(), milliseconds=True),
            "client": self.client_address[0],
            "vm": vm,
            "method": method,
            "path": self.path,
            "route": route,
            "api_version": query.get("api-version"),
            "status": None,
            "fault": None,
        }
        try:
            entry["status"], entry["fault"] = self._imds_answer(method, route, vm, query, body)
        finally:
            entry["duration_ms"] = round((time.monotonic() - started) * 1000, 1)
            self.owner.sim.record_request(entry)

    def _imds_answer(
        self, method: str, route: str, vm: str, query: dict[str, str], body: bytes
    ) -> tuple[int | None, str | None]:
        """Answer one IMDS request; returns (status sent or None, fault kind or None)."""
        owner = self.owner
        if not owner.admit(self.client_address[0], vm):
            self._send(429, b"Too many requests", "text/plain; charset=utf-8", {"Retry-After": "1"})
            return 429, "throttled"
        hung = None
        if route != "scheduledevents" and owner.instance_endpoint == "hang":
            # Held while the endpoint hangs; once it is set back, answered as it then says.
            if not owner.hang(self.connection, None, lambda: owner.instance_endpoint != "hang"):
                self.close_connection = True
                return None, "instance-hang"
            hung = "instance-hang"
        if route != "scheduledevents" and owner.instance_endpoint == "missing":
            self._json(404, {"error": "Not found"})
            return 404, hung or "instance-missing"
        if "X-Forwarded-For" in self.headers:
            return self._bad("Bad request. X-Forwarded-For header is not allowed.")
        if (self.headers.get("Metadata") or "").strip().lower() != "true":
            return self._bad("Bad request. Required metadata header not specified")
        allowed = ("GET", "POST") if route == "scheduledevents" else ("GET",)
        if method not in allowed:
            self._json(405, {"error": "Method not allowed"}, {"Allow": ", ".join(allowed)})
            return 405, None
        known = {"scheduledevents": SCHEDULED_EVENTS_VERSIONS, "attested": ATTESTED_VERSIONS}.get(
            route, INSTANCE_VERSIONS)
        version = query.get("api-version")
        problem = version_error(version, known)
        if problem:
            return self._bad(problem, {"newest-versions": newest_versions(known)})
        assert version is not None
        if route == "scheduledevents" and not owner.wait_first_call(vm):
            self.close_connection = True
            return None, "stopped"
        fault = owner.sim.take_fault(route, vm, method)
        if fault is not None:
            if fault.delay_seconds and not owner.pause(fault.delay_seconds):
                self.close_connection = True
                return None, "stopped"
            if fault.kind != "delay":
                return self._fault(fault, route, vm, version), fault.kind
        if route == "scheduledevents":
            if method == "POST":
                return self._approve(vm, version, body), (fault.kind if fault else None)
            owner.sim.note_poll(vm, self.client_address[0])  # a waiting scenario starts now
            return self._document(vm, version), (fault.kind if fault else None)
        index = owner.sim.vm_names.index(vm)
        topology = owner.sim.topology
        overrides = owner.instance_overrides if topology is None else \
            {**owner.instance_overrides, **topology.compute_overrides(vm)}
        compute = compute_metadata(vm, index, overrides)
        if route == "attested":
            return self._attested(compute, query), (fault.kind if fault else None)
        data = compute if route == "compute" else {"compute": compute, "network": network_metadata(index)}
        self._send(200, _dumps(data))
        return 200, (fault.kind if fault else hung)

    def _bad(self, message: str, extra: Mapping[str, Any] | None = None) -> tuple[int, str | None]:
        self._json(400, {"error": message, **(extra or {})})
        return 400, None

    def _document(self, vm: str, version: str) -> int:
        body = _dumps(self.owner.sim.document(vm, version))
        if not self.owner.etag:
            self._send(200, body)
            return 200
        etag = '"' + hashlib.sha256(body).hexdigest()[:24] + '"'
        if _etag_matches(self.headers.get("If-None-Match"), etag):
            self._send(304, headers={"ETag": etag})
            return 304
        self._send(200, body, headers={"ETag": etag})
        return 200

    def _approve(self, vm: str, version: str, body: bytes) -> int:
        try:
            ids = parse_start_requests(body)
            self.owner.sim.approve(ids, vm=vm, client=self.client_address[0], api_version=version)
        except ApprovalError as exc:
            self._json(400, {"error": str(exc)})
            return 400
        self._send(200)
        return 200

    def _attested(self, compute: Mapping[str, Any], query: Mapping[str, str]) -> int:
        try:
            document = self.owner.attestation.document(compute, query.get("nonce"))
        except NonceError as exc:
            return self._bad(str(exc))[0]
        self._send(200, _dumps(document))
        return 200

    def _fault(self, fault: Fault, route: str, vm: str, version: str) -> int | None:
        if fault.kind == "status":
            assert fault.status is not None
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
            self._json(fault.status, {"error": f"Simulated fault: HTTP {fault.status}"}, headers)
            return fault.status
        if fault.kind == "hang":
            self.owner.hang(self.connection, fault.hang_seconds)
            self.close_connection = True
            return None
        if fault.kind == "body":
            assert fault.body is not None
            self._send(200, fault.body.encode("utf-8"))
            return 200
        document = _dumps(self.owner.sim.document(vm, version))
        if fault.kind == "truncate":
            self.send_response(200)
            self.send_header("Content-Type", JSON_TYPE)
            self.send_header("Content-Length", str(len(document)))
            self.end_headers()
            self.wfile.write(document[: max(1, len(document) // 2)])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_WR)
            return 200
        # huge_body: the real document, padded with whitespace (still valid JSON)
        padding = max(0, fault.size - len(document))
        self.send_response(200)
        self.send_header("Content-Type", JSON_TYPE)
        self.send_header("Content-Length", str(len(document) + padding))
        self.end_headers()
        self.wfile.write(document)
        chunk = b" " * (1 << 20)
        while padding > 0:
            piece = chunk[: min(padding, len(chunk))]
            self.wfile.write(piece)
            padding -= len(piece)
        return 200


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode("utf-8")


def _etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    if header.strip() == "*":
        return True
    tags = [t.strip() for t in header.split(",")]
    return any((t[2:] if t.startswith("W/") else t) == etag for t in tags)
