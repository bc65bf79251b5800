"""Validating one approval message from the queue: approve it, reject it (with a reason), or wait.

A pure function of the message text, the keys, the clock, the current document and what was seen
before, so it can be tested on its own (a property test throws forged and mutated messages at it).
The checks, in this order; the first that fails decides the reason:

================  ==============================================================================
``oversized``     the message is larger than ``MAX_MESSAGE_BYTES``
``malformed``     not UTF-8 JSON text (or base64 of it), not an object, a duplicated member, NaN
``bad-signature`` no ``signature``, no ``keyid``, a ``keyid`` that names no configured verify key,
                  or an Ed25519 signature that does not verify under that key
``malformed``     (signed, but) not an approval CloudEvent: ``specversion`` 1.0, ``type``
                  ``com.azure.scheduledevents.approve``, ``id``, ``source``, ``time``, ``data``
                  with ``EventId`` and ``ExpiresAt`` (RFC 3339)
``future``        ``time`` is more than ``CLOCK_SKEW`` (5 min) ahead of this VM's clock
``stale``         ``time`` is older than ``MAX_AGE`` (24 h)
``too-long``      ``ExpiresAt - time`` exceeds ``MAX_LIFETIME`` (24 h)
``wrong-vm``      ``data.VmName`` is given and is not this VM
``expired``       ``ExpiresAt`` has passed (``unknown-event`` instead when that EventId never
                  appeared in the document while the message waited)
``replayed``      a message with this ``id`` was processed before
``unknown-event`` the EventId was in an earlier document and is gone (completed or canceled)
``not-scheduled`` the EventId is in the current document but not Scheduled (e.g. Started)
================  ==============================================================================

The three bounds on a message's life mean a signed message is usable for at most 24 h after it
was made, wherever it is replayed, and the ledger of processed ids only needs to keep an id until
its ``ExpiresAt``.

EventIds are GUIDs and compared case-insensitively (``find_event``); an accepted verdict carries
the EventId as the document spells it, which is what is POSTed and recorded.

A message whose EventId is not in the document yet (and never was) waits: the coordinator may be
faster than IMDS. It is retried until it expires.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..model import SCHEDULED, Document, ScheduledEvent
from ..timestamps import rfc3339
from . import signing

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

MAX_MESSAGE_BYTES = 8 * 1024  # a real approval message is ~400 bytes
MAX_LIFETIME = timedelta(hours=24)  # ExpiresAt - time longer than this is refused
MAX_AGE = timedelta(hours=24)  # a message made longer ago than this is refused
CLOCK_SKEW = timedelta(minutes=5)  # a message made further ahead of this VM's clock is refused
# \Z, not $: "$" also matches before a trailing newline.
EVENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
MAX_TEXT = 1000

APPROVE, REJECT, WAIT = "approve", "reject", "wait"
REASON_CODES = (
    "oversized", "malformed", "bad-signature", "future", "stale", "too-long", "wrong-vm", "expired",
    "replayed", "unknown-event", "not-scheduled", "dry-run",
)


@dataclass(frozen=True)
class Verdict:
    """What to do with a message; the message's fields are filled in as far as they were read."""

    outcome: str  # approve | reject | wait
    code: str | None = None  # the reason code of a rejection (REASON_CODES)
    detail: str = ""  # one human-readable line
    authentic: bool = False  # the signature verified
    message_id: str | None = None
    event_id: str | None = None  # the claimed EventId if it looks like one (the document's
    # spelling once it is found there)
    source: str | None = None
    expires_at: datetime | None = None
    summary: dict[str, Any] | None = None  # message fields for the audit event (truncated)

    @property
    def accepted(self) -> bool:
        return self.outcome == APPROVE


