"""Approval messages: an ``approve`` decision signed (``Signer``) and put in its target VM's queue.

``Signer`` also signs what the coordinator publishes about itself: every decision CloudEvent
(``Signer.decision``, on its way out in output.py) and the snapshot (blobs.py), with the same key.

The message is the agents' Ed25519-signed CloudEvent (``approvals/signing.py``) with ``id`` = the
decision id, so an agent carries out one decision once however often it arrives, and ``VmName`` =
the target, so no other VM can use it. The queue is the target's, named by the agents' template
(``approvals.queue.queue_name``). ``Sender.send`` makes one attempt, with no SDK retry and
timeouts of its own (``SEND_CALL``: a long read timeout, so that a queue that is only slow answers
the one request rather than receiving a second copy); sending.py retries until the message is sent.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...approvals import signing
from ...approvals.messages import MAX_TEXT
from ...approvals.queue import queue_name
from ...errors import ConfigError
from .access import Queues
from .events import Decision, VmRef, signed
from .state import DecisionRecord

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

log = logging.getLogger("se_forwarder.coordinator.sender")


class Signer:
    """Signs with the Ed25519 private key of ``[signing] key_file`` (made by ``se-forwarder fleet
    keygen``; re-read when the file changes, so a rotated key takes over without a restart). The
    agents verify approval messages with its public key and can sign nothing themselves.
    ``public_keys`` holds the public key of every key the file held since the start; with
    ``trusted`` (``[trust] coordinator_keys``) they are the keys trust.py takes (``verify_keys``)."""

    def __init__(self, key_file: str, source: str, trusted: Sequence[Ed25519PublicKey] = ()) -> None:
        self.source, self.key_file, self.trusted = source, Path(key_file), tuple(trusted)
        self._stamp: tuple[int, int] | None = None
        self._key: Ed25519PrivateKey | None = None
        self._lock = threading.Lock()
        self.public_keys: dict[str, Ed25519PublicKey] = {}  # key id -> public key
        self._verify: tuple[tuple[str, ...], signing.VerifyKeys] | None = None

    def key(self) -> Ed25519PrivateKey:
        """The private key; ConfigError (one line, what to do) when it cannot be read."""
        try:
            info = self.key_file.stat()
        except OSError as exc:
            raise ConfigError(f"signing.key_file {self.key_file} cannot be read: "
                              f"{exc.strerror or exc}") from None
        stamp = (info.st_mtime_ns, info.st_size)
        with self._lock:
            if self._key is None or stamp != self._stamp:
                key = signing.load_signing_key(file=self.key_file)
                self._key, self._stamp = key, stamp
                self.public_keys = {**self.public_keys, signing.keyid(key): key.public_key()}
            return self._key

    def verify_keys(self) -> signing.VerifyKeys:
        """The keys whose decisions and snapshots are taken: every key the file held since the
        start (a replaced file is noticed here) and ``trusted``."""
        with contextlib.suppress(ConfigError):  # the keys it held still verify what they signed
            self.key()
        ids = tuple(self.public_keys)
        if self._verify is None or self._verify[0] != ids:
            self._verify = (ids, signing.VerifyKeys([*self.public_keys.values(), *self.trusted]))
        return self._verify[1]

    def decision(self, decision: Decision) -> dict[str, Any]:
        """``decision``'s CloudEvent as published: signed with the current key (events.signed)."""
        return signed(decision, self.source, self.key())

    def message(self, approval: Approval, now: float, ttl: float) -> str:
        """The queue message text for ``approval``, valid ``ttl`` s."""
        moment = datetime.fromtimestamp(now, UTC)
        message = signing.new_message(
            approval.event_id, source=self.source, key=self.key(),
            expires_at=moment + timedelta(seconds=ttl), reason=approval.reason[:MAX_TEXT],
            vm_name=approval.target.name, now=moment, message_id=approval.id,
        )
        return signing.encode(message)


SEND_CALL: dict[str, Any] = {"connection_timeout": 5, "read_timeout": 60, "retry_total": 0}


@dataclass(frozen=True)
class Approval:
    """What an approval message needs from its ``approve`` decision."""

    id: str
    event_id: str
    target: VmRef
    reason: str

    @classmethod
    def of(cls, record: DecisionRecord) -> Approval:
        """From the decision as folded (``data`` is its CloudEvent data)."""
        target = record.data.get("Target")
        target = target if isinstance(target, dict) else {}
        return cls(record.id, str(record.data.get("EventId") or ""),
                   VmRef(str(target.get("name") or ""), str(target.get("vmId") or ""),
                         str(target.get("group") or "")),
                   str(record.data.get("Reason") or ""))


@dataclass(frozen=True)
class Sent:
    queue: str
    ok: bool
    problem: str = ""
    reached: bool = True  # the queue service answered (a refusal, or the message taken)


class Sender:
    """Puts signed approval messages in the agents' queues."""

    def __init__(self, queues: Queues | Any, signer: Signer, template: str, ttl: float) -> None:
        self.queues, self.signer, self.template, self.ttl = queues, signer, template, ttl

    def queue_for(self, approval: Approval) -> str:
        return queue_name(self.template, approval.target.name, approval.target.vm_id)

    def send(self, approval: Approval, now: float) -> Sent:
        """One attempt to send ``approval``; what happened (never raises for a service failure)."""
        from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError

        try:
            name = self.queue_for(approval)
            text = self.signer.message(approval, now, self.ttl)
        except (ConfigError, ValueError) as exc:
            return Sent("", False, str(exc))
        try:
            self.queues.client(name).send_message(text, time_to_live=int(self.ttl), **SEND_CALL)
        except ResourceNotFoundError:
            return Sent(name, False, f"queue {name} does not exist (is the agent on {approval.target.name} "
                                     "configured with [approvals.queue] and running?)")
        except HttpResponseError as exc:
            return Sent(name, False, f"queue {name} refused the message: {_first_line(exc)}",
                        reached=exc.status_code is not None and exc.status_code < 500)
        except (AzureError, ConfigError, OSError) as exc:
            return Sent(name, False, f"cannot send to queue {name}: {_first_line(exc)}", reached=False)
        return Sent(name, True)


def _first_line(exc: BaseException) -> Any:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
