"""The simulator over real HTTP: per-VM URL prefixes, the IMDS routes and the ``/control`` API.

IMDS routes (for the first VM at the root, for every VM under ``/vm/<name>``)::

    GET|POST /metadata/scheduledevents?api-version=...
    GET      /metadata/instance/compute?api-version=...
    GET      /metadata/instance?api-version=...
    GET      /metadata/attested/document?api-version=...&nonce=...   (attestation.py)

What they answer is ``imds_routes.py``; the control API is ``control_routes.py``. Both see the
server only through ``host.SimulatorHost``, which ``SimulatorServer`` implements. The sockets and
the dispatch of each request are ``http_server.py``. This module owns the server's life cycle
(``stop`` cuts hanging requests) and the IMDS behaviour knobs.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from se_forwarder.simulator.attestation import DEFAULT_LIFETIME, AttestationAuthority
from se_forwarder.simulator.azure_side import AzureOptions, AzureSide
from se_forwarder.simulator.control_routes import ControlApi, instance_mode
from se_forwarder.simulator.engine import SCENARIO_STARTS, SettingError, Simulator
from se_forwarder.simulator.faults import parse_fault, parse_fault_flag
from se_forwarder.simulator.history import EventHistory
from se_forwarder.simulator.http_server import HttpServer
from se_forwarder.simulator.imds_routes import Throttle
from se_forwarder.simulator.scenarios import Scenario, load_scenario
from se_forwarder.simulator.topology import Topology

log = logging.getLogger("se_forwarder.simulator")


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
        etag: bool = True,
        topology: Topology | None = None,
        not_before_format: str = "rfc1123",
        azure: AzureOptions | None = None,
        attestation_dir: str | Path | None = None,
        attestation_lifetime: float = DEFAULT_LIFETIME,
        attestation_nonce: str = "spec",
    ) -> None:
        if not 0 <= port <= 65535:
            raise SettingError(f"port must be 0-65535, got {port}")
        if throttle_rps is not None and throttle_rps < 0:
            raise SettingError(f"throttle_rps must be >= 0 (0 or None = off), got {throttle_rps}")
        if first_call_delay < 0:
            raise SettingError(f"first_call_delay must be >= 0, got {first_call_delay}")
        if scenario_start not in SCENARIO_STARTS:
            raise SettingError(
                f"scenario_start must be one of {', '.join(SCENARIO_STARTS)}, got {scenario_start!r}"
            )
        self.host = host
        self._port = port
        self.sim = Simulator(vm_names, time_scale, multi_tenant=multi_tenant, topology=topology,
                             not_before_format=not_before_format)
        self.history = EventHistory(self.sim)  # every event's life (GET /control/history)
        self.throttle = Throttle(throttle_rps)
        self.sim.on_reset(self.throttle.clear)
        self.instance_overrides = dict(instance_overrides or {})
        self.hang_seconds = hang_seconds
        self.instance_endpoint = instance_mode(instance_endpoint)
        self.etag = etag  # False: no ETag, If-None-Match ignored (IMDS as documented)
        # Signs attested documents; its CA files go to attestation_dir (default: a temporary one).
        self.attestation = AttestationAuthority(lifetime=attestation_lifetime, nonce_rule=attestation_nonce,
                                                directory=attestation_dir)
        self._first_call_delay = first_call_delay
        self._enabled_at: dict[str, float] = {}
        self._first_lock = threading.Lock()
        self._held = 0
        self._held_lock = threading.Lock()
        self._scenario = load_scenario(scenario) if isinstance(scenario, str | Path) else scenario
        self._scenario_params = dict(scenario_params or {})
        self._scenario_start = scenario_start
        if self._scenario is not None:
            self._scenario.compile(self.sim.vm_names, self._scenario_params)  # fail early
        self._faults = [parse_fault_flag(f) if isinstance(f, str) else dict(f) for f in faults]
        for spec in self._faults:  # validate now; armed at start()
            parse_fault(spec, vm_names=self.sim.vm_names)
        self.azure = AzureSide(self.sim, azure) if azure is not None else None  # ARM, feed (azure_side.py)
        self._control_api = ControlApi(self)
        self._stopping = threading.Event()
        self._started_once = False
        self._httpd: HttpServer | None = None
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
        self._httpd = HttpServer((self.host, self._port), self)
        self._port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"imds-sim-{self.port}",
            daemon=True,
        )
        self._thread.start()
        self.sim.start()
        if self.azure is not None:
            self.azure.start()
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
        if self.azure is not None:
            self.azure.stop()
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

    @property
    def attestation_ca_file(self) -> Path:
        """The root CA of this server's attested documents (PEM): a coordinator's trust anchor."""
        return self.attestation.ca_file

    @property
    def attestation_intermediate_file(self) -> Path:
        """The intermediate CA (PEM), which the documents, as Azure's, do not carry."""
        return self.attestation.intermediate_file

    def route_vm(self, path: str) -> tuple[str | None, str, bool]:
        """(VM name or None if unknown, the rest of the path, whether a /vm/ prefix was used)."""
        if path.startswith("/vm/"):
            name, _, rest = path[len("/vm/") :].partition("/")
            if name not in self.sim.vm_names:
                return None, name, True
            return name, "/" + rest, True
        return self.sim.vm_names[0], path, False

    # --- IMDS behaviour knobs ------------------------------------------------------------------

    def admit(self, client: str, vm: str) -> bool:
        """Whether a request of ``client`` to ``vm`` is within ``throttle_rps`` (else 429)."""
        return self.throttle.allow((client, vm))

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

    def hang(self, conn: socket.socket, seconds: float | None,
             released: Callable[[], bool] | None = None) -> bool:
        """Hold ``conn`` without answering until the client leaves, the server stops, time's up
        or ``released()`` holds; True only in the last case (the request may then be answered)."""
        deadline = time.monotonic() + (self.hang_seconds if seconds is None else seconds)
        with self._held_lock:
            self._held += 1
        try:
            while not self._stopping.is_set() and time.monotonic() < deadline:
                if released is not None and released():
                    return True
                try:
                    readable, _, _ = select.select([conn], [], [], 0.05)
                    if readable and conn.recv(1, socket.MSG_PEEK) == b"":
                        return False  # the client gave up and closed
                except (OSError, ValueError):
                    return False
            return False
        finally:
            with self._held_lock:
                self._held -= 1

    def holding(self) -> int:
        """How many requests a hang holds unanswered right now."""
        with self._held_lock:
            return self._held

    # --- control API ---------------------------------------------------------------------------

    def control(
        self, method: str, sub: str, query: Mapping[str, str], body: bytes, vm: str | None
    ) -> tuple[int, Any]:
        """Handle ``/control<sub>``; returns (status, JSON data). KeyError -> 404, ValueError -> 400."""
        return self._control_api.handle(method, sub, query, body, vm)

    def settings(self) -> dict[str, Any]:
        """The IMDS behaviour knobs, as ``GET /control/settings`` shows them."""
        return self._control_api.settings()

    def update_settings(self, spec: Any) -> dict[str, Any]:
        """Change throttle_rps, first_call_delay, multi_tenant, instance_endpoint, etag or
        not_before_format at run time."""
        return self._control_api.update_settings(spec)

    def describe(self) -> dict[str, Any]:
        """``GET /control``: where everything is."""
        return self._control_api.describe()