class _Refused(ValueError):
    """A signed approval outside its allowed life: ``code`` is the reason."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(f"member {key[:40]!r} appears twice")
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode(body: str | bytes) -> dict[str, Any]:
    """The JSON object in ``body`` (plain, or base64 of it); ValueError saying why not."""
    if isinstance(body, bytes | bytearray):
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("not UTF-8 text") from None
    else:
        text = body
    text = text.strip()
    if not text.startswith("{"):
        # Some tools (Azure Functions bindings, Storage Explorer) base64-encode queue messages.
        try:
            text = base64.b64decode(text, validate=True).decode("utf-8").strip()
        except (binascii.Error, ValueError):
            raise ValueError("not a JSON object (nor base64 of one)") from None
        if not text.startswith("{"):
            raise ValueError("not a JSON object (nor base64 of one)")
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except _Duplicate as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _clip(value: Any) -> Any:
    if isinstance(value, str):
        return value[:200]
    if value is None or isinstance(value, bool | int | float):
        return value
    return None


def _summary(message: dict[str, Any], data: Any) -> dict[str, Any]:
    """Message fields for the audit event: short, scalar, and only the ones that exist."""
    out: dict[str, Any] = {}
    for name, key in (("Id", "id"), ("Source", "source"), ("Time", "time"), ("KeyId", "keyid")):
        if key in message:
            out[name] = _clip(message[key])
    if isinstance(data, dict):
        for key in ("EventId", "ExpiresAt", "Reason", "VmName"):
            if key in data:
                out[key] = _clip(data[key])
    return out


def _timestamp(value: Any, name: str) -> datetime:
    if not isinstance(value, str) or len(value) > 40:
        raise ValueError(f"{name} is not an RFC 3339 timestamp")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{name} is not an RFC 3339 timestamp") from None
    if moment.tzinfo is None:
        raise ValueError(f"{name} has no time zone")
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # "0001-01-01T00:00:00+01:00" lies before year 1 in UTC
        raise ValueError(f"{name} is out of range") from None


def _text(value: Any, name: str, limit: int = 200, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} is missing or not a non-empty string")
    if len(value) > limit:
        raise ValueError(f"{name} is longer than {limit} characters")
    if any(ord(c) < 32 for c in value):
        raise ValueError(f"{name} contains control characters")
    return value


@dataclass(frozen=True)
class _Fields:
    message_id: str
    source: str
    event_id: str
    sent: datetime
    expires_at: datetime
    vm_name: str | None


def _fields(message: dict[str, Any], now: datetime) -> _Fields:
    if message.get("specversion") != "1.0":
        raise ValueError("specversion is not 1.0")
    if message.get("type") != signing.APPROVE_TYPE:
        raise ValueError(f"type is not {signing.APPROVE_TYPE}")
    message_id = _text(message.get("id"), "id")
    source = _text(message.get("source"), "source")
    sent = _timestamp(message.get("time"), "time")
    if message.get("datacontenttype", "application/json") != "application/json":
        raise ValueError("datacontenttype is not application/json")
    data = message.get("data")
    if not isinstance(data, dict):
        raise ValueError("data is missing or not an object")
    event_id = data.get("EventId")
    if not isinstance(event_id, str) or not EVENT_ID.match(event_id):
        raise ValueError("data.EventId is missing or not an EventId")
    expires_at = _timestamp(data.get("ExpiresAt"), "data.ExpiresAt")
    if data.get("Reason", "") != "":
        _text(data["Reason"], "data.Reason", MAX_TEXT)
    vm_name = _text(data.get("VmName"), "data.VmName", required=False)
    assert message_id is not None and source is not None
    return _Fields(message_id, source, event_id, sent, expires_at, vm_name)


def _life(f: _Fields, now: datetime) -> None:
    """The bounds on a message's life (``future``, ``stale``, ``too-long``), as _Refused."""
    if f.sent > now + CLOCK_SKEW:
        raise _Refused("future", f"time {signing.rfc3339(f.sent)} is more than "
                                 f"{CLOCK_SKEW.seconds // 60} min ahead of this VM's clock")
    if f.sent < now - MAX_AGE:
        raise _Refused("stale", f"time {signing.rfc3339(f.sent)} is more than 24 h ago")
    if f.expires_at - f.sent > MAX_LIFETIME:
        raise _Refused("too-long", f"ExpiresAt {signing.rfc3339(f.expires_at)} is more than 24 h "
                                   f"after time {signing.rfc3339(f.sent)}")


