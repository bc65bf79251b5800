"""Opsgenie Alert API requests: create an alert and close it by its alias, as pure functions.

Per Opsgenie's Alert API reference (docs.opsgenie.com, "Alert API"): requests carry
``Authorization: GenieKey <API integration key>`` (a secret) and go to ``https://api.opsgenie.com``,
or ``https://api.eu.opsgenie.com`` for an account in the EU region; both answer ``202`` with a
``requestId``, since Opsgenie processes alert requests asynchronously.

- Create: ``POST /v2/alerts`` with ``message`` (required, at most 130 characters), ``alias`` (at
  most 512: the key of Opsgenie's deduplication: a create whose alias names an open alert only
  counts up that alert; once it is closed, the same alias opens a new one), ``description``
  (15,000), ``tags`` (at most 20 of 50 characters), ``details`` (string values, 8,000 characters
  in all), ``entity`` (512), ``source`` (100) and ``priority`` (``P1`` to ``P5``, default ``P3``).
- Close: ``POST /v2/alerts/{alias}/close?identifierType=alias`` with ``source`` (100), ``user``
  (100) and ``note`` (25,000), all optional.

The agent's sinks (``sinks/opsgenie.py``) build these from a CloudEvent through ``pager.page_of``;
any other caller (a coordinator alert, with the alert's id as the alias) calls ``create`` and
``close`` directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from ..printable import strip_controls
from .pager import Page, fit, stable_key

REGIONS = {"us": "https://api.opsgenie.com", "eu": "https://api.eu.opsgenie.com"}
PRIORITIES = ("P1", "P2", "P3", "P4", "P5")
CREATE_PATH = "/v2/alerts"
MESSAGE_CHARS = 130
ALIAS_CHARS = 512
DESCRIPTION_CHARS = 15_000
TAGS, TAG_CHARS = 20, 50
DETAILS_CHARS = 8_000
ENTITY_CHARS = 512
SOURCE_CHARS = 100
NOTE_CHARS = 25_000
SOURCE = "se-forwarder"
TAG = "azure-scheduled-events"


def alias(identifier: str) -> str:
    """``identifier`` (an EventId, an alert id) as an alias: itself when it fits, else a digest."""
    return stable_key(identifier, ALIAS_CHARS)


def authorization(api_key: str) -> str:
    """The ``Authorization`` header's value."""
    return f"GenieKey {api_key}"


def create(key: str, message: str, *, priority: str = "P3", description: str = "",
           entity: str = "", tags: Sequence[str] = (), details: Mapping[str, str] | None = None,
           source: str = SOURCE) -> dict[str, Any]:
    """The create body for alert ``key`` (the alias), every field cut to its documented limit."""
    if priority not in PRIORITIES:
        raise ValueError(f"priority {priority!r} is not one of {', '.join(PRIORITIES)}")
    body: dict[str, Any] = {"message": fit(_line(message) or "Azure maintenance", MESSAGE_CHARS),
                            "alias": alias(key), "priority": priority, "source": fit(source, SOURCE_CHARS)}
    if description:
        body["description"] = fit(description, DESCRIPTION_CHARS)
    if entity:
        body["entity"] = fit(_line(entity), ENTITY_CHARS)
    kept = list(dict.fromkeys(fit(_line(t), TAG_CHARS) for t in tags if _line(t)))[:TAGS]
    if kept:
        body["tags"] = kept
    if details:
        body["details"] = _details(details)
    return body


def close_path(key: str) -> str:
    """The path (with its query) that closes alert ``key`` by its alias."""
    return f"{CREATE_PATH}/{quote(alias(key), safe='')}/close?identifierType=alias"


def close(*, note: str = "", source: str = SOURCE) -> dict[str, Any]:
    """The close body."""
    body: dict[str, Any] = {"source": fit(source, SOURCE_CHARS)}
    if note:
        body["note"] = fit(note, NOTE_CHARS)
    return body


def request(page: Page, priority: str) -> tuple[str, dict[str, Any]]:
    """(path, body) for an agent's ``Page``: its create (with ``priority``) or its close."""
    if page.action == "resolve":
        return close_path(page.key), close(note=page.summary)
    tags = [TAG, page.event_type, page.event_source]
    return CREATE_PATH, create(page.key, page.summary, priority=priority, description=page.description,
                               entity=page.source, tags=tags, details=page.details)


def _details(details: Mapping[str, str]) -> dict[str, str]:
    """String values, 8,000 characters in all (names and values): later entries are left out."""
    out: dict[str, str] = {}
    used = 0
    for name, value in details.items():
        name, value = _line(str(name)), str(value)
        if not name:
            continue
        room = DETAILS_CHARS - used - len(name)
        if room <= 0:
            break
        out[name] = fit(value, room)
        used += len(name) + len(out[name])
    return out


def _line(text: str) -> str:
    return strip_controls(text).strip()
