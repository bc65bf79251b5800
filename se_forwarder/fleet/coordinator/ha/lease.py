"""The leader's lease: ``<name>/leader`` in the coordinator's container (``[storage] container``).

An empty blob whose lease is the leadership. Its holder writes its instance
  name and API address into the blob's metadata, so a standby can tell who leads.

Lease timing (the numbers that keep two leaders from acting at once): the lease lasts
``lease_duration`` (15-60 s) from the moment a renewal is *sent*; the leader renews every
``lease_duration / 5`` and stops acting ``MARGIN`` seconds before the lease could expire since its
last successful renewal, so a publish started in time (at most ``hub_publisher.PUBLISH_TIMEOUT``) lands
before any other instance can hold the lease. A standby tries to take the lease every
``lease_duration / 5``; it gets it at most ``lease_duration`` after the leader's last renewal.

The metadata also carries the generation of the last snapshot saved (``generation``, snapshot_blob.py):
it is written only under the lease, kept when another instance takes the lease, and read before a
snapshot is loaded.

Every call has short timeouts of its own and no SDK retry (``LEASE_CALL``): the
callers retry on their own schedule, with a deadline (reach.py), off the service's loop. An instance
proposes the same lease id every time it asks for the lease, so a request that took the lease but
whose answer was lost is simply answered yes the next time.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ....errors import SeForwarderError
from ..output.hub_producer import PUBLISH_TIMEOUT

log = logging.getLogger("se_forwarder.coordinator.blobs")

MARGIN = PUBLISH_TIMEOUT + 3.0
# Per-call options of the Azure SDK: no retry of its own, and timeouts within the callers' deadlines.
LEASE_CALL: dict[str, Any] = {"connection_timeout": 3, "read_timeout": 4, "retry_total": 0}
LEASE_DEADLINE = 5.0  # s a lease call may take before it counts as failed


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
        self.generation = 0  # the highest snapshot generation known recorded on the blob
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
            self.recorded_generation()  # kept: the metadata is written whole
            self.run(lambda: self.blob.set_blob_metadata(self._metadata(), lease=lease, **LEASE_CALL),
                     "recording this instance on the leader blob")
        except Exception as exc:  # noqa: BLE001 - only the standby's hint is lost
            log.warning("could not record this instance on the lease blob: %s", getattr(exc, "message", exc))
        return True

    def _metadata(self) -> dict[str, str]:
        return {"instance": self.instance, "api": self.api, "generation": str(self.generation)}

    def recorded_generation(self) -> int:
        """The snapshot generation recorded on the leader blob (0: none, or no blob yet); raises when
        it cannot be read."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            props = self.run(lambda: self.blob.get_blob_properties(**LEASE_CALL),
                             "reading the snapshot generation")
        except ResourceNotFoundError:
            return 0
        text = (props.metadata or {}).get("generation", "0")
        found = int(text) if text.isdigit() else 0
        self.generation = max(self.generation, found)
        return found

    def record_generation(self, number: int) -> None:
        """Record a snapshot generation saved, under the lease this instance holds (from the keeper's
        thread); raises when it does not hold it or the blob cannot be written."""
        lease = self._lease
        if lease is None:
            raise SeForwarderError("this instance does not hold the leader lease")
        self.generation = max(self.generation, number)
        self.run(lambda: self.blob.set_blob_metadata(self._metadata(), lease=lease, **LEASE_CALL),
                 "recording the snapshot generation")

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
