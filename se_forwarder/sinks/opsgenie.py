"""opsgenie sink: one Opsgenie alert per scheduled event, through the Alert API.

``scheduled`` and ``started`` create the alert and ``completed`` and ``canceled`` close it, all with
the EventId as its ``alias`` (``notify/opsgenie.py`` builds the requests; what pages, the key and the
answers are ``pager.py``'s). The priority is chosen by event type (``priority``, over ``PRIORITY``);
``region`` picks Opsgenie's US or EU endpoint (``url`` replaces it, e.g. for tests); the API key
(of an API integration) comes from ``api_key_env`` or ``api_key_file``; ``tags`` are added to each
alert's own.

Opsgenie's answers: ``202`` accepted (it then processes the request asynchronously); ``400`` and
``422`` dead-letter the event; ``429`` and 5xx are retried; ``401`` (a wrong key, or a key of the
other region), ``403`` (the integration may not create or close alerts, or is disabled) and ``404``
(not the Alert API: check ``url``) park the sink; a close answered "does not exist" has nothing
left to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..notify.opsgenie import PRIORITIES, REGIONS, TAG_CHARS
from ..validation import as_choice, as_str, public_url
from .base import Delivered
from .pager import COMMON_KEYS, PagerOptions, PagerSink, by_event_type, common, secret

if TYPE_CHECKING:
    from ..notify.pager import Page

KNOWN_KEYS = (*COMMON_KEYS, "api_key_env", "api_key_file", "region", "priority", "tags")
#: The priority of each event type unless ``priority`` says otherwise; an unknown type: UNKNOWN.
PRIORITY = {"Freeze": "P5", "Reboot": "P3", "Redeploy": "P2", "Preempt": "P1", "Terminate": "P3"}
UNKNOWN = "P3"
MAX_TAGS = 17  # of Opsgenie's 20: the sink's own three come first
PARK_STATUSES = {
    401: "Opsgenie refuses the API key (a key of an EU account works only with region = \"eu\")",
    403: "Opsgenie does not let this key create or close alerts: the API integration needs Create "
         "and Update access and must be enabled",
    404: "no Opsgenie Alert API at this URL: check url or region",
}


@dataclass(frozen=True, kw_only=True)
class OpsgenieOptions(PagerOptions):
    """One ``[[sinks]] type = "opsgenie"`` table, checked."""

    region: str = "us"
    priority: Mapping[str, str] = field(default_factory=lambda: dict(PRIORITY))
    tags: tuple[str, ...] = ()

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> OpsgenieOptions:
        if "url" in table and "region" in table:
            raise ConfigError(f"{where}: give region or url, not both (url replaces the region's endpoint)")
        region = as_choice(table.get("region", "us"), f"{where}.region", tuple(REGIONS))
        return cls(**common(table, where, "api_key", REGIONS[region], KNOWN_KEYS),
                   region=region, priority=by_event_type(table, "priority", where, PRIORITIES, PRIORITY),
                   tags=_tags(table.get("tags", []), f"{where}.tags"))


def _tags(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_TAGS:
        raise ConfigError(f"{where}: must be a list of at most {MAX_TAGS} tags, e.g. [\"team-infra\"]")
    for i, tag in enumerate(value):
        text = as_str(tag, f"{where}[{i}]")
        if not text.strip() or len(text) > TAG_CHARS or any(c.isspace() or c == "," for c in text):
            raise ConfigError(f"{where}[{i}]: {text!r} is not a tag (1 to {TAG_CHARS} characters, "
                              "no spaces or commas)")
    return tuple(dict.fromkeys(value))


class Opsgenie:
    """The Alert API side of ``PagerSink``."""

    label = "Opsgenie"

    def __init__(self, options: OpsgenieOptions) -> None:
        self._priority, self._tags = dict(options.priority), options.tags
        self._prefix = urlsplit(options.url).path.rstrip("/")

    def request(self, page: Page) -> tuple[str | None, dict[str, str], bytes]:
        from ..notify import opsgenie

        path, body = opsgenie.request(page, self._priority.get(page.event_type, UNKNOWN))
        if self._tags and "tags" in body:
            body["tags"] = list(dict.fromkeys([*body["tags"], *self._tags]))[: opsgenie.TAGS]
        data = json.dumps(body, separators=(",", ":")).encode()
        return self._prefix + path, {"Content-Type": "application/json"}, data

    def refusal(self, status: int, text: str, closing: bool) -> str | Delivered | None:
        if closing and status == 404 and "not exist" in text.casefold():
            return Delivered()  # no such alert: nothing is left open
        return PARK_STATUSES.get(status)

    def probe(self) -> tuple[str, str | None]:
        # Get Request Status of a request that never was: 404 with a valid key, 401 without one.
        return "GET", self._prefix + "/v2/alerts/requests/00000000-0000-0000-0000-000000000000"

    def probed(self, status: int) -> str | None:
        return PARK_STATUSES[401] if status == 401 else None


def validate(options: dict[str, Any], where: str) -> OpsgenieOptions:
    """Every key checked cheaply; the API key is read when the sink is created."""
    return OpsgenieOptions.parse(options, where)


def create(name: str, options: OpsgenieOptions, ctx: Any) -> PagerSink:
    """Read the API key and check the CA bundle now (a missing one stops the start)."""
    from ..notify.opsgenie import authorization

    key = secret(options, name, "API key", expected="an Opsgenie API key (8 or more printable characters)")
    return PagerSink(name, options, Opsgenie(options), key, headers={"Authorization": authorization(key)})


def default_name(options: Mapping[str, Any]) -> str:
    return f"opsgenie:{public_url(str(options.get('url', REGIONS['us'])))}"
