"""The coordinator's blobs: the leader's lease and the snapshot of the fold (its checkpoint).

One container (``[storage] container``) holds, per coordinator name:

- ``<name>/leader``: an empty blob whose lease is the leadership. Its holder writes its instance
  name and API address into the blob's metadata, so a standby can tell who leads.
- ``<name>/snapshot.json.gz``: the fold (``snapshot.snapshot``) with the partition positions it
  covers, gzipped JSON, written by the leader every ``snapshot_interval`` and when it stops. A
  restarted instance loads it and reads the hub on from those positions; without one (or with one
  for another hub) it reads the hub from the start of its retention. The document is signed with
  the coordinator's key exactly as a decision is (``keyid`` and ``signature`` members beside the
  others: approvals/signing.py), and a snapshot that does not verify with a trusted key
  (trust.snapshot) is not used: whoever can write the container cannot write the fold.

Lease timing (the numbers that keep two leaders from acting at once): the lease lasts
``lease_duration`` (15-60 s) from the moment a renewal is *sent*; the leader renews every
``lease_duration / 5`` and stops acting ``MARGIN`` seconds before the lease could expire since its
last successful renewal, so a publish started in time (at most ``hub.PUBLISH_TIMEOUT``) lands
before any other instance can hold the lease. A standby tries to take the lease every
``lease_duration / 5``; it gets it at most ``lease_duration`` after the leader's last renewal.

Every call has short timeouts of its own and no SDK retry (``LEASE_CALL``, ``SNAPSHOT_CALL``): the
callers retry on their own schedule, with a deadline (reach.py), off the service's loop. An instance
proposes the same lease id every time it asks for the lease, so a request that took the lease but
whose answer was lost is simply answered yes the next time.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...approvals import signing
from ...errors import SeForwarderError, StateError
from . import trust
from .hub import PUBLISH_TIMEOUT, Position

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

log = logging.getLogger("se_forwarder.coordinator.blobs")

MARGIN = PUBLISH_TIMEOUT + 3.0
FORMAT = 1
# Per-call options of the Azure SDK: no retry of its own, and timeouts within the callers' deadlines.
LEASE_CALL: dict[str, Any] = {"connection_timeout": 3, "read_timeout": 4, "retry_total": 0}
LEASE_DEADLINE = 5.0  # s a lease call may take before it counts as failed
SNAPSHOT_CALL: dict[str, Any] = {"connection_timeout": 5, "read_timeout": 25, "retry_total": 0}
SNAPSHOT_DEADLINE = 30.0


@dataclass(frozen=True)
class Holder:
    instance: str
    api: str
    locked: bool


Run = Callable[[Callable[[], Any], str], Any]  # runs one SDK call (with a deadline), says what it is


def direct(func: Callable[[], Any], _what: str) -> Any:
    return func()


class Lease:
    """The leadership lease on ``<name>/leader``. Each SDK call goes through ``run`` (the caller's
    deadline, reach.py); the lease's state changes only on this object's own thread, after a call
    returned in time, never from a call that finished late. Azure errors are raised to the caller."""

    def __init__(self, container: Any, name: str, instance: str, api: str, duration: float,
                 run: Run = direct) -> None:
        self.blob = container.get_blob_client(f"{name}/leader")
        self.instance, self.api, self.duration = instance, api, int(duration)
        self.run = run
        self.lease_id = str(uuid.uuid4())  # proposed on every acquire (module docstring)
        self._lease: Any = None
        self.valid_until = 0.0  # monotonic: act only before this
        self.renewed_at: float | None = None  # monotonic: the last renewal (or acquisition) sent

    @property
    def held(self) -> bool:
        return self._lease is not None

    def acting(self) -> bool:
        """Held, and renewed recently enough to act (module docstring)."""
        return self._lease is not None and time.monotonic() < self.valid_until

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it; True when this instance now leads."""
        from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError

        sent = time.monotonic()
        try:
            lease = self.run(lambda: self.blob.acquire_lease(lease_duration=self.duration,
                                                             lease_id=self.lease_id, **LEASE_CALL),
                             "taking the leader lease")
        except ResourceNotFoundError:
            try:
                self.run(lambda: self.blob.upload_blob(b"", overwrite=False, **LEASE_CALL),
                         "creating the leader blob")
            except ResourceExistsError:
                pass
            except HttpResponseError as exc:
                if exc.status_code != 412:  # leased meanwhile by another instance
                    raise
            return False
        except HttpResponseError as exc:
            if exc.status_code == 409:  # LeaseAlreadyPresent
                return False
            raise
        self._lease = lease
        self.renewed_at, self.valid_until = sent, sent + self.duration - MARGIN
        try:
            self.run(lambda: self.blob.set_blob_metadata({"instance": self.instance, "api": self.api},
                                                         lease=lease, **LEASE_CALL),
                     "recording this instance on the leader blob")
        except Exception as exc:  # noqa: BLE001 - only the standby's hint is lost
            log.warning("could not record this instance on the lease blob: %s", getattr(exc, "message", exc))
        return True

    def renew(self) -> bool:
        """Renew the held lease; False (and no longer held) when it was lost to another instance."""
        from azure.core.exceptions import HttpResponseError

        lease = self._lease
        if lease is None:
            return False
        sent = time.monotonic()
        try:
            self.run(lambda: lease.renew(**LEASE_CALL), "renewing the leader lease")
        except HttpResponseError as exc:
            if exc.status_code in (409, 412):  # another instance holds it now, or it was broken
                self._lease = None
                self.valid_until = 0.0
                return False
            raise
        if self._lease is lease:
            self.renewed_at, self.valid_until = sent, sent + self.duration - MARGIN
        return True

    def give_up(self, release: bool) -> None:
        """Stop leading now; ``release`` frees the lease at once (a clean stop)."""
        lease, self._lease = self._lease, None
        self.valid_until = 0.0
        if release and lease is not None:
            try:
                self.run(lambda: lease.release(**LEASE_CALL), "releasing the leader lease")
            except Exception as exc:  # noqa: BLE001 - it then expires by itself
                log.warning("could not release the leader lease (it expires by itself): %s", exc)

    def holder(self) -> Holder | None:
        """Who holds the lease, from the blob's metadata; None when nobody does (or unknown)."""
        try:
            props = self.run(lambda: self.blob.get_blob_properties(**LEASE_CALL), "reading who leads")
        except Exception:  # noqa: BLE001 - unknown for now; asked again at the next step
            return None
        locked = getattr(props.lease, "status", "") == "locked"
        meta = props.metadata or {}
        return Holder(meta.get("instance", ""), meta.get("api", ""), locked) if locked else None


