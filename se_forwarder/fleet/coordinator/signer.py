"""The coordinator's Ed25519 key: what it signs and which keys it takes.

One key (``[signing] key_file``) signs everything the coordinator says: every decision CloudEvent
(``Signer.decision``, on its way out in output/publish.py), the snapshot of the fold (``signed_json``,
ha/snapshot_blob.py) and each approval message (``Signer.message``, output/messages.py). ``verify_keys`` are
the keys whose decisions and snapshots trust.py takes.
"""

from __future__ import annotations

import base64
import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...approvals import signing
from ...approvals.messages import MAX_TEXT
from ...errors import ConfigError
from .decide.events import Decision, VmRef, signed
from .fold.state import DecisionRecord

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


class Signer:
    """Signs with the Ed25519 private key of ``[signing] key_file`` (made by ``se-forwarder fleet
    keygen``; re-read when the file changes, so a rotated key takes over without a restart), or
    with the key given (read from Key Vault at start: azure/keyvault.py). The agents verify
    approval messages with its public key and can sign nothing themselves. ``public_keys`` holds
    the public key of every key the file held since the start; with ``trusted`` (``[trust]
    coordinator_keys``) they are the keys trust.py takes (``verify_keys``)."""

    def __init__(self, key: str | Ed25519PrivateKey, source: str, trusted: Sequence[Ed25519PublicKey] = ()
                 ) -> None:
        self.source, self.trusted = source, tuple(trusted)
        self.key_file = Path(key) if isinstance(key, str) else None
        self._stamp: tuple[int, int] | None = None
        self._key: Ed25519PrivateKey | None = None if isinstance(key, str) else key
        self._lock = threading.Lock()
        self.public_keys: dict[str, Ed25519PublicKey] = {}  # key id -> public key
        self._verify: tuple[tuple[str, ...], signing.VerifyKeys] | None = None

    def key(self) -> Ed25519PrivateKey:
        """The private key; ConfigError (one line, what to do) when it cannot be read."""
        if self.key_file is None:
            assert self._key is not None
            if not self.public_keys:
                self.public_keys = {signing.keyid(self._key): self._key.public_key()}
            return self._key
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


def signed_json(document: dict[str, Any], key: Ed25519PrivateKey) -> bytes:
    """``signing.sign(document, key)`` as JSON text, serialised once: the canonical bytes (what is
    signed, ``keyid`` included) with the ``signature`` member added at the end. A 10,000-VM fold
    is about 10 MB of JSON: a second serialisation would take as long again."""
    body = signing.canonical({**document, signing.KEYID_ATTRIBUTE: signing.keyid(key)})
    signature = base64.b64encode(key.sign(body)).decode("ascii")
    return body[:-1] + f',"{signing.SIGNATURE_ATTRIBUTE}":"{signature}"}}'.encode("ascii")
