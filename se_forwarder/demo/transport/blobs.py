"""The fleet demo's blob container: the coordinator's lease and snapshot blobs, kept in memory.

Only ``se-forwarder demo --fleet`` uses it (handed in code through ``coordinator.access.Clients``;
no key of ``coordinator.toml`` selects it). It answers the calls the coordinator makes of the SDK's
``ContainerClient`` and ``BlobClient`` (blobs.py) as Azure Blob Storage does:

- ``create_container`` (ResourceExistsError when it exists); ``upload_blob`` (ResourceExistsError
  without ``overwrite`` when the blob exists), ``download_blob().readall()`` and
  ``get_blob_properties`` (ResourceNotFoundError for a blob that does not exist);
- ``acquire_lease(lease_duration, lease_id)``: a lease for that many seconds, 409 while another
  lease id holds it; the same id is answered yes again (blobs.Lease proposes one id); ``renew`` and
  ``release`` of a lease that another id took meanwhile fail with 409; ``set_blob_metadata`` on a
  leased blob needs its lease (412 otherwise).

The Azure SDK's exceptions are raised (azure-core, imported when one is).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


def _error(kind: str, status: int, message: str) -> Exception:
    from azure.core import exceptions

    error = getattr(exceptions, kind)(message=message)
    error.status_code = status
    return error


@dataclass
class _Blob:
    data: bytes = b""
    metadata: dict[str, str] = field(default_factory=dict)
    lease_id: str | None = None
    lease_until: float = 0.0  # monotonic

    def leased(self, now: float) -> bool:
        return self.lease_id is not None and now < self.lease_until


@dataclass(frozen=True)
class LeaseProperties:
    status: str  # locked | unlocked
    state: str  # leased | available


@dataclass(frozen=True)
class BlobProperties:
    name: str
    size: int
    metadata: dict[str, str]
    lease: LeaseProperties


class LocalContainer:
    """``ContainerClient`` of the demo's one container (module docstring)."""

    def __init__(self, name: str = "se-coordinator") -> None:
        self.container_name = name
        self.exists = False
        self._blobs: dict[str, _Blob] = {}
        self._lock = threading.Lock()

    def create_container(self, **_kwargs: Any) -> None:
        with self._lock:
            if self.exists:
                raise _error("ResourceExistsError", 409, "The specified container already exists.")
            self.exists = True

    def get_blob_client(self, blob: str) -> LocalBlobClient:
        return LocalBlobClient(self, blob)

    def close(self) -> None:
        """Nothing to release: the blobs are in this process."""


class LocalBlobClient:
    def __init__(self, container: LocalContainer, name: str) -> None:
        self.container, self.blob_name = container, name

    def _get(self) -> _Blob:
        blob = self.container._blobs.get(self.blob_name)
        if blob is None:
            raise _error("ResourceNotFoundError", 404, "The specified blob does not exist.")
        return blob

    def upload_blob(self, data: bytes, *, overwrite: bool = False, lease: Any = None, **_kwargs: Any) -> None:
        with self.container._lock:
            blob = self.container._blobs.get(self.blob_name)
            if blob is not None and not overwrite:
                raise _error("ResourceExistsError", 409, "The specified blob already exists.")
            if blob is not None and blob.leased(time.monotonic()) and _lease_id(lease) != blob.lease_id:
                raise _error("HttpResponseError", 412, "There is currently a lease on the blob.")
            if blob is None:
                blob = self.container._blobs[self.blob_name] = _Blob()
            blob.data = bytes(data)

    def download_blob(self, **_kwargs: Any) -> _Download:
        with self.container._lock:
            return _Download(self._get().data)

    def get_blob_properties(self, **_kwargs: Any) -> BlobProperties:
        with self.container._lock:
            blob = self._get()
            leased = blob.leased(time.monotonic())
            return BlobProperties(self.blob_name, len(blob.data), dict(blob.metadata),
                                  LeaseProperties("locked" if leased else "unlocked",
                                                  "leased" if leased else "available"))

    def set_blob_metadata(self, metadata: dict[str, str], *, lease: Any = None, **_kwargs: Any) -> None:
        with self.container._lock:
            blob = self._get()
            if blob.leased(time.monotonic()) and _lease_id(lease) != blob.lease_id:
                raise _error("HttpResponseError", 412, "There is currently a lease on the blob.")
            blob.metadata = dict(metadata)

    def acquire_lease(self, lease_duration: int = -1, lease_id: str | None = None,
                      **_kwargs: Any) -> LocalLease:
        with self.container._lock:
            blob = self._get()
            now = time.monotonic()
            if blob.leased(now) and blob.lease_id != lease_id:
                raise _error("HttpResponseError", 409, "There is already a lease present.")
            blob.lease_id = lease_id or "lease"
            blob.lease_until = now + (lease_duration if lease_duration > 0 else 10 ** 9)
            return LocalLease(self, blob.lease_id, float(lease_duration))


class LocalLease:
    """``BlobLeaseClient`` of a lease the blob granted."""

    def __init__(self, blob: LocalBlobClient, lease_id: str, duration: float) -> None:
        self.blob, self.id, self.duration = blob, lease_id, duration

    def _held(self) -> _Blob:
        found = self.blob._get()
        if found.lease_id != self.id:  # another id took it after this one expired, or it was released
            raise _error("HttpResponseError", 409, "The lease ID specified did not match the blob's lease.")
        return found

    def renew(self, **_kwargs: Any) -> None:
        with self.blob.container._lock:
            found = self._held()
            found.lease_until = time.monotonic() + (self.duration if self.duration > 0 else 10 ** 9)

    def release(self, **_kwargs: Any) -> None:
        with self.blob.container._lock:
            found = self._held()
            found.lease_id, found.lease_until = None, 0.0


@dataclass(frozen=True)
class _Download:
    data: bytes

    def readall(self) -> bytes:
        return self.data


def _lease_id(lease: Any) -> str | None:
    return lease if isinstance(lease, str) or lease is None else getattr(lease, "id", None)
