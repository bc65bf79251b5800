"""Scenario files: a timeline of events (and faults) the simulator plays back.

A scenario is a TOML or JSON file (built-in ones live in ``scenarios/``, named after the file)::

    description = "One line shown by --list-scenarios"
    new_event_id_per_state = false  # true: an event shows a new EventId once Started, as
                                    # Microsoft's mock server does
    [params]                      # optional, overridable: --param notice=600
    notice = 300
    [[events]]                    # one event's life cycle
    ref = "terminate"             # optional name for [[actions]]
    at = 0                        # offset, simulated seconds after the scenario starts
    EventType = "Terminate"       # any IMDS field, plus NotBeforeInSeconds / StartedSeconds
    NotBeforeInSeconds = "{notice}"
    Resources = ["{vm}"]          # {vm} first VM, {vmN} N-th VM, {vms} all VMs
    cancel_at = 200               # optional: removed at this offset if still Scheduled
    remove_at = 900               # optional: removed at this offset whatever its status
    start_at = 100                # optional: Started at this offset if still Scheduled
    [[actions]]                   # optional free steps
    at = 60
    do = "fault"                  # add | patch | delete | cancel | start | reset | fault |
    fault = { status = 503, count = 2 }   #   incarnation_reset
All offsets are simulated seconds, divided by the simulator's time scale.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from se_forwarder.errors import ConfigError
from se_forwarder.simulator.faults import FaultError, parse_fault
from se_forwarder.simulator.wire import EVENT_INPUT_KEYS, check_event_fields

ACTIONS = ("add", "patch", "delete", "cancel", "start", "reset", "fault", "incarnation_reset")
_TOP_KEYS = ("name", "description", "details", "params", "events", "actions", "new_event_id_per_state")
_EVENT_TIMING = ("ref", "at", "cancel_at", "remove_at", "start_at")
_ACTION_KEYS = ("at", "do", "event", "ref", "fault", "to", "fields")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ScenarioError(ConfigError, ValueError):
    """A scenario that cannot be loaded or played; the message is one line naming the problem."""


@dataclass(frozen=True)
class Step:
    """One timed change: ``at`` simulated seconds after the start, do ``action``."""

    at: float
    action: str
    ref: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario; ``compile`` turns it into steps for a given set of VMs."""

    name: str
    description: str
    details: str
    params: dict[str, Any]
    events: tuple[dict[str, Any], ...]
    actions: tuple[dict[str, Any], ...]
    source: str
    new_event_id_per_state: bool = False  # each event shows a new EventId once Started

    def compile(self, vm_names: Sequence[str], params: Mapping[str, Any] | None = None) -> list[Step]:
        """The timeline as steps sorted by time, placeholders filled in; ScenarioError if bad."""
        values = dict(self.params)
        for key, value in (params or {}).items():
            if key not in self.params:
                known = ", ".join(sorted(self.params)) or "none"
                raise ScenarioError(f"scenario {self.name}: unknown parameter {key!r} (known: {known})")
            values[key] = _coerce_param(value)
        names = list(vm_names)
        steps: list[Step] = []
        for i, raw in enumerate(self.events):
            where = f"scenario {self.name}: events[{i}]"
            event = _substitute(raw, values, names, where)
            fields = {k: v for k, v in event.items() if k not in _EVENT_TIMING}
            fields = _checked(fields, where)
            at = _offset(event, "at", where, default=0.0)
            ref = _ref(event, "ref", where) or f"events[{i}]"
            steps.append(Step(at, "add", ref, fields))
            for key, action in (("start_at", "start"), ("cancel_at", "cancel"), ("remove_at", "delete")):
                if key in event:
                    steps.append(Step(_offset(event, key, where), action, ref))
        for i, raw in enumerate(self.actions):
            where = f"scenario {self.name}: actions[{i}]"
            steps.append(_action_step(_substitute(raw, values, names, where), where))
        refs = {s.ref for s in steps if s.action == "add"}
        for s in steps:
            if s.action in ("patch", "delete", "cancel", "start") and s.ref not in refs:
                raise ScenarioError(f"scenario {self.name}: action {s.action} names unknown event {s.ref!r}")
        return sorted(steps, key=lambda s: s.at)

    def duration(self, vm_names: Sequence[str] = ("vm0",)) -> float:
        """The offset of the last step, in simulated seconds."""
        steps = self.compile(vm_names)
        return steps[-1].at if steps else 0.0


def _coerce_param(value: Any) -> Any:
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
    return value