def ensure_container(container: Any, name: str) -> None:
    """Create the container (``name``, for messages) unless it exists; an error a retry cannot
    mend raises SeForwarderError, one a retry may mend (5xx, no answer) the Azure error."""
    from azure.core.exceptions import HttpResponseError, ResourceExistsError

    try:
        container.create_container(connection_timeout=5, read_timeout=10, retry_total=0)
    except ResourceExistsError:
        pass
    except HttpResponseError as exc:
        if exc.status_code is not None and exc.status_code < 500 and exc.status_code not in (403, 409):
            raise SeForwarderError(f"storage container {name}: {exc.message or exc}") from None
        if exc.status_code is not None and exc.status_code >= 500:
            raise
        # 403/409: no right to create it, so it must exist


def signed_json(document: dict[str, Any], key: Ed25519PrivateKey) -> bytes:
    """``signing.sign(document, key)`` as JSON text, serialised once: the canonical bytes (what is
    signed, ``keyid`` included) with the ``signature`` member added at the end. A 10,000-VM fold
    is about 10 MB of JSON: a second serialisation would take as long again."""
    body = signing.canonical({**document, signing.KEYID_ATTRIBUTE: signing.keyid(key)})
    signature = base64.b64encode(key.sign(body)).decode("ascii")
    return body[:-1] + f',"{signing.SIGNATURE_ATTRIBUTE}":"{signature}"}}'.encode("ascii")


@dataclass
class Snapshot:
    state: dict[str, Any]
    positions: dict[str, Position]
    written_at: float
    instance: str


class Snapshots:
    """``<name>/snapshot.json.gz``: the fold and the positions it covers, signed with ``key()``
    and taken only when it verifies with ``trusted()`` (module docstring)."""

    def __init__(self, container: Any, name: str, hub: str, key: Callable[[], Ed25519PrivateKey],
                 trusted: Callable[[], signing.VerifyKeys]) -> None:
        self.blob = container.get_blob_client(f"{name}/snapshot.json.gz")
        self.hub, self.key, self.trusted = hub, key, trusted

    def save(self, state: dict[str, Any], positions: dict[str, Position], instance: str) -> int:
        """Write the snapshot; its size in bytes (compressed)."""
        data = {"format": FORMAT, "hub": self.hub, "instance": instance, "writtenAt": time.time(),
                "positions": {pid: pos.as_data() for pid, pos in sorted(positions.items())},
                "state": state}
        body = gzip.compress(signed_json(data, self.key()), compresslevel=5)
        self.blob.upload_blob(body, overwrite=True, **SNAPSHOT_CALL)
        return len(body)

    def load(self) -> Snapshot | None:
        """The last snapshot, None when there is none; StateError when it is not usable."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            body = self.blob.download_blob(**SNAPSHOT_CALL).readall()
        except ResourceNotFoundError:
            return None
        try:
            data = json.loads(gzip.decompress(body))
            verdict = trust.snapshot(data, self.trusted()) if isinstance(data, dict) else None
            if verdict is not None and not verdict.trusted:
                raise StateError(f"the snapshot blob is not the coordinator's: {verdict.detail}")
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}")
            if data.get("hub") != self.hub:
                raise StateError(f"the snapshot is of Event Hub {data.get('hub')!r}, not {self.hub!r}")
            positions = {str(pid): Position(int(p["sequence"]), str(p["offset"]))
                         for pid, p in data["positions"].items()}
            return Snapshot(data["state"], positions, float(data["writtenAt"]), str(data.get("instance")))
        except StateError:
            raise
        except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StateError(f"the snapshot blob is damaged ({type(exc).__name__}: {str(exc)[:100]})") \
                from None
