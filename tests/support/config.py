"""Config files for the agent and the coordinator, written as TOML."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def toml_value(value: object) -> str:
    """A Python value as TOML (strings, numbers, booleans, lists, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value))


def write_config(path: Path, sinks: Iterable[dict[str, Any]] = (),
                 **sections: dict[str, Any] | list[dict[str, Any]]) -> Path:
    """A TOML config file: a ``[section]`` table for each keyword argument given a dict, an array of
    ``[[section]]`` tables for one given a list of dicts, then a ``[[sinks]]`` table per sink.
    Dotted section names (``**{"approvals.hooks": {...}}``) name sub-tables."""
    lines: list[str] = []
    for name, content in sections.items():
        tables = content if isinstance(content, list) else [content]
        header = f"[[{name}]]" if isinstance(content, list) else f"[{name}]"
        for table in tables:
            lines.append(header)
            lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    for sink in sinks:
        lines.append("[[sinks]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in sink.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_agent_config(path: Path, *, imds_url: str, state_dir: Path, sink_path: Path,
                       poll_interval: float | None = 0.1, approvals: dict[str, Any] | None = None,
                       rules: list[dict[str, Any]] | None = None, hooks: dict[str, Any] | None = None,
                       queue: dict[str, Any] | None = None) -> Path:
    """An agent config file: the simulator as IMDS, a file sink, JSON debug logs, and the given
    approvals (its rules, hooks and queue)."""
    imds: dict[str, Any] = {"url": imds_url}
    if poll_interval is not None:
        imds["poll_interval"] = poll_interval
    sections: dict[str, Any] = {
        "imds": imds, "state": {"dir": str(state_dir)},
        "telemetry": {"log_format": "json", "log_level": "debug"},
        "approvals": dict(approvals or {}),
    }
    if rules:
        sections["approvals.rules"] = list(rules)
    if hooks:
        sections["approvals.hooks"] = hooks
    if queue:
        sections["approvals.queue"] = queue
    return write_config(path, [{"type": "file", "path": str(sink_path)}], **sections)
