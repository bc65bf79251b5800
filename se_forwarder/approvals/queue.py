"""Remote approvals: consume signed approval messages from an Azure Storage queue.

The consumer runs on its own thread (started by the approver) and never touches the polling loop.
For each message it asks ``messages.validate`` for a verdict, against a document fetched from IMDS
for the batch (the CURRENT document, not the last one polled):

- approve: POST StartRequests (through the approver, which records the ``approved`` CloudEvent
  with ``ApprovedBy: coordinator:<source>``), remember the message id, delete the message;
- wait (the EventId is not in the document yet): keep the message invisible for ``RETRY_SECONDS``
  and look again, until it expires;
- reject: record an ``approvalrejected`` audit CloudEvent, remember the id (signed messages only,
  so forged messages cannot block future ids), copy the message with its reason to
  ``<queue>-poison`` and delete it. Nothing is retried forever; nothing unreadable stops the loop.

``azure-storage-queue`` (and ``azure-identity`` for managed identity) are imported only here, and
only when ``[approvals.queue]`` is configured: ``pip install 'se-forwarder[queue]'``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import ConfigError, one_line
from ..imds import ImdsClient, ImdsError
from ..model import Document, VmIdentity
from ..outbox import Outbox
from ..sinks.azure_common import token_credential
from ..telemetry import fields
from ..timestamps import rfc3339
from . import signing
from .audit import rejection_event
from .messages import APPROVE, REJECT, WAIT, Verdict, validate

if TYPE_CHECKING:
    from .approver import Approver

log = logging.getLogger("se_forwarder.approvals.queue")

DEFAULT_VISIBILITY_TIMEOUT = 30.0
DEFAULT_POLL_INTERVAL = 1.0
RETRY_SECONDS = 1  # how long a waiting message stays invisible before it is looked at again
POST_RETRY_SECONDS = 2  # after a failed approval POST
POISON_SUFFIX = "-poison"
MAX_QUEUE_NAME = 63 - len(POISON_SUFFIX)
MAX_POISON_ATTEMPTS = 5  # a refused message is dropped if the poison queue fails this often
POISON_ORIGINAL_CHARS = 4096  # keeps the poison message well under the 64 KiB queue limit
BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")

SCHEMA = """
CREATE TABLE IF NOT EXISTS approval_messages (
    message_id TEXT PRIMARY KEY,
    queue_message_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    expires_at REAL NOT NULL,
    processed_at REAL NOT NULL
);
"""


# -- queue names --------------------------------------------------------------------------------


def queue_name(template: str, vm_name: str, vm_id: str = "") -> str:
    """The queue for this VM: ``template`` with ``{vm_name}`` / ``{vm_id}`` filled in, made legal.

    Storage queue names are 3-63 lowercase letters, digits and single hyphens; VM names may have
    capitals and underscores, so the result is lowercased, other characters become ``-`` and runs
    of ``-`` collapse. The coordinator (``fleet approve --vm``) applies the same function.
    """
    for name in PLACEHOLDER.findall(template):
        if name not in ("vm_name", "vm_id"):
            raise ConfigError(f"queue name template {template!r}: unknown placeholder {{{name}}} "
                              "(use {vm_name} or {vm_id})")
    if "{vm_id}" in template and not vm_id:
        raise ConfigError(f"queue name template {template!r} needs the VM id ({{vm_id}})")
    text = template.replace("{vm_name}", vm_name).replace("{vm_id}", vm_id).lower()
    text = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", text)).strip("-")
    if not 3 <= len(text) <= MAX_QUEUE_NAME:
        raise ConfigError(
            f"queue name {text!r} (from {template!r}) must be 3-{MAX_QUEUE_NAME} characters "
            f"(the poison queue adds {POISON_SUFFIX!r})"
        )
    return text


def validate_template(template: Any, where: str) -> str:
    if not isinstance(template, str):
        raise ConfigError(f"{where}: must be a string")
    try:
        queue_name(template, "vm0", "00000000-0000-0000-0000-000000000000")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return template


def validate_account_url(value: Any, where: str) -> str:
    """An https URL (plain http only for a loopback host, i.e. an emulator)."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: must be a string")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: {value!r} is not an https URL")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ConfigError(f"{where}: {value!r} must use https (TLS is required)")
    return value.rstrip("/")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- settings -----------------------------------------------------------------------------------


