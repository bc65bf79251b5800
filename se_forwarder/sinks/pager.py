"""What the pager sinks (``pagerduty``, ``opsgenie``) share: on-call alerts from the outbox.

Each stored CloudEvent becomes at most one request, by ``notify.pager``'s table: ``scheduled`` and
``started`` trigger the alert keyed on the EventId, ``completed`` and ``canceled`` resolve it. The
delivery worker owns retries, backoff, ``Retry-After``, parking and the cursor, as for every sink.
What this module adds:

- **Which events page** (``PagerOptions``): ``sources`` (default Platform only; an event without
  ``EventSource`` is a Platform one, as on old api-versions), ``event_types`` (default all five) and
  ``only_this_vm`` (default true: events whose ``Resources`` name this VM, not those of its
  availability-set peers, whose own agents page for them). An ``EventSource`` or ``EventType`` the
  agent does not know pages: a page too many costs less than one missed. Anything else is
  confirmed without a request.
- **One request per delivery call**: the events that send nothing, up to and with the next one that
  sends, are confirmed together, so the cursor moves after every request and a crash repeats at
  most the one request in flight, which the service folds into the open alert by its key.
- **The key**: read when the sink is created, from the environment variable or file named, never
  from the configuration file; never logged, and cut out of any reply a reason quotes.
- **Answers**: 2xx delivered; 3xx never followed (retried, naming where it points); 408, 429, 5xx,
  timeouts and connection failures retried; what says every request will be refused (a wrong key,
  a wrong URL: the service's ``refusal``) parks the sink; any other 4xx dead-letters the event.

TLS verification is always on (``ca_file`` adds a private CA); plain http only to loopback.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, one_line
from ..event_fields import KNOWN_SOURCES, KNOWN_TYPES
from ..http_client import HttpError, Reply
from ..validation import api_url, as_bool, as_number, as_str, check_ca_file, no_unknown
from .base import (
    DeadLetter,
    Delivered,
    DeliveryReport,
    Outcome,
    Park,
    Retry,
    SinkOptions,
    StoredEvent,
    sink_name,
)
from .webhook.transport import Endpoint, retry_after, settled, snippet

if TYPE_CHECKING:  # notify loads with the first event, not when the configuration is read
    from ..notify.pager import Page

COMMON_KEYS = ("name", "url", "ca_file", "connect_timeout", "read_timeout", "sources", "event_types",
               "only_this_vm")
RETRY_STATUSES = frozenset({408, 429})
_PRINTABLE_KEY = re.compile(r"^[\x21-\x7e]{8,256}\Z")


@dataclass(frozen=True, kw_only=True)
class PagerOptions(SinkOptions):
    """The keys both pager sink types have (module docstring); the defaults are the field defaults."""

    url: str
    key_env: str | None = None  # <key>_env: the variable holding the routing key / API key
    key_file: str | None = None  # <key>_file: the file holding it
    ca_file: str | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 15.0
    sources: tuple[str, ...] = ("Platform",)
    event_types: tuple[str, ...] = KNOWN_TYPES
    only_this_vm: bool = True


def common(table: Mapping[str, Any], where: str, key: str, url: str, known: Sequence[str]) -> dict[str, Any]:
    """The common keys of ``table`` as ``PagerOptions`` arguments, after checking that every key is
    ``known``; ``key``: the secret's name (``routing_key``, ``api_key``), given as ``<key>_env`` or
    ``<key>_file``, never itself."""
    if key in table:
        raise ConfigError(f"{where}.{key}: a secret never goes in the configuration file; give "
                          f"{key}_env (an environment variable) or {key}_file (a file) instead")
    no_unknown(table, where, tuple(known))
    given = [k for k in (f"{key}_env", f"{key}_file") if k in table]
    if len(given) != 1:
        raise ConfigError(f"{where}: give exactly one of {key}_env (an environment variable) and "
                          f"{key}_file (a file) holding the {key.replace('_', ' ')}")
    source = as_str(table[given[0]], f"{where}.{given[0]}").strip()
    if not source:
        raise ConfigError(f"{where}.{given[0]}: must not be empty")
    ca_file = None
    if "ca_file" in table:
        ca_file = str(Path(as_str(table["ca_file"], f"{where}.ca_file")).expanduser())
    return {
        "name": sink_name(table, where),
        "url": api_url(table.get("url", url), f"{where}.url"),
        "key_env": source if given[0].endswith("_env") else None,
        "key_file": str(Path(source).expanduser()) if given[0].endswith("_file") else None,
        "ca_file": ca_file,
        "connect_timeout": as_number(table.get("connect_timeout", 5.0), f"{where}.connect_timeout", 0.1, 120),
        "read_timeout": as_number(table.get("read_timeout", 15.0), f"{where}.read_timeout", 0.1, 600),
        "sources": _names(table, "sources", where, KNOWN_SOURCES, ("Platform",)),
        "event_types": _names(table, "event_types", where, KNOWN_TYPES, KNOWN_TYPES),
        "only_this_vm": as_bool(table.get("only_this_vm", True), f"{where}.only_this_vm"),
    }


def by_event_type(table: Mapping[str, Any], name: str, where: str, choices: Sequence[str],
                  defaults: Mapping[str, str]) -> dict[str, str]:
    """A table of EventType -> one of ``choices`` (``severity``, ``priority``), over ``defaults``."""
    raw = table.get(name, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}.{name}: must be a table of event types, e.g. {{ Reboot = "
                          f"{json.dumps(defaults['Reboot'])} }}")
    out = dict(defaults)
    for given, value in raw.items():
        kind = next((k for k in KNOWN_TYPES if k.casefold() == str(given).casefold()), None)
        if kind is None:
            raise ConfigError(f"{where}.{name}.{given}: not an event type ({', '.join(KNOWN_TYPES)})")
        text = as_str(value, f"{where}.{name}.{given}")
        match = next((c for c in choices if c.casefold() == text.strip().casefold()), None)
        if match is None:
            raise ConfigError(f"{where}.{name}.{given}: {text!r} is not one of {', '.join(choices)}")
        out[kind] = match
    return out


def _names(table: Mapping[str, Any], name: str, where: str, known: Sequence[str],
           default: tuple[str, ...]) -> tuple[str, ...]:
    if name not in table:
        return default
    value = table[name]
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}.{name}: must be a non-empty list, e.g. {json.dumps(list(known[:2]))}")
    out = []
    for i, item in enumerate(value):
        match = next((k for k in known if isinstance(item, str) and k.casefold() == item.casefold()), None)
        if match is None:
            raise ConfigError(f"{where}.{name}[{i}]: {item!r} is not one of {', '.join(known)}")
        out.append(match)
    return tuple(dict.fromkeys(out))


def secret(options: PagerOptions, name: str, what: str, pattern: re.Pattern[str] | None = None,
           expected: str = "") -> str:
    """The secret, from the variable or the file named, once the CA bundle is checked; ConfigError
    naming the source (never the value) when it is missing, unreadable, not one line, or not of the
    ``pattern`` ``expected``."""
    where = f"sink {name!r}"
    if options.ca_file:
        check_ca_file(options.ca_file, f"{where} ca_file")
    if options.key_env is not None:
        origin = f"${options.key_env}"
        text = os.environ.get(options.key_env, "").strip()
        if not text:
            raise ConfigError(f"{where}: environment variable {options.key_env} (the {what}) is not "
                              "set or empty")
    else:
        assert options.key_file is not None
        origin = options.key_file
        try:
            content = Path(options.key_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: cannot read the {what} from {options.key_file}: "
                              f"{one_line(exc)}") from None
        lines = [ln.strip() for ln in content.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        if len(lines) != 1:
            raise ConfigError(f"{where}: {options.key_file} must hold the {what} on one line "
                              f"(it holds {len(lines)} lines besides # comments)")
        text = lines[0]
    if not _PRINTABLE_KEY.match(text) or (pattern is not None and not pattern.match(text)):
        raise ConfigError(f"{where}: the {what} from {origin} is not {expected or 'a key'} "
                          f"({len(text)} characters read; the value is not shown)")
    return text


class Service(Protocol):
    """What a pager service adds to ``PagerSink``: its requests and what refuses them all."""

    label: str  # "PagerDuty", "Opsgenie"

    def request(self, page: Page) -> tuple[str | None, dict[str, str], bytes]:
        """(path or None for the URL's own, headers, body) of the request for one page."""
        ...

    def refusal(self, status: int, text: str, closing: bool) -> str | Delivered | None:
        """Why every request will be refused (the sink parks), Delivered when the answer means
        there is nothing left to do, or None."""
        ...

    def probe(self) -> tuple[str, str | None]:
        """(method, path or None) of a request that changes nothing, for ``se-forwarder check``."""
        ...

    def probed(self, status: int) -> str | None:
        """What the probe's answer says is wrong, or None."""
        ...


class PagerSink:
    """Alerts to one pager service; one outcome per event, at most one request per call."""

    max_batch = 100

    def __init__(self, name: str, options: PagerOptions, service: Service, key: str,
                 headers: Mapping[str, str] | None = None) -> None:
        self.name = name
        self._options, self._service, self._key = options, service, key
        self._endpoint = Endpoint(options.url, headers=dict(headers or {}), ca_file=options.ca_file,
                                  connect_timeout=options.connect_timeout, read_timeout=options.read_timeout)
        self._sources = {s.casefold() for s in options.sources}
        self._types = {t.casefold() for t in options.event_types}

    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport:
        outcomes: list[Outcome] = []
        for event in batch:
            page = self._page(event)
            if isinstance(page, Delivered | DeadLetter):
                outcomes.append(page)
                continue
            outcomes.append(self._scrub(self._send(page)))
            break
        return DeliveryReport(outcomes)

    def check(self) -> str | None:
        """One request that changes nothing: reachable, TLS verified (and, where the service can
        say without an alert, the key not refused)."""
        method, target = self._service.probe()
        try:
            reply = self._endpoint.request(method, self._endpoint.headers(), target=target)
        except HttpError as exc:
            return self._endpoint.failure(exc).reason
        problem = self._service.probed(reply.status)
        return f"HTTP {reply.status} from {self._endpoint.where}: {problem}" if problem else None

    def close(self) -> None:
        self._endpoint.close()

    # -- which events page ----------------------------------------------------------------------
    def _page(self, event: StoredEvent) -> Page | Delivered | DeadLetter:
        """The page for ``event``; Delivered when it pages nothing."""
        from ..notify.pager import page_of

        try:
            cloud = json.loads(event.payload)
        except ValueError as exc:
            return DeadLetter(f"stored event is not JSON: {exc}")
        page = page_of(cloud, datetime.now(UTC))
        if page is None or not self._wanted(page):
            return Delivered()
        return page

    def _wanted(self, page: Page) -> bool:
        source = page.event_source.casefold() or "platform"
        if source in {s.casefold() for s in KNOWN_SOURCES} and source not in self._sources:
            return False
        kind = page.event_type.casefold()
        if kind in {t.casefold() for t in KNOWN_TYPES} and kind not in self._types:
            return False
        return bool(page.affects_this_vm or not self._options.only_this_vm)

    # -- one request ----------------------------------------------------------------------------
    def _send(self, page: Page) -> Outcome:
        try:
            target, headers, body = self._service.request(page)
        except Exception as exc:  # noqa: BLE001 - a builder bug must not stop the sink
            return DeadLetter(f"cannot build the {self._service.label} request: {type(exc).__name__}: {exc}")
        try:
            all_headers = {**self._endpoint.headers(), **headers}
            reply = self._endpoint.request("POST", all_headers, body, target=target)
        except HttpError as exc:
            return self._endpoint.failure(exc)
        return self._classify(reply, page.action == "resolve")

    def _classify(self, reply: Reply, closing: bool) -> Outcome:
        status = reply.status
        label, outcome = settled(reply, self._endpoint.where)
        if outcome is not None:
            return outcome
        refused = self._service.refusal(status, _text(reply.body), closing)
        if isinstance(refused, Delivered):
            return refused
        if refused:
            return Park(f"{label}{snippet(reply.body)}: {refused}")
        if status in RETRY_STATUSES or status >= 500:
            return Retry(label + snippet(reply.body), retry_after(reply.header("Retry-After")))
        return DeadLetter(label + snippet(reply.body))

    def _scrub(self, outcome: Outcome) -> Outcome:
        """The outcome with the key cut out of its reason, should a reply have quoted it."""
        if isinstance(outcome, Retry) and self._key in outcome.reason:
            return Retry(self._hide(outcome.reason), outcome.after)
        if isinstance(outcome, Park) and self._key in outcome.reason:
            return Park(self._hide(outcome.reason))
        if isinstance(outcome, DeadLetter) and self._key in outcome.reason:
            return DeadLetter(self._hide(outcome.reason))
        return outcome

    def _hide(self, text: str) -> str:
        return text.replace(self._key, "***")


def _text(body: bytes) -> str:
    return " ".join(body.decode("utf-8", "replace").split())


__all__ = ["COMMON_KEYS", "PagerOptions", "PagerSink", "Service", "by_event_type", "common", "secret"]