def _offset(entry: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    if key not in entry:
        if default is None:
            raise ScenarioError(f"{where}: missing {key!r}")
        return default
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ScenarioError(f"{where}: {key} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _ref(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise ScenarioError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _checked(fields: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        return check_event_fields(fields)
    except ValueError as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def _action_step(action: dict[str, Any], where: str) -> Step:
    unknown = sorted(set(action) - set(_ACTION_KEYS) - set(EVENT_INPUT_KEYS))
    if unknown:
        raise ScenarioError(f"{where}: unknown key {unknown[0]!r}")
    do = action.get("do")
    if do not in ACTIONS:
        raise ScenarioError(f"{where}: 'do' must be one of {', '.join(ACTIONS)}, got {do!r}")
    at = _offset(action, "at", where)
    fields = {k: v for k, v in action.items() if k in EVENT_INPUT_KEYS}
    if "fields" in action:
        if not isinstance(action["fields"], dict):
            raise ScenarioError(f"{where}: 'fields' must be a table of event fields")
        fields.update(action["fields"])
    _ref(action, "ref", where)
    _ref(action, "event", where)
    if do in ("add", "patch"):
        ref = action.get("ref") if do == "add" else action.get("event")
        if do == "patch" and not ref:
            raise ScenarioError(f"{where}: patch needs 'event' (the ref of an event)")
        return Step(at, do, ref or f"{where}", _checked(fields, where))
    if do in ("delete", "cancel", "start"):
        if not action.get("event"):
            raise ScenarioError(f"{where}: {do} needs 'event' (the ref of an event)")
        return Step(at, do, action["event"])
    if do == "fault":
        try:
            parse_fault(action.get("fault"))
        except FaultError as exc:
            raise ScenarioError(f"{where}: {exc}") from None
        return Step(at, do, None, dict(action["fault"]))
    if do == "incarnation_reset":
        to = action.get("to", 1)
        if isinstance(to, bool) or not isinstance(to, int) or to < 0:
            raise ScenarioError(f"{where}: 'to' must be an integer >= 0, got {to!r}")
        return Step(at, do, None, {"to": to})
    return Step(at, do)


def _substitute(value: Any, params: Mapping[str, Any], vms: list[str], where: str) -> Any:
    """Fill ``{name}`` placeholders: params, ``{vm}``, ``{vmN}``, and ``{vms}`` in lists."""
    if isinstance(value, dict):
        return {k: _substitute(v, params, vms, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        out: list[Any] = []
        for item in value:
            if item == "{vms}":
                out.extend(vms)
            else:
                out.append(_substitute(item, params, vms, where))
        return out
    if not isinstance(value, str):
        return value

    def lookup(name: str) -> Any:
        if name in params:
            return params[name]
        if name == "vm":
            return vms[0]
        match = re.fullmatch(r"vm(\d+)", name)
        if match:
            n = int(match.group(1))
            # an availability-set peer this simulator does not serve, when there are fewer VMs
            return vms[n] if n < len(vms) else f"{vms[0]}-peer{n}"
        raise ScenarioError(f"{where}: unknown placeholder {{{name}}}")

    whole = _PLACEHOLDER.fullmatch(value)
    if whole:
        return lookup(whole.group(1))
    return _PLACEHOLDER.sub(lambda m: str(lookup(m.group(1))), value)


# --- loading -----------------------------------------------------------------------------------


def scenario_from_mapping(data: Any, name: str, source: str) -> Scenario:
    """A Scenario from parsed TOML/JSON, structure checked; ScenarioError naming the problem."""
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario {name}: the top level must be a table/object")
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise ScenarioError(
            f"scenario {name}: unknown top-level key {unknown[0]!r} (known: {', '.join(_TOP_KEYS)})"
        )
    name = data.get("name", name)
    if not isinstance(name, str) or not name:
        raise ScenarioError(f"scenario {source}: 'name' must be a non-empty string")
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise ScenarioError(f"scenario {name}: 'params' must be a table")
    lists: dict[str, tuple[dict[str, Any], ...]] = {}
    for key in ("events", "actions"):
        entries = data.get(key, [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ScenarioError(f"scenario {name}: {key!r} must be a list of tables ([[{key}]])")
        lists[key] = tuple(entries)
    if not lists["events"] and not lists["actions"]:
        raise ScenarioError(f"scenario {name}: no [[events]] and no [[actions]]")
    for i, event in enumerate(lists["events"]):
        bad = sorted(set(event) - set(EVENT_INPUT_KEYS) - set(_EVENT_TIMING))
        if bad:
            raise ScenarioError(f"scenario {name}: events[{i}]: unknown key {bad[0]!r}")
    for key in ("description", "details"):
        if not isinstance(data.get(key, ""), str):
            raise ScenarioError(f"scenario {name}: {key!r} must be a string")
    if not isinstance(data.get("new_event_id_per_state", False), bool):
        raise ScenarioError(f"scenario {name}: 'new_event_id_per_state' must be true or false")
    scenario = Scenario(
        name=name,
        description=data.get("description", ""),
        details=data.get("details", ""),
        params=dict(params),
        events=lists["events"],
        actions=lists["actions"],
        source=source,
        new_event_id_per_state=data.get("new_event_id_per_state", False),
    )
    scenario.compile(("vm0",))  # catch field errors now, not halfway through a run
    return scenario


def _builtin_dir() -> Any:
    return resources.files("se_forwarder.simulator").joinpath("scenarios")


def builtin_names() -> list[str]:
    """Names of the built-in scenarios, sorted."""
    return sorted(p.name[:-5] for p in _builtin_dir().iterdir() if p.name.endswith(".toml"))


def builtin_scenarios() -> list[Scenario]:
    """Every built-in scenario, parsed."""
    return [load_scenario(name) for name in builtin_names()]


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by name, or a scenario file (.toml or .json) by path."""
    text_name = str(name_or_path)
    if text_name in builtin_names():
        entry = _builtin_dir().joinpath(f"{text_name}.toml")
        return _parse_text(entry.read_text(encoding="utf-8"), text_name, "toml", "built-in")
    path = Path(name_or_path)
    if not path.exists():
        raise ScenarioError(
            f"scenario {text_name!r}: no such file and not a built-in name "
            f"(built-in: {', '.join(builtin_names())})"
        )
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ScenarioError(f"scenario file {path}: must end in .toml or .json")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"scenario file {path}: cannot read it: {exc}") from None
    return _parse_text(text, path.stem, suffix[1:], str(path))


def _parse_text(text: str, name: str, fmt: str, source: str) -> Scenario:
    try:
        data = tomllib.loads(text) if fmt == "toml" else json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"scenario file {source}: invalid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"scenario file {source}: invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    try:
        return scenario_from_mapping(data, name, source)
    except ScenarioError as exc:
        if source == "built-in":
            raise
        message = str(exc).replace(f"scenario {data.get('name', name)}:", "", 1).strip()
        raise ScenarioError(f"scenario file {source}: {message}") from None
