"""Sinks: where CloudEvents go. Each type lives in its own module, imported only when configured.

A sink module provides ``validate(table, where) -> options`` (cheap, no heavy imports: the options
are a frozen ``base.SinkOptions`` dataclass, checked once) and ``create(name, options, ctx) -> Sink``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from ..errors import ConfigError
from ..validation import public_url
from .base import Sink, SinkOptions

SINK_TYPES = ("stdout", "file", "webhook", "eventhubs", "logs-ingestion", "pagerduty", "opsgenie")


Signer = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class SinkContext:
    """What a sink may need from the agent besides its own options.

    ``sign`` adds the agent's ``keyid`` and ``signature`` to a structured-mode CloudEvent
    (``docs/identity.md``); the Event Hubs sink signs every event it sends with it.
    ``eventhubs_producer`` makes the Event Hubs sink's producer client in place of the SDK's (the
    fleet demo's in-process hub, handed in by code: no configuration key selects it).
    """

    state_dir: Path
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    sign: Signer | None = None
    eventhubs_producer: Callable[[], Any] | None = None


def _module(kind: str) -> ModuleType:
    name = f"se_forwarder.sinks.{kind.replace('-', '_')}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise ConfigError(f"sink type {kind!r} is not available in this installation") from exc
        raise ConfigError(
            f"sink type {kind!r} needs the package {exc.name!r}; "
            f"install it with: pip install 'se-forwarder[{kind}]'"
        ) from exc


def validate(kind: str, options: dict[str, Any], where: str) -> SinkOptions:
    module = _module(kind)
    try:
        return module.validate(dict(options), where)
    except ValueError as exc:  # e.g. urlsplit("http://[::1"): still one line naming the sink
        raise ConfigError(f"{where}: {exc}") from exc


def create(kind: str, name: str, options: SinkOptions, ctx: SinkContext) -> Sink:
    return _module(kind).create(name, options, ctx)


def default_name(kind: str, options: Mapping[str, Any]) -> str:
    """A stable name (it keys the delivery cursor) that never contains a secret."""
    if kind == "file":
        return f"file:{options['path']}"
    if kind == "webhook":
        return f"webhook:{public_url(str(options.get('url', '')))}"
    if kind == "eventhubs":
        namespace = options.get("fully_qualified_namespace")
        hub = options.get("eventhub", "")
        return f"eventhubs:{namespace}/{hub}" if namespace else f"eventhubs:{hub}"
    if kind in ("logs-ingestion", "pagerduty", "opsgenie"):
        return _module(kind).default_name(options)
    return kind
