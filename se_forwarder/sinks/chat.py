"""The webhook sink's chat formats: ``format = "teams"`` (Adaptive Card for a Teams Workflows webhook)
and ``format = "slack"`` (Block Kit for a Slack incoming webhook).

What changes against the CloudEvents formats, and nothing else (retries, outbox, dead letters, 410,
TLS, URL masking stay the webhook sink's):

- the body is ``se_forwarder.notify``'s JSON (``Content-Type: application/json``), one message per
  event; no Standard Webhooks headers (neither service checks them: a secret is refused at start);
- heartbeats, and types left out of ``events``, are confirmed without sending anything;
- a hook that refuses every message is parked, not used to dead-letter the whole backlog: 401, 403
  and 404 (a deleted or disabled workflow, a revoked Slack hook), and Slack's answers ``no_service``,
  ``invalid_token``, ``channel_not_found``, ``channel_is_archived``, ``action_prohibited``,
  ``team_disabled``. A message Slack or Teams cannot take (400 ``invalid_payload``) is dead-lettered;
  429 and 5xx are retried as for any webhook;
- Slack takes about one message a second per hook, so a Slack sink spaces its POSTs by a second.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import ConfigError
from ..model import TYPE_PREFIX, Kind
from ..validation import as_choice
from .base import DeadLetter, Delivered, Park, StoredEvent

FORMATS = ("teams", "slack")  # notify.FORMATS; notify loads only for a chat sink (about 1 MB)
ALL_FORMATS = ("cloudevents", *FORMATS)
CONTENT_TYPE = "application/json"
# Heartbeats and identity events never reach a chat sink.
AGENT_TYPES = tuple(k.value for k in Kind if k not in (Kind.HEARTBEAT, Kind.IDENTITY))
DECISIONS = tuple(f"coordinator.{a}" for a in
                  ("approve", "defer", "breach", "pause", "resume", "hold", "release"))
EVENT_CHOICES = AGENT_TYPES + DECISIONS
PARK_STATUSES = frozenset({401, 403, 404, 410})
SLACK_GONE = frozenset({"no_service", "invalid_token", "channel_not_found", "channel_is_archived",
                        "action_prohibited", "team_disabled", "no_team"})
SLACK_INTERVAL = 1.0
_REMEMBERED_STARTS = 10_000


def validate(table: Mapping[str, Any], where: str) -> tuple[str, tuple[str, ...] | None]:
    """(``format``, ``events``) of a webhook table; with a chat format, the CloudEvents-only keys
    are refused."""
    fmt = as_choice(table.get("format", "cloudevents"), f"{where}.format", ALL_FORMATS)
    if fmt == "cloudevents":
        if "events" in table:
            raise ConfigError(f'{where}.events: only applies to format = "teams" or "slack"')
        return fmt, None
    for key in ("secret_env", "secret_file"):
        if key in table:
            raise ConfigError(
                f'{where}.{key}: format = "{fmt}" sends no Standard Webhooks signature '
                f"({fmt} hooks do not check one; the URL is the secret): remove {key}"
            )
    for key in ("mode", "batch_max_events", "batch_max_bytes"):
        if key in table:
            raise ConfigError(f'{where}.{key}: does not apply to format = "{fmt}" (one message per event)')
    if table.get("handshake") is True:
        raise ConfigError(f'{where}.handshake: {fmt} hooks do not answer the CloudEvents handshake')
    return fmt, (_events(table["events"], f"{where}.events") if "events" in table else None)


def _events(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: must be a non-empty list, e.g. [\"scheduled\", \"started\"]")
    for i, item in enumerate(value):
        if item not in EVENT_CHOICES:
            raise ConfigError(f"{where}[{i}]: {item!r} is not one of {', '.join(EVENT_CHOICES)}")
    return tuple(dict.fromkeys(value))


class ChatFormat:
    """Per-sink state of a chat format: which events go out, and when each event started."""

    def __init__(self, fmt: str, events: Sequence[str] | None = None) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"not a chat format: {fmt!r}")
        self.format = fmt
        self.min_interval = SLACK_INTERVAL if fmt == "slack" else 0.0
        self._wanted = frozenset(TYPE_PREFIX + e for e in events) if events else None
        # Start times seen in this process, for "completed after 4 min"; lost on restart, then the
        # message simply says "completed".
        self._starts: OrderedDict[tuple[str, str], datetime] = OrderedDict()

    def body(self, event: StoredEvent, now: datetime | None = None) -> bytes | Delivered | DeadLetter:
        """The POST body for ``event``; ``Delivered`` when nothing is to be sent for it."""
        try:
            cloud = json.loads(event.payload)
        except ValueError as exc:
            return DeadLetter(f"stored event is not JSON: {exc}")
        if not isinstance(cloud, dict):
            return DeadLetter("stored event is not a JSON object")
        kind = str(cloud.get("type", ""))
        started_at = self._track(cloud, kind)
        if self._wanted is not None and kind not in self._wanted:
            return Delivered()
        try:
            from .. import notify

            message = notify.render(self.format, cloud, now or datetime.now(UTC), started_at)
        except Exception as exc:  # noqa: BLE001 - a formatter bug must not stop the sink
            return DeadLetter(f"cannot render a {self.format} message: {type(exc).__name__}: {exc}")
        if message is None:
            return Delivered()  # a heartbeat: confirmed, never posted
        return json.dumps(message, separators=(",", ":")).encode("utf-8")

    def refusal(self, status: int, reply: bytes, label: str) -> Park | None:
        """Park when the hook refuses every message, not only this one."""
        text = " ".join(reply.decode("utf-8", "replace").split())
        text = "".join(c for c in text if c.isprintable())
        gone = status in PARK_STATUSES or (self.format == "slack" and text in SLACK_GONE)
        if not gone or 200 <= status < 300:
            return None
        said = f": {text[:200]}" if text else ""
        return Park(f"{label}{said}: the {self.format} hook refuses every message (deleted, disabled "
                    "or revoked); put a working hook URL in the configuration")

    def _track(self, cloud: dict[str, Any], kind: str) -> datetime | None:
        """Remember when a real ``started`` was seen; the start time for a ``completed``."""
        data: dict[str, Any] = cloud["data"] if isinstance(cloud.get("data"), dict) else {}
        key = (str(cloud.get("source", "")), str(cloud.get("subject", "")))
        if Kind.of(kind) is Kind.STARTED and data.get("Inferred") is not True:
            from ..notify.describe import parse_time

            moment = parse_time(cloud.get("time"))
            if moment is not None:
                self._starts[key] = moment
                self._starts.move_to_end(key)
                while len(self._starts) > _REMEMBERED_STARTS:
                    self._starts.popitem(last=False)
            return None
        if Kind.of(kind) is Kind.COMPLETED:
            return self._starts.get(key)
        return None
