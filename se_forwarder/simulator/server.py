"""The simulator over real HTTP: IMDS routes, per-VM URL prefixes, and the ``/control`` API.

IMDS routes (for the first VM at the root, for every VM under ``/vm/<name>``)::

    GET|POST /metadata/scheduledevents?api-version=...
    GET      /metadata/instance/compute?api-version=...
    GET      /metadata/instance?api-version=...

Checks are made in IMDS's order: throttling (429), ``X-Forwarded-For`` (400), ``Metadata: true``
(400), api-version (400); then the first-call delay, injected faults, and the answer (with an
``ETag``; ``If-None-Match`` gets 304). See ``design.md`` for the control API.

``instance_endpoint`` imitates stand-ins and failures of the instance metadata routes alone:
``ok`` (the default), ``missing`` (404, as in IMDS mock servers that only serve scheduled events)
or ``hang`` (accept the request and never answer).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import re
import select
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from se_forwarder.simulator.engine import (
    SCENARIO_STARTS,
    ApprovalError,
    Simulator,
    parse_start_requests,
    utc_now_iso,
)
from se_forwarder.simulator.faults import Fault, FaultError, parse_fault, parse_fault_flag
from se_forwarder.simulator.scenarios import (
    Scenario,
    ScenarioError,
    builtin_scenarios,
    load_scenario,
)
from se_forwarder.simulator.topology import Topology
from se_forwarder.simulator.wire import (
    INSTANCE_VERSIONS,
    SCHEDULED_EVENTS_VERSIONS,
    compute_metadata,
    network_metadata,
    newest_versions,
    version_error,
)

log = logging.getLogger("se_forwarder.simulator")

VM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
IMDS_ROUTES = {
    "/metadata/scheduledevents": "scheduledevents",
    "/metadata/instance/compute": "compute",
    "/metadata/instance": "instance",
}
MAX_BODY = 1024 * 1024
JSON_TYPE = "application/json; charset=utf-8"
INSTANCE_MODES = ("ok", "missing", "hang")


class _Throttle:
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


class _HTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that remembers open connections, so ``stop()`` can cut them."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: SimulatorServer) -> None:
        self.owner = owner
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a killed agent, a timeout) is normal here, not a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)

    def cut_connections(self) -> None:
        with self._open_lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    """One HTTP request: routes to the IMDS part or the control API."""

    protocol_version = "HTTP/1.1"
    server_version = "se-forwarder-imds-simulator"
    timeout = 30  # idle keep-alive connections are closed after this
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    server: _HTTPServer

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        log.debug("%s %s", self.client_address[0], format % args)

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    # --- plumbing ------------------------------------------------------------------------------

    @property
    def owner(self) -> SimulatorServer:
        return self.server.owner

    def _dispatch(self, method: str) -> None:
        try:
            body = self._read_body()
            if body is None:
                return
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            vm, rest, prefixed = self.owner.route_vm(unquote(parts.path))
            if vm is None:
                self._json(404, {"error": f"Not found. No VM {rest!r} on this simulator."})
            elif rest == "/control" or rest.startswith("/control/"):
                self._control(
                    method, rest[len("/control") :].rstrip("/"), query, body, vm if prefixed else None
                )
            elif rest.rstrip("/") in IMDS_ROUTES:
                self._imds(method, IMDS_ROUTES[rest.rstrip("/")], vm, query, body)
            else:
                self._json(404, {"error": "Not found"})
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            self._json(411, {"error": "Length Required: send a Content-Length"})
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._json(413 if length > 0 else 400, {"error": "Bad request. Bad Content-Length."})
            return None
        return self.rfile.read(length) if length else b""

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
            "time": utc_now_iso(time.time()),
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
        if not owner.throttle.allow((self.client_address[0], vm)):
            self._send(429, b"Too many requests", "text/plain; charset=utf-8", {"Retry-After": "1"})
            return 429, "throttled"
        if route != "scheduledevents" and owner.instance_endpoint != "ok":
            if owner.instance_endpoint == "missing":
                self._json(404, {"error": "Not found"})
                return 404, "instance-missing"
            owner.hang(self.connection, None)
            self.close_connection = True
            return None, "instance-hang"
        if "X-Forwarded-For" in self.headers:
            return self._bad("Bad request. X-Forwarded-For header is not allowed.")
        if (self.headers.get("Metadata") or "").strip().lower() != "true":
            return self._bad("Bad request. Required metadata header not specified")
        allowed = ("GET", "POST") if route == "scheduledevents" else ("GET",)
        if method not in allowed:
            self._json(405, {"error": "Method not allowed"}, {"Allow": ", ".join(allowed)})
            return 405, None
        known = SCHEDULED_EVENTS_VERSIONS if route == "scheduledevents" else INSTANCE_VERSIONS
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
                return self._approve(vm, version, body), fault and fault.kind
            owner.sim.note_poll(vm, self.client_address[0])  # a waiting scenario starts now
            return self._document(vm, version), fault and fault.kind
        index = owner.sim.vm_names.index(vm)
        topology = owner.sim.topology
        overrides = owner.instance_overrides if topology is None else \
            {**owner.instance_overrides, **topology.compute_overrides(vm)}
        compute = compute_metadata(vm, index, overrides)
        data = compute if route == "compute" else {"compute": compute, "network": network_metadata(index)}
        self._send(200, _dumps(data))
        return 200, fault and fault.kind

    def _bad(self, message: str, extra: Mapping[str, Any] | None = None) -> tuple[int, str | None]:
        self._json(400, {"error": message, **(extra or {})})
        return 400, None

    def _document(self, vm: str, version: str) -> int:
        body = _dumps(self.owner.sim.document(vm, version))
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

    # --- control API ---------------------------------------------------------------------------

    def _control(self, method: str, sub: str, query: dict[str, str], body: bytes, vm: str | None) -> None:
        try:
            status, data = self.owner.control(method, sub, query, body, vm)
        except KeyError as exc:
            status, data = 404, {"error": str(exc.args[0]) if exc.args else "not found"}
        except (ValueError, TypeError) as exc:  # incl. ScenarioError, FaultError, ApprovalError
            status, data = 400, {"error": str(exc)}
        if status == 204:
            self._send(204)
        else:
            self._json(status, data)


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode("utf-8")


def _etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    if header.strip() == "*":
        return True
    tags = [t.strip() for t in header.split(",")]
    return any((t[2:] if t.startswith("W/") else t) == etag for t in tags)


def _json_body(body: bytes, *, default: Any = None) -> Any:
    if not body.strip():
        if default is None:
            raise ValueError("a JSON body is required")
        return default
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None


class SimulatorServer:
    """The IMDS simulator on a real port; ``.sim`` is the engine for in-process control.

    A ``scenario`` starts at the first scheduled-events poll of any VM; ``scenario_start=
    "immediately"`` starts it with the server.

    ``with SimulatorServer(vm_names=("vm0", "vm1")) as server:`` serves until the block ends.
    ``url`` is the first VM's base URL; ``vm_url(name)`` is ``url + "/vm/<name>"``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        vm_names: Sequence[str] = ("vm0",),
        time_scale: float = 1.0,
        scenario: str | Path | Scenario | None = None,
        throttle_rps: float | None = None,
        first_call_delay: float = 0.0,
        multi_tenant: bool = False,
        scenario_params: Mapping[str, Any] | None = None,
        scenario_start: str = "first-poll",
        faults: Sequence[Mapping[str, Any] | str] = (),
        instance_overrides: Mapping[str, Any] | None = None,
        hang_seconds: float = 300.0,
        instance_endpoint: str = "ok",
        topology: Topology | None = None,
    ) -> None:
        vm_names = topology.vm_names if topology is not None else vm_names
        for name in vm_names:
            if not isinstance(name, str) or not VM_NAME.match(name):
                raise ValueError(f"bad VM name {name!r}: use letters, digits, '-', '_' and '.'")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be 0-65535, got {port}")
        if throttle_rps is not None and throttle_rps < 0:
            raise ValueError(f"throttle_rps must be >= 0 (0 or None = off), got {throttle_rps}")
        if first_call_delay < 0:
            raise ValueError(f"first_call_delay must be >= 0, got {first_call_delay}")
        if scenario_start not in SCENARIO_STARTS:
            raise ValueError(
                f"scenario_start must be one of {', '.join(SCENARIO_STARTS)}, got {scenario_start!r}"
            )
        self.host = host
        self._port = port
        self.sim = Simulator(vm_names, time_scale, multi_tenant=multi_tenant, topology=topology)
        self.throttle = _Throttle(throttle_rps)
        self.sim.on_reset(self.throttle.clear)
        self.instance_overrides = dict(instance_overrides or {})
        self.hang_seconds = hang_seconds
        self.instance_endpoint = _instance_mode(instance_endpoint)
        self._first_call_delay = first_call_delay
        self._enabled_at: dict[str, float] = {}
        self._first_lock = threading.Lock()
        self._scenario = load_scenario(scenario) if isinstance(scenario, str | Path) else scenario
        self._scenario_params = dict(scenario_params or {})
        self._scenario_start = scenario_start
        if self._scenario is not None:
            self._scenario.compile(self.sim.vm_names, self._scenario_params)  # fail early
        self._faults = [parse_fault_flag(f) if isinstance(f, str) else dict(f) for f in faults]
        for spec in self._faults:  # validate now; armed at start()
            parse_fault(spec, vm_names=self.sim.vm_names)
        self._stopping = threading.Event()
        self._started_once = False
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life cycle ----------------------------------------------------------------------------

    def start(self) -> SimulatorServer:
        """Bind, serve in a background thread, start the clock (and the scenario); returns self.

        After ``stop()``, ``start()`` serves the same events again on the same port (an IMDS
        restart as the agent sees it); faults and scenario given to the constructor apply once.
        """
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer((self.host, self._port), self)
        self._port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"imds-sim-{self.port}",
            daemon=True,
        )
        self._thread.start()
        self.sim.start()
        if not self._started_once:
            self._started_once = True
            for spec in self._faults:
                self.sim.add_fault(spec)
            if self._scenario is not None:
                self.sim.start_scenario(self._scenario, self._scenario_params,
                                        start=self._scenario_start)
        log.info("IMDS simulator listening on %s (VMs: %s)", self.url, ", ".join(self.sim.vm_names))
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections (hanging requests too), stop the clock."""
        self._stopping.set()
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.cut_connections()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.sim.close()

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- addresses -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0 and started)."""
        return self._httpd.server_address[1] if self._httpd is not None else self._port

    @property
    def url(self) -> str:
        """Base URL of the first VM, e.g. ``http://127.0.0.1:8099``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def vm_url(self, name: str) -> str:
        """Base URL of VM ``name``: ``<url>/vm/<name>`` (its IMDS routes live under it)."""
        if name not in self.sim.vm_names:
            raise KeyError(f"no VM named {name!r} (VMs: {', '.join(self.sim.vm_names)})")
        return f"{self.url}/vm/{name}"

    def route_vm(self, path: str) -> tuple[str | None, str, bool]:
        """(VM name or None if unknown, the rest of the path, whether a /vm/ prefix was used)."""
        if path.startswith("/vm/"):
            name, _, rest = path[len("/vm/") :].partition("/")
            if name not in self.sim.vm_names:
                return None, name, True
            return name, "/" + rest, True
        return self.sim.vm_names[0], path, False

    # --- IMDS behaviour knobs ------------------------------------------------------------------

    @property
    def throttle_rps(self) -> float | None:
        """Requests per second allowed per (client, VM) before 429; None/0 = no throttling."""
        return self.throttle.rps

    @throttle_rps.setter
    def throttle_rps(self, value: float | None) -> None:
        if value is not None and value < 0:
            raise ValueError(f"throttle_rps must be >= 0, got {value}")
        self.throttle.rps = value
        self.throttle.clear()

    @property
    def first_call_delay(self) -> float:
        """Real seconds the first scheduled-events request of each VM waits (re-armed when set)."""
        return self._first_call_delay

    @first_call_delay.setter
    def first_call_delay(self, value: float) -> None:
        if value < 0:
            raise ValueError(f"first_call_delay must be >= 0, got {value}")
        with self._first_lock:
            self._first_call_delay = value
            self._enabled_at.clear()

    def wait_first_call(self, vm: str) -> bool:
        """Hold a request until the service is "enabled" for ``vm``; False if stopping."""
        with self._first_lock:
            enabled_at = self._enabled_at.setdefault(vm, time.monotonic() + self._first_call_delay)
        return self.pause(enabled_at - time.monotonic())

    def pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the server stops first; True if it slept in full."""
        return seconds <= 0 or not self._stopping.wait(seconds)

    def hang(self, conn: socket.socket, seconds: float | None) -> None:
        """Hold ``conn`` without answering until the client leaves, the server stops or time's up."""
        deadline = time.monotonic() + (self.hang_seconds if seconds is None else seconds)
        while not self._stopping.is_set() and time.monotonic() < deadline:
            try:
                readable, _, _ = select.select([conn], [], [], 0.1)
                if readable and conn.recv(1, socket.MSG_PEEK) == b"":
                    return  # the client gave up and closed
            except (OSError, ValueError):
                return

    # --- control API ---------------------------------------------------------------------------

    def control(
        self, method: str, sub: str, query: Mapping[str, str], body: bytes, vm: str | None
    ) -> tuple[int, Any]:
        """Handle ``/control<sub>``; returns (status, JSON data). KeyError -> 404, ValueError -> 400."""
        sim = self.sim
        routes: dict[tuple[str, str], Any] = {
            ("GET", ""): lambda: (200, self.describe()),
            ("GET", "/events"): lambda: (
                200,
                {"DocumentIncarnation": sim.incarnation, "Events": sim.events()},
            ),
            ("POST", "/events"): lambda: (201, sim.add_event(_json_body(body, default={}), vm=vm)),
            ("GET", "/approvals"): lambda: (200, sim.approvals()),
            ("GET", "/faults"): lambda: (200, sim.faults()),
            ("POST", "/faults"): lambda: (201, self._add_faults(_json_body(body))),
            ("DELETE", "/faults"): self._clear_faults,
            ("GET", "/scenario"): lambda: (200, sim.scenario_status()),
            ("POST", "/scenario"): lambda: (201, self._start_scenario(_json_body(body))),
            ("GET", "/scenarios"): lambda: (200, _describe_builtins()),
            ("POST", "/reset"): lambda: (200, {"DocumentIncarnation": sim.reset()}),
            ("GET", "/requests"): lambda: (
                200,
                sim.requests(query.get("vm"), _limit(query.get("limit"))),
            ),
            ("GET", "/settings"): lambda: (200, self.settings()),
            ("GET", "/topology"): lambda: (200, sim.topology.describe() if sim.topology else None),
            ("POST", "/settings"): lambda: (200, self.update_settings(_json_body(body))),
        }
        handler = routes.get((method, sub))
        if handler is not None:
            return handler()
        if sub.startswith("/events/"):
            event_id = sub[len("/events/") :]
            if method == "GET":
                return 200, sim.event(event_id)
            if method == "PATCH":
                return 200, sim.patch_event(event_id, _json_body(body))
            if method == "DELETE":
                sim.delete_event(event_id)
                return 204, None
            return 405, {"error": f"{method} not allowed on /control/events/<EventId>"}
        if any(path == sub for _, path in routes):
            return 405, {"error": f"{method} not allowed on /control{sub}"}
        raise KeyError(f"no control route /control{sub}")

    def _clear_faults(self) -> tuple[int, None]:
        self.sim.clear_faults()
        return 204, None

    def _add_faults(self, spec: Any) -> dict[str, Any] | list[dict[str, Any]]:
        if not isinstance(spec, list):
            return self.sim.add_fault(spec) if isinstance(spec, dict) else _bad_fault(spec)
        return [self.sim.add_fault(s) if isinstance(s, dict) else _bad_fault(s) for s in spec]

    def _start_scenario(self, spec: Any) -> dict[str, Any]:
        if not isinstance(spec, dict):
            raise ValueError('the body must be {"name": "<built-in scenario>", "params": {...}}')
        params = spec.get("params") or {}
        if not isinstance(params, dict):
            raise ValueError("params must be an object")
        start = spec.get("start", "first-poll")  # the engine names a bad value
        if isinstance(spec.get("scenario"), dict):
            return self.sim.start_scenario(spec["scenario"], params, start=start)
        name = spec.get("name")
        builtin = [s.name for s in builtin_scenarios()]
        if name not in builtin:
            raise ScenarioError(
                f"unknown scenario {name!r} (built-in: {', '.join(builtin)}); "
                'send {"scenario": {...}} for your own'
            )
        return self.sim.start_scenario(name, params, start=start)

    def settings(self) -> dict[str, Any]:
        """The IMDS behaviour knobs, as ``GET /control/settings`` shows them."""
        return {
            "vm_names": list(self.sim.vm_names),
            "time_scale": self.sim.time_scale,
            "throttle_rps": self.throttle_rps,
            "first_call_delay": self.first_call_delay,
            "multi_tenant": self.sim.multi_tenant,
            "instance_endpoint": self.instance_endpoint,
        }

    def update_settings(self, spec: Any) -> dict[str, Any]:
        """Change throttle_rps, first_call_delay, multi_tenant or instance_endpoint at run time."""
        if not isinstance(spec, dict):
            raise ValueError("the body must be a JSON object")
        known = ("throttle_rps", "first_call_delay", "multi_tenant", "instance_endpoint")
        unknown = sorted(set(spec) - set(known))
        if unknown:
            raise ValueError(f"unknown setting {unknown[0]!r} (known: {', '.join(known)})")
        if "instance_endpoint" in spec:
            mode = _instance_mode(spec["instance_endpoint"])
        for key in ("throttle_rps", "first_call_delay"):
            value = spec.get(key)
            if (
                key in spec
                and value is not None
                and (isinstance(value, bool) or not isinstance(value, int | float))
            ):
                raise ValueError(f"{key} must be a number, got {value!r}")
        if "multi_tenant" in spec and not isinstance(spec["multi_tenant"], bool):
            raise ValueError("multi_tenant must be true or false")
        if "throttle_rps" in spec:
            self.throttle_rps = spec["throttle_rps"]
        if "first_call_delay" in spec:
            self.first_call_delay = float(spec["first_call_delay"] or 0)
        if "multi_tenant" in spec:
            self.sim.multi_tenant = spec["multi_tenant"]
        if "instance_endpoint" in spec:
            self.instance_endpoint = mode
        return self.settings()

    def describe(self) -> dict[str, Any]:
        """``GET /control``: where everything is."""
        return {
            "imds": {name: self.vm_url(name) for name in self.sim.vm_names},
            "url": self.url,
            "settings": self.settings(),
            "routes": [
                "POST /control/events",
                "GET /control/events",
                "GET|PATCH|DELETE /control/events/{id}",
                "GET /control/approvals",
                "GET|POST|DELETE /control/faults",
                "GET|POST /control/scenario",
                "GET /control/scenarios",
                "POST /control/reset",
                "GET /control/requests?vm=&limit=",
                "GET|POST /control/settings",
                "GET /control/topology",
            ],
        }


def _instance_mode(value: Any) -> str:
    if value not in INSTANCE_MODES:
        raise ValueError(f"instance_endpoint must be one of {', '.join(INSTANCE_MODES)}, got {value!r}")
    return value


def _bad_fault(spec: Any) -> dict[str, Any]:
    raise FaultError(f"a fault must be a JSON object, got {spec!r}")


def _limit(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise ValueError(f"limit must be a positive integer, got {text!r}")
    return int(text)


def _describe_builtins() -> list[dict[str, Any]]:
    return [{"name": s.name, "description": s.description, "params": s.params} for s in builtin_scenarios()]