def find_event(document: Document | None, event_id: str) -> ScheduledEvent | None:
    """The document's event with ``event_id``, compared case-insensitively (GUIDs are).

    IMDS writes EventIds in upper case; a coordinator may not (.NET writes GUIDs in lower case).
    An id that matches several events regardless of case matches none.
    """
    if document is None:
        return None
    exact = document.by_id().get(event_id)
    if exact is not None:
        return exact
    folded = [e for e in document.events if e.event_id.casefold() == event_id.casefold()]
    return folded[0] if len(folded) == 1 else None


def validate(
    body: str | bytes,
    *,
    keys: signing.VerifyKeys | Iterable[Ed25519PublicKey],
    now: datetime,
    document: Document | None,
    vm_name: str,
    seen_before: Callable[[str], bool],
    event_was_seen: Callable[[str], bool],
) -> Verdict:
    """The verdict on one queue message (see the module docstring for the order of checks).

    ``seen_before(message_id)``: this message id was processed before (replay).
    ``event_was_seen(event_id)``: the EventId appeared in an earlier document.
    Never raises on any input.
    """
    size = len(body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body)
    if size > MAX_MESSAGE_BYTES:
        return Verdict(REJECT, "oversized", f"message is {size} bytes; the limit is {MAX_MESSAGE_BYTES}")
    try:
        message = decode(body)
    except ValueError as exc:
        return Verdict(REJECT, "malformed", f"message is {exc}")
    data = message.get("data")
    claimed = data.get("EventId") if isinstance(data, dict) else None
    claimed = claimed if isinstance(claimed, str) and EVENT_ID.match(claimed) else None
    summary = _summary(message, data)
    base: dict[str, Any] = {"event_id": claimed, "summary": summary}
    unverified = signing.problem(message, keys)
    if unverified is not None:
        return Verdict(REJECT, "bad-signature", unverified, **base)
    try:
        f = _fields(message, now)
    except ValueError as exc:
        return Verdict(REJECT, "malformed", f"signed message is not an approval: {exc}",
                       authentic=True, **base)
    event = find_event(document, f.event_id)
    if event is not None:  # from here on, the EventId as IMDS spells it
        f = dataclasses.replace(f, event_id=event.event_id)
    known: dict[str, Any] = {"authentic": True, "message_id": f.message_id, "event_id": f.event_id,
                             "source": f.source, "expires_at": f.expires_at, "summary": summary}
    try:
        _life(f, now)
    except _Refused as exc:
        return Verdict(REJECT, exc.code, str(exc), **known)
    # Azure VM names are case-insensitive (as in ScheduledEvent.affects).
    if f.vm_name is not None and f.vm_name.casefold() != vm_name.casefold():
        return Verdict(REJECT, "wrong-vm", f"message is for VM {f.vm_name}, this is {vm_name}: another "
                       "VM's approvals reach this queue (two VM names make one queue name? put {vm_id} "
                       "in the queue template)", **known)
    if f.expires_at <= now:
        if event is None and not event_was_seen(f.event_id):
            return Verdict(REJECT, "unknown-event",
                           f"EventId {f.event_id} never appeared in the document before the "
                           f"message expired at {rfc3339(f.expires_at, milliseconds=True)}", **known)
        return Verdict(REJECT, "expired", f"message expired at {rfc3339(f.expires_at, milliseconds=True)}",
                       **known)
    if seen_before(f.message_id):
        return Verdict(REJECT, "replayed", f"message id {f.message_id} was processed before", **known)
    if event is None:
        if event_was_seen(f.event_id):
            return Verdict(REJECT, "unknown-event",
                           f"EventId {f.event_id} is no longer in the document "
                           "(it completed or was canceled)", **known)
        return Verdict(WAIT, None, f"EventId {f.event_id} is not in the document yet", **known)
    if event.status != SCHEDULED:
        return Verdict(REJECT, "not-scheduled",
                       f"EventId {f.event_id} is {event.status}, not Scheduled", **known)
    return Verdict(APPROVE, None, f"approve {f.event_id}", **known)