class KeySource:
    """The signing keys; a key file is read again when it changes (rotation without restart)."""

    def __init__(self, env_name: str | None, file: str | None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.env_name = env_name
        self.file = file
        self.environ = os.environ if environ is None else environ
        self._mtime = self._stat()
        self._keys = signing.load_keys(env_name, file, self.environ)

    def _stat(self) -> float | None:
        try:
            return os.stat(self.file).st_mtime if self.file else None
        except OSError:
            return None

    def keys(self) -> list[bytes]:
        mtime = self._stat()
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._keys = signing.load_keys(self.env_name, self.file, self.environ)
                log.info("signing keys reloaded from %s (%d key(s))", self.file, len(self._keys))
            except ConfigError as exc:
                log.error("keeping the previous signing keys: %s", exc)
        return self._keys


@dataclass
class QueueSettings:
    """``[approvals.queue]`` resolved for this VM (secrets read, SDK present)."""

    name: str
    account_url: str | None
    connection_string: str | None = dataclasses.field(repr=False, default=None)
    client_id: str | None = None
    keys: KeySource | None = dataclasses.field(repr=False, default=None)
    visibility_timeout: int = int(DEFAULT_VISIBILITY_TIMEOUT)
    poll_interval: float = DEFAULT_POLL_INTERVAL
    secret_env: tuple[str, ...] = ()

    @property
    def poison_name(self) -> str:
        return self.name + POISON_SUFFIX


def read_connection_string(env_name: str | None, file: str | None,
                           environ: Mapping[str, str] | None = None) -> str | None:
    """The connection string from a file or an environment variable (None when neither is set)."""
    environ = os.environ if environ is None else environ
    if file:
        try:
            text = Path(file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            raise ConfigError(f"connection string file {file} cannot be read") from None
        if not text:
            raise ConfigError(f"connection string file {file} is empty")
        return text
    if env_name:
        value = environ.get(env_name, "").strip()
        if value:
            return value
    return None


def resolve(raw: Mapping[str, Any], vm: VmIdentity,
            environ: Mapping[str, str] | None = None) -> QueueSettings:
    """Everything the consumer needs, or ConfigError in one line (at agent start, not later)."""
    try:
        import azure.storage.queue  # noqa: F401
    except ImportError:
        raise ConfigError(
            "approvals.queue needs azure-storage-queue: pip install 'se-forwarder[queue]'"
        ) from None
    environ = os.environ if environ is None else environ
    conn = read_connection_string(raw.get("connection_string_env"), raw.get("connection_string_file"),
                                  environ)
    account_url = raw.get("account_url")
    if conn is None and not account_url:
        raise ConfigError(
            f"approvals.queue: environment variable {raw.get('connection_string_env')} is not set "
            "and no account_url is given (for managed identity)"
        )
    if conn is None:
        try:
            import azure.identity  # noqa: F401
        except ImportError:
            raise ConfigError(
                "approvals.queue with managed identity needs azure-identity: "
                "pip install 'se-forwarder[queue]'"
            ) from None
    keys = KeySource(raw.get("signing_key_env"), raw.get("signing_key_file"), environ)
    return QueueSettings(
        name=queue_name(raw["queue"], vm.name, vm.vm_id),
        account_url=account_url,
        connection_string=conn,
        client_id=raw.get("client_id"),
        keys=keys,
        visibility_timeout=int(raw.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT)),
        poll_interval=float(raw.get("poll_interval", DEFAULT_POLL_INTERVAL)),
        secret_env=tuple(n for n in (raw.get("signing_key_env"), raw.get("connection_string_env")) if n),
    )


def make_client(name: str, *, connection_string: str | None = None, account_url: str | None = None,
                credential: Any = None) -> Any:
    """A ``QueueClient`` with short timeouts and few retries (the caller has its own backoff)."""
    from azure.storage.queue import LinearRetry, QueueClient

    options: dict[str, Any] = {
        "retry_policy": LinearRetry(backoff=1, retry_total=1, random_jitter_range=0),
        "connection_timeout": 5,
        "read_timeout": 15,
    }
    if connection_string:
        return QueueClient.from_connection_string(connection_string, name, **options)
    return QueueClient(account_url, name, credential=credential, **options)


def create_if_missing(client: Any) -> bool:
    """Create the queue; True if it exists afterwards (False: no right to create it)."""
    from azure.core.exceptions import HttpResponseError, ResourceExistsError

    try:
        client.create_queue()
    except ResourceExistsError:
        pass
    except HttpResponseError as exc:
        if exc.status_code in (401, 403):
            return False
        raise
    return True


def check(settings: Any) -> str | None:
    """For ``se-forwarder check``: the problem with ``[approvals.queue]`` in one line, or None.

    Reads this VM's identity from IMDS (the queue name may contain it), the keys and connection
    string, then asks the service for both queues' properties.
    """
    from azure.core.exceptions import AzureError, ClientAuthenticationError, ResourceNotFoundError

    imds = ImdsClient(settings.imds.url, settings.imds.api_version, timeout=settings.imds.timeout,
                      first_call_timeout=max(settings.imds.timeout, 10.0),
                      lease_files=settings.imds.lease_files)
    try:
        vm = VmIdentity.from_compute(imds.get_compute())
    except (ImdsError, ValueError) as exc:
        return f"cannot name the queue without the VM's identity: {exc}"
    finally:
        imds.close()
    try:
        resolved = resolve(settings.approvals.queue, vm)
        credential = None
        if not resolved.connection_string:
            credential = token_credential("managed-identity", resolved.client_id)
        for name in (resolved.name, resolved.poison_name):
            client = make_client(name, connection_string=resolved.connection_string,
                                 account_url=resolved.account_url, credential=credential)
            try:
                client.get_queue_properties()
            except ResourceNotFoundError:
                return (f"queue {name} does not exist (the agent creates it at start when its "
                        "identity may; otherwise create it)")
            except ClientAuthenticationError as exc:
                return f"not allowed to read queue {name}: {one_line(exc)}"
            except AzureError as exc:
                return f"queue {name} unreachable: {one_line(exc)}"
    except ConfigError as exc:
        return str(exc)
    except ValueError as exc:  # a connection string the SDK cannot parse
        return f"the Storage connection string is not valid: {one_line(exc)}"
    return None


# -- the consumer -------------------------------------------------------------------------------


def ensure_schema(db: sqlite3.Connection) -> None:
    db.executescript(SCHEMA)


class QueueConsumer:
    """Receives approval messages and acts on them (see the module docstring)."""

    def __init__(self, approver: Approver, settings: QueueSettings) -> None:
        self.approver = approver
        self.settings = settings
        self._client: Any = None
        self._poison: Any = None
        # IMDS has answered the poller long before: no 130 s first-call allowance here.
        self._imds = ImdsClient(approver.imds.base_url, approver.imds.api_version,
                                timeout=approver.imds.timeout,
                                first_call_timeout=approver.imds.timeout)
        self._waiting_logged: set[str] = set()
        self._last_problem: str | None = None
        self._failures = 0
        self._no_update_logged = False

    @property
    def vm(self) -> VmIdentity:
        return self.approver.vm

    # -- loop -----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        outbox = Outbox(self.approver.state_dir)
        try:
            ensure_schema(outbox.connection)
            self._prune(outbox.connection)
            log.info("listening for approval messages on queue %s", self.settings.name)
            while not stop.is_set():
                delay = self._cycle(outbox, stop)
                if delay > 0:
                    stop.wait(delay)
        finally:
            outbox.close()
            self._imds.close()

    def _cycle(self, outbox: Outbox, stop: threading.Event) -> float:
        """One receive and the handling of its messages; the seconds to wait before the next."""
        try:
            if self._client is None:
                self._connect()
            batch = list(self._client.receive_messages(
                messages_per_page=32, max_messages=32,
                visibility_timeout=self.settings.visibility_timeout,
            ))
            if self._failures:
                log.info("approval queue %s reachable again", self.settings.name)
            self._failures, self._last_problem = 0, None
        except Exception as exc:  # noqa: BLE001 - any SDK/network error: back off, keep going
            return self._problem(f"cannot receive from approval queue {self.settings.name}: "
                                 f"{one_line(exc)}")
        if not batch:
            return self.settings.poll_interval
        document = self._document()
        for message in batch:
            if stop.is_set():
                break  # the rest become visible again after the visibility timeout
            try:
                self._handle(outbox, message, document)
            except Exception as exc:  # noqa: BLE001 - storage/database trouble with one message
                log.warning("approval message %s not handled (retried later): %s",
                            getattr(message, "id", "?"), one_line(exc))
        return 0.0

    def _problem(self, text: str) -> float:
        self._failures += 1
        delay = BACKOFF[min(self._failures - 1, len(BACKOFF) - 1)]
        level = logging.WARNING if text != self._last_problem else logging.DEBUG
        log.log(level, "%s (retry in %.0f s)", text, delay)
        self._last_problem = text
        self._client = None if self._failures >= 3 else self._client
        return delay

    def _connect(self) -> None:
        credential = None
        if not self.settings.connection_string:
            credential = token_credential("managed-identity", self.settings.client_id)
        make = {"connection_string": self.settings.connection_string,
                "account_url": self.settings.account_url, "credential": credential}
        client = make_client(self.settings.name, **make)
        poison = make_client(self.settings.poison_name, **make)
        for c, name in ((client, self.settings.name), (poison, self.settings.poison_name)):
            try:
                if not create_if_missing(c):
                    log.info("no right to create queue %s; it must exist already", name)
            except Exception as exc:  # noqa: BLE001 - receive() reports the real problem
                log.debug("could not create queue %s: %s", name, one_line(exc))
        self._client, self._poison = client, poison

    def _document(self) -> Document | None:
        """The current document from IMDS (the last polled one if IMDS does not answer)."""
        try:
            return self._imds.get_document()
        except ImdsError as exc:
            log.warning("IMDS unavailable for approval messages, using the last polled document: %s",
                        exc)
            return self.approver.current()

    # -- one message ----------------------------------------------------------------------
    def _handle(self, outbox: Outbox, message: Any, document: Document | None) -> None:
        db = outbox.connection
        body = message.content if message.content is not None else ""
        try:
            verdict = validate(
                body,
                keys=self.settings.keys.keys() if self.settings.keys else [],
                now=datetime.now(UTC),
                document=document,
                vm_name=self.vm.name,
                seen_before=lambda mid: _seen_before(db, mid, message.id),
                event_was_seen=lambda eid: _event_was_seen(db, eid),
            )
        except Exception as exc:  # noqa: BLE001 - validate never raises; if it did, do not loop
            verdict = Verdict(REJECT, "malformed", f"message could not be validated: {one_line(exc)}")
        if verdict.outcome == APPROVE and self.approver.dry_run:
            verdict = dataclasses.replace(
                verdict, outcome=REJECT, code="dry-run",
                detail=f"dry run: would approve {verdict.event_id} "
                       f"(coordinator:{verdict.source}); nothing was POSTed")
        if verdict.outcome == WAIT:
            self._wait(message, verdict)
        elif verdict.outcome == APPROVE:
            self._approve(outbox, message, verdict, document)
        else:
            self._reject(outbox, message, verdict, document)

    def _wait(self, message: Any, verdict: Verdict) -> None:
        if message.id not in self._waiting_logged:
            self._waiting_logged.add(message.id)
            log.info("approval message waits: %s (until %s)", verdict.detail,
                     rfc3339(verdict.expires_at, milliseconds=True) if verdict.expires_at else "?",
                     extra=fields(event_id=verdict.event_id))
        self._hide(message, self._retry_in(verdict, RETRY_SECONDS))

    def _hide(self, message: Any, seconds: int) -> None:
        """Keep ``message`` invisible ``seconds`` more (it was received for ``visibility_timeout``)."""
        from azure.core.exceptions import HttpResponseError

        try:
            self._client.update_message(message, visibility_timeout=seconds)
        except HttpResponseError as exc:
            if exc.status_code != 403:
                raise
            if not self._no_update_logged:
                self._no_update_logged = True
                log.warning("not allowed to update messages on queue %s (Storage Queue Data "
                            "Contributor grants it): waiting messages are looked at again only "
                            "every %d s", self.settings.name, self.settings.visibility_timeout)

    def _retry_in(self, verdict: Verdict, seconds: int) -> int:
        if verdict.expires_at is None:
            return seconds
        left = (verdict.expires_at - datetime.now(UTC)).total_seconds()
        return max(0, min(seconds, int(left) + 1))

    def _approve(self, outbox: Outbox, message: Any, verdict: Verdict,
                 document: Document | None) -> None:
        assert verdict.event_id and verdict.message_id and verdict.expires_at
        approved_by = f"coordinator:{verdict.source}"
        result = self.approver.try_approve(outbox, verdict.event_id, approved_by, document=document)
        if result == "retry":
            self._hide(message, self._retry_in(verdict, POST_RETRY_SECONDS))
            return
        if result != "approved":
            self._reject(outbox, message, dataclasses.replace(
                verdict, outcome=REJECT, code="not-scheduled",
                detail=f"EventId {verdict.event_id} is not Scheduled in the current document"),
                document)
            return
        _remember(outbox.connection, verdict, message.id, "approved")
        self._client.delete_message(message)
        self._waiting_logged.discard(message.id)
        log.info("approval message %s acted on", verdict.message_id,
                 extra=fields(event_id=verdict.event_id, origin=approved_by))

    def _reject(self, outbox: Outbox, message: Any, verdict: Verdict,
                document: Document | None) -> None:
        now = datetime.now(UTC)
        outbox.record(None, [rejection_event(verdict, document=document, vm=self.vm,
                                             queue_message_id=message.id, queue=self.settings.name,
                                             observed=now)])
        self.approver.on_recorded()
        if verdict.authentic and verdict.message_id and verdict.code != "replayed":
            _remember(outbox.connection, verdict, message.id, f"rejected:{verdict.code}")
        try:
            self._send_poison(message, verdict, now)
        except Exception as exc:  # noqa: BLE001
            forbidden = getattr(exc, "status_code", None) == 403  # least privilege: no send right
            if not forbidden and (getattr(message, "dequeue_count", 0) or 0) < MAX_POISON_ATTEMPTS:
                raise  # handled again after the visibility timeout
            log.error("poison queue %s unavailable (%s); dropping the refused message %s after %d "
                      "attempts (its approvalrejected event is recorded)", self.settings.poison_name,
                      one_line(exc), message.id, message.dequeue_count)
        self._client.delete_message(message)
        self._waiting_logged.discard(message.id)
        self.approver.count_rejection(verdict.code or "unknown")
        log.warning("approval message rejected (%s): %s", verdict.code, verdict.detail,
                    extra=fields(event_id=verdict.event_id, reason=verdict.code))

    def _send_poison(self, message: Any, verdict: Verdict, now: datetime) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        original = message.content if isinstance(message.content, str) else ""
        raw = original.encode("utf-8", "surrogatepass")
        body = json.dumps({
            "reason": verdict.code,
            "detail": verdict.detail,
            "rejectedAt": rfc3339(now, milliseconds=True),
            "vm": self.vm.name,
            "queue": self.settings.name,
            "queueMessageId": message.id,
            "dequeueCount": getattr(message, "dequeue_count", None),
            "messageId": verdict.message_id,
            "eventId": verdict.event_id,
            "authentic": verdict.authentic,
            "original": original[:POISON_ORIGINAL_CHARS],
            "originalTruncated": len(original) > POISON_ORIGINAL_CHARS,
            "originalBytes": len(raw),
            "originalSha256": hashlib.sha256(raw).hexdigest(),
        }, ensure_ascii=True)
        try:
            self._poison.send_message(body)
        except ResourceNotFoundError:
            create_if_missing(self._poison)
            self._poison.send_message(body)

    def _prune(self, db: sqlite3.Connection) -> None:
        """Forget ids of messages long expired (a replay of those is rejected as expired)."""
        db.execute("DELETE FROM approval_messages WHERE expires_at < ?", (time.time() - 86400,))


def _seen_before(db: sqlite3.Connection, message_id: str, queue_message_id: str) -> bool:
    """A message with this id was processed before, from another queue message (a replay).

    The same queue message seen again (the agent stopped between acting and deleting it) is not a
    replay: it is handled again, and the outcome is the same.
    """
    row = db.execute("SELECT queue_message_id FROM approval_messages WHERE message_id = ?",
                     (message_id,)).fetchone()
    return row is not None and row[0] != queue_message_id


def _event_was_seen(db: sqlite3.Connection, event_id: str) -> bool:
    """The EventId was in an earlier document (as given, or in IMDS's upper-case spelling)."""
    row = db.execute(
        "SELECT 1 FROM events WHERE event_id IN (?, ?, ?) "
        "AND state IN ('scheduled', 'started') LIMIT 1",
        (event_id, event_id.upper(), event_id.lower()),
    ).fetchone()
    return row is not None


def _remember(db: sqlite3.Connection, verdict: Verdict, queue_message_id: str, outcome: str) -> None:
    assert verdict.message_id is not None
    expires = verdict.expires_at.timestamp() if verdict.expires_at else time.time()
    db.execute(
        "INSERT OR IGNORE INTO approval_messages "
        "(message_id, queue_message_id, event_id, outcome, expires_at, processed_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (verdict.message_id, queue_message_id, verdict.event_id or "", outcome, expires, time.time()),
    )
