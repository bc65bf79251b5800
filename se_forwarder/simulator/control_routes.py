"""The simulator's ``/control`` API: add, change and remove events, faults, scenarios, settings.

Routes (on the IMDS port, under ``/control``; see ``design.md``)::

    GET /control                       where everything is
    POST|GET /control/events           add an event (201) / list them
    GET|PATCH|DELETE /control/events/{EventId}
    GET /control/approvals             the StartRequests received
    GET /control/history               every event's life: added, started (how), ended (history.py)
    GET|POST|DELETE /control/faults    armed faults (see ``faults.py``)
    GET|POST /control/scenario         the playing scenario / start one
    GET /control/scenarios             the built-in scenarios
    POST /control/reset                empty document, incarnation still going up
    GET /control/requests?vm=&limit=   the IMDS requests received
    GET|POST /control/settings         throttle_rps, first_call_delay, multi_tenant, instance_endpoint,
                                       etag, not_before_format

``handle`` returns (status, JSON data); KeyError means 404 and ValueError 400 to the HTTP layer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from se_forwarder.simulator.faults import FaultError
from se_forwarder.simulator.host import SimulatorHost
from se_forwarder.simulator.scenarios import ScenarioError, builtin_scenarios
from se_forwarder.simulator.wire import not_before_format_setting

INSTANCE_MODES = ("ok", "missing", "hang")


class ControlApi:
    """The control API of one simulator (``server.SimulatorServer``, through its interface)."""

    def __init__(self, server: SimulatorHost) -> None:
        self.server = server

    def handle(
        self, method: str, sub: str, query: Mapping[str, str], body: bytes, vm: str | None
    ) -> tuple[int, Any]:
        """Handle ``/control<sub>``; returns (status, JSON data). KeyError -> 404, ValueError -> 400."""
        sim = self.server.sim
        routes: dict[tuple[str, str], Any] = {
            ("GET", ""): lambda: (200, self.describe()),
            ("GET", "/events"): lambda: (
                200,
                {"DocumentIncarnation": sim.incarnation, "Events": sim.events()},
            ),
            ("POST", "/events"): lambda: (201, sim.add_event(_json_body(body, default={}), vm=vm)),
            ("GET", "/approvals"): lambda: (200, sim.approvals()),
            ("GET", "/history"): lambda: (200, self.server.history.as_data()),
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
        azure_routes = (["arm"], ["feed"], ["health"], ["alerts"])
        if sub.split("/")[1:2] in azure_routes and self.server.azure is not None:
            return self.server.azure.control(method, sub, body)  # Azure's side (azure_side.py)
        raise KeyError(f"no control route /control{sub}")

    def _clear_faults(self) -> tuple[int, None]:
        self.server.sim.clear_faults()
        return 204, None

    def _add_faults(self, spec: Any) -> dict[str, Any] | list[dict[str, Any]]:
        if not isinstance(spec, list):
            return self.server.sim.add_fault(spec) if isinstance(spec, dict) else _bad_fault(spec)
        return [self.server.sim.add_fault(s) if isinstance(s, dict) else _bad_fault(s) for s in spec]

    def _start_scenario(self, spec: Any) -> dict[str, Any]:
        if not isinstance(spec, dict):
            raise ValueError('the body must be {"name": "<built-in scenario>", "params": {...}}')
        params = spec.get("params") or {}
        if not isinstance(params, dict):
            raise ValueError("params must be an object")
        start = spec.get("start", "first-poll")  # the engine names a bad value
        new_ids = spec.get("new_event_id_per_state")
        if new_ids is not None and not isinstance(new_ids, bool):
            raise ValueError("new_event_id_per_state must be true or false")
        if isinstance(spec.get("scenario"), dict):
            return self.server.sim.start_scenario(spec["scenario"], params, start=start,
                                                  new_event_id_per_state=new_ids)
        name = spec.get("name")
        builtin = [s.name for s in builtin_scenarios()]
        if name not in builtin:
            raise ScenarioError(
                f"unknown scenario {name!r} (built-in: {', '.join(builtin)}); "
                'send {"scenario": {...}} for your own'
            )
        return self.server.sim.start_scenario(name, params, start=start,
                                              new_event_id_per_state=new_ids)

    def settings(self) -> dict[str, Any]:
        """The IMDS behaviour knobs, as ``GET /control/settings`` shows them."""
        return {
            "vm_names": list(self.server.sim.vm_names),
            "time_scale": self.server.sim.time_scale,
            "throttle_rps": self.server.throttle_rps,
            "first_call_delay": self.server.first_call_delay,
            "multi_tenant": self.server.sim.multi_tenant,
            "instance_endpoint": self.server.instance_endpoint,
            "etag": self.server.etag,
            "not_before_format": self.server.sim.not_before_format,
        }

    def update_settings(self, spec: Any) -> dict[str, Any]:
        """Change throttle_rps, first_call_delay, multi_tenant, instance_endpoint, etag or
        not_before_format at run time."""
        if not isinstance(spec, dict):
            raise ValueError("the body must be a JSON object")
        known = ("throttle_rps", "first_call_delay", "multi_tenant", "instance_endpoint", "etag",
                 "not_before_format")
        unknown = sorted(set(spec) - set(known))
        if unknown:
            raise ValueError(f"unknown setting {unknown[0]!r} (known: {', '.join(known)})")
        if "instance_endpoint" in spec:
            mode = instance_mode(spec["instance_endpoint"])
        if "not_before_format" in spec:
            not_before_format = not_before_format_setting(spec["not_before_format"])
        for key in ("throttle_rps", "first_call_delay"):
            value = spec.get(key)
            if (
                key in spec
                and value is not None
                and (isinstance(value, bool) or not isinstance(value, int | float))
            ):
                raise ValueError(f"{key} must be a number, got {value!r}")
        for key in ("multi_tenant", "etag"):
            if key in spec and not isinstance(spec[key], bool):
                raise ValueError(f"{key} must be true or false")
        if "throttle_rps" in spec:
            self.server.throttle_rps = spec["throttle_rps"]
        if "first_call_delay" in spec:
            self.server.first_call_delay = float(spec["first_call_delay"] or 0)
        if "multi_tenant" in spec:
            self.server.sim.multi_tenant = spec["multi_tenant"]
        if "instance_endpoint" in spec:
            self.server.instance_endpoint = mode
        if "etag" in spec:
            self.server.etag = spec["etag"]
        if "not_before_format" in spec:
            self.server.sim.not_before_format = not_before_format
        return self.settings()

    def describe(self) -> dict[str, Any]:
        """``GET /control``: where everything is."""
        return {
            "imds": {name: self.server.vm_url(name) for name in self.server.sim.vm_names},
            "url": self.server.url,
            "settings": self.settings(),
            "routes": [
                "POST /control/events",
                "GET /control/events",
                "GET|PATCH|DELETE /control/events/{id}",
                "GET /control/approvals",
                "GET /control/history",
                "GET|POST|DELETE /control/faults",
                "GET|POST /control/scenario",
                "GET /control/scenarios",
                "POST /control/reset",
                "GET /control/requests?vm=&limit=",
                "GET|POST /control/settings",
                "GET /control/topology",
            ],
        }


def instance_mode(value: Any) -> str:
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


def _json_body(body: bytes, *, default: Any = None) -> Any:
    if not body.strip():
        if default is None:
            raise ValueError("a JSON body is required")
        return default
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
