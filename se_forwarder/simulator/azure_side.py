"""Azure's side of the simulator: the server-side channels a fleet coordinator reads.

From the engine's one event model (so a scenario plays the same story to agents and to the
coordinator), ``AzureSide`` keeps Azure's record of each event (``azure_ledger.py``) and:

- publishes every change as Event Grid's ``ScheduledEventEmitted`` CloudEvent to a configured
  Event Hub (``event_grid.py``), with optional delay and drops;
- serves the subset of ARM a coordinator uses over HTTPS with a per-run test CA (``arm.py``):
  Resource Graph queries, the Maintenance ``acknowledge`` and the VMs' instance view;
- hands out the ARM test token from IMDS's managed-identity endpoint (``identity.py``);
- plays Resource Health and fired Azure Monitor alerts (``azure_signals.py``): availability
  changes on the same feed, ``healthresources`` and ``alertsmanagementresources`` in Resource Graph.

Its control routes live under ``/control/arm``, ``/control/feed``, ``/control/health`` and
``/control/alerts`` (``control``).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from se_forwarder.errors import ConfigError
from se_forwarder.simulator import identity, resource_graph
from se_forwarder.simulator.arm import ArmApi
from se_forwarder.simulator.azure_fleet import AzureFleet
from se_forwarder.simulator.azure_ledger import AzureLedger
from se_forwarder.simulator.azure_signals import ROUTES as SIGNAL_ROUTES
from se_forwarder.simulator.azure_signals import TABLES as SIGNAL_TABLES
from se_forwarder.simulator.azure_signals import AzureSignals
from se_forwarder.simulator.event_grid import BODIES, EVENT_TYPE, EVENT_TYPES, FeedPublisher, cloud_event

if TYPE_CHECKING:
    from se_forwarder.simulator.arm_http import ArmHttpServer
    from se_forwarder.simulator.engine import Simulator
    from se_forwarder.simulator.tls import TestCa

log = logging.getLogger("se_forwarder.simulator")


@dataclass
class AzureOptions:
    """How to play Azure's side (``SimulatorServer(azure=AzureOptions(...))``).

    ``arm_port``: serve ARM over HTTPS on 127.0.0.1 at this port (0: a free one; None: no ARM).
    ``feed_connection_string`` (+ ``feed_eventhub`` if it names no entity): the Event Hub the
    feed goes to (None: events are kept for ``GET /control/feed/events`` only).
    ``ca_path``: write the test CA's certificate (PEM) there. ``token``: the ARM bearer token
    (default: a new random one; ``AzureSide.token``). ``feed_event_type``: the feed's CloudEvent
    type, either spelling Microsoft documents (``event_grid.EVENT_TYPES``).
    """

    arm_port: int | None = None
    arm_host: str = "127.0.0.1"
    feed_connection_string: str | None = None
    feed_eventhub: str | None = None
    feed_delay_seconds: float = 0.0
    feed_body: str = "array"
    feed_event_type: str = EVENT_TYPE
    ca_path: str | Path | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if self.arm_port is not None and not 0 <= self.arm_port <= 65535:
            raise ValueError(f"arm_port must be 0-65535, got {self.arm_port}")
        if self.feed_body not in BODIES:
            raise ValueError(f"feed_body must be one of {', '.join(BODIES)}")
        if self.feed_event_type not in EVENT_TYPES:
            raise ValueError(f"feed_event_type must be one of {', '.join(EVENT_TYPES)}")
        if self.feed_delay_seconds < 0:
            raise ValueError("feed_delay_seconds must be >= 0")


def options_from_flags(arm_port: int | None, ca_file: str | None, feed_env: str | None,
                       feed_eventhub: str | None, feed_delay: float,
                       feed_event_type: str | None = None) -> AzureOptions | None:
    """Azure's side from ``se-forwarder simulate``'s flags (None when neither ARM nor feed is
    asked for); ConfigError naming a flag that cannot be used."""
    if arm_port is None and feed_env is None:
        if ca_file or feed_eventhub or feed_event_type:
            raise ConfigError("--ca-file goes with --arm-port, and --feed-eventhub and --feed-event-type "
                              "with --feed-connection-string-env")
        return None
    if feed_event_type is not None and feed_event_type not in EVENT_TYPES:
        raise ConfigError(f"--feed-event-type {feed_event_type!r} is not one of {', '.join(EVENT_TYPES)}")
    if arm_port is not None and not 0 <= arm_port <= 65535:
        raise ConfigError(f"--arm-port must be 0-65535, got {arm_port}")
    if feed_delay < 0:
        raise ConfigError(f"--feed-delay must be >= 0 seconds, got {feed_delay:g}")
    connection = None
    if feed_env is not None:
        connection = os.environ.get(feed_env, "").strip()
        if not connection:
            raise ConfigError(f"--feed-connection-string-env {feed_env}: that environment variable is not "
                              "set or empty")
    if arm_port is not None and ca_file is None:
        ca_file = os.path.join(tempfile.mkdtemp(prefix="se-forwarder-sim-"), "arm-ca.pem")
    return AzureOptions(arm_port=arm_port, ca_path=ca_file, feed_connection_string=connection,
                        feed_eventhub=feed_eventhub, feed_delay_seconds=feed_delay,
                        feed_event_type=feed_event_type or EVENT_TYPE)


class AzureSide:
    """The ledger, the feed and the ARM server of one simulator (module docstring)."""

    def __init__(self, sim: Simulator, options: AzureOptions) -> None:
        self.sim, self.options = sim, options
        self.token = options.token or "sim-arm-" + secrets.token_urlsafe(24)
        self.fleet = AzureFleet(sim.vm_names, sim.topology)
        self.ledger = AzureLedger(self.fleet)
        self.feed = FeedPublisher(
            options.feed_connection_string,
            options.feed_eventhub,
            delay_seconds=options.feed_delay_seconds,
            body=options.feed_body,
            event_type=options.feed_event_type,
        )
        self.signals = AzureSignals(self.fleet, self.feed.publish, sim.now)
        self.api = ArmApi(self.fleet, self.ledger, self._approve, self.token, tables=self._table)
        self.ca: TestCa | None = None
        self.http: ArmHttpServer | None = None
        sim.subscribe(self._on_change)
        sim.on_reset(self._on_reset)
        self._on_change(0, [])  # what the engine already holds

    # -- life cycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self.options.arm_port is not None and self.http is None:
            from se_forwarder.simulator.arm_http import ArmHttpServer
            from se_forwarder.simulator.tls import TestCa

            self.ca = self.ca or TestCa.create()
            if self.options.ca_path:
                self.ca.write_ca(self.options.ca_path)
            host = self.options.arm_host
            self.http = ArmHttpServer(self.api, self.ca.issue_server(), host, self.options.arm_port)
        if self.http is not None:
            self.http.start()
            log.info("ARM simulator listening on %s", self.http.url)
        self.feed.start()

    def stop(self) -> None:
        if self.http is not None:
            self.http.stop()
        self.feed.stop()

    # -- the event model -> Azure -------------------------------------------------------------------

    def _on_change(self, _incarnation: int, _changes: list[str]) -> None:
        events, now = self.sim.snapshot(), self.sim.now()
        for record in self.ledger.observe(events, now):
            info = self.ledger.resource_info(record)
            event = cloud_event(self.fleet.subscription, info, record.updated, self.feed.event_type)
            self.feed.publish(event)
        self.signals.observe(events, now)

    def _on_reset(self) -> None:
        self.ledger.clear()
        self.feed.clear()
        self.signals.clear()

    def _table(self, name: str) -> list[dict[str, Any]]:
        """Resource Graph's rows of table ``name`` (one of ``kql.TABLES``)."""
        if name in SIGNAL_TABLES:
            return self.signals.table(name)
        return resource_graph.table(name, self.fleet, self.ledger)

    def _approve(self, event_id: str, vm: str, client: str) -> None:
        self.sim.approve([event_id], vm=vm, client=client, via="arm")

    # -- what tests and the control API use -----------------------------------------------------------

    @property
    def arm_url(self) -> str:
        if self.http is None:
            raise RuntimeError("ARM is not served: give AzureOptions(arm_port=0)")
        return self.http.url

    @property
    def ca_pem(self) -> bytes:
        if self.ca is None:
            raise RuntimeError("no test CA yet: ARM starts with the server")
        return self.ca.ca_pem

    def identity_token(self, query: dict[str, str], metadata: str | None) -> tuple[int, dict[str, Any]]:
        return identity.token_answer(query, metadata, self.token)

    def settings(self) -> dict[str, Any]:
        api = self.api
        return {"roles": dict(api.roles), "roles_back_in": api.roles_back_in(), "arg_quota": api.arg_quota,
                "faults": api.faults.list()}

    def update_settings(self, spec: Any) -> dict[str, Any]:
        """``roles`` (route -> bool), ``give_back_after`` (seconds until the roles this call takes
        away come back) and ``arg_quota``; ValueError naming a bad one."""
        if not isinstance(spec, dict) or set(spec) - {"roles", "arg_quota", "give_back_after"}:
            raise ValueError(
                'the body must be {"roles": {"query"|"acknowledge"|"instance_view": bool}, '
                '"give_back_after": seconds, "arg_quota": N}'
            )
        roles = spec.get("roles", {})
        if (
            not isinstance(roles, dict)
            or set(roles) - set(self.api.roles)
            or not all(isinstance(v, bool) for v in roles.values())
        ):
            raise ValueError(f"roles must map {', '.join(self.api.roles)} to true or false")
        quota = spec.get("arg_quota", self.api.arg_quota)
        if isinstance(quota, bool) or not isinstance(quota, int) or quota < 0:
            raise ValueError("arg_quota must be a whole number >= 0 (0: not enforced)")
        after = spec.get("give_back_after")
        taken = [route for route, on in roles.items() if not on]
        if after is not None and (isinstance(after, bool) or not isinstance(after, int | float)
                                  or not 0 < after <= 86400 or not taken):
            raise ValueError("give_back_after must be a number of seconds from 0 to 86400, with roles "
                             'that this call takes away, e.g. {"roles": {"acknowledge": false}, '
                             '"give_back_after": 60}')
        self.api.roles.update(roles)
        self.api.give_back(list(roles), None)
        if after is not None:
            self.api.give_back(taken, float(after))
        self.api.arg_quota = quota
        return self.settings()

    def announce(self, imds_url: str) -> list[str]:
        """What ``se-forwarder simulate`` prints about Azure's side."""
        lines = []
        if self.http is not None:
            lines.append(f"ARM simulator listening on {self.http.url} (trust the test CA in "
                         f"{self.options.ca_path}; token: {imds_url}{identity.TOKEN_PATH})")
        if self.options.feed_connection_string:
            hub = self.options.feed_eventhub or "named by the connection string"
            lines.append(f"Azure feed: {self.feed.event_type} CloudEvents go to the Event Hub ({hub})")
        return lines

    def describe(self) -> dict[str, Any]:
        return {
            "arm": self.http.url if self.http else None,
            "feed": self.feed.settings(),
            "fleet": self.fleet.describe(),
        }

    def control(self, method: str, sub: str, body: bytes) -> tuple[int, Any]:
        """``/control/arm...``, ``/control/feed...``, ``/control/health...`` and
        ``/control/alerts...``; KeyError -> 404, ValueError -> 400."""
        if sub.split("/")[1:2] in [[r] for r in SIGNAL_ROUTES]:
            return self.signals.control(method, sub, body)
        routes: dict[tuple[str, str], Any] = {
            ("GET", "/arm"): lambda: self.settings(),
            ("POST", "/arm"): lambda: self.update_settings(_json(body)),
            ("GET", "/arm/faults"): lambda: self.api.faults.list(),
            ("POST", "/arm/faults"): lambda: [self.api.faults.add(f) for f in _as_list(_json(body))],
            ("DELETE", "/arm/faults"): lambda: self.api.faults.clear(),
            ("GET", "/arm/requests"): lambda: self.api.requests(),
            ("GET", "/arm/scheduledevents"): lambda: [self.ledger.row(r) for r in self.ledger.records()],
            ("GET", "/feed"): lambda: self.feed.settings(),
            ("POST", "/feed"): lambda: self.feed.update(_json(body)),
            ("GET", "/feed/events"): lambda: list(self.feed.emitted),
        }
        handler = routes.get((method, sub))
        if handler is None:
            if any(path == sub for _, path in routes):
                return 405, {"error": f"{method} not allowed on /control{sub}"}
            raise KeyError(f"no control route /control{sub}")
        result = handler()
        return (
            (204, None)
            if result is None
            else (201 if method == "POST" and sub.endswith("faults") else 200, result)
        )


def _json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
