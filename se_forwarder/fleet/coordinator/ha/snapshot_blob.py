"""The snapshot blob: the fold's checkpoint, ``<name>/snapshot.json.gz`` in the coordinator's container.

The fold (``snapshot.snapshot``) with the partition positions it
  covers, gzipped JSON, written by the leader every ``snapshot_interval`` and when it stops. A
  restarted instance loads it and reads the hub on from those positions; without one (or with one
  for another hub) it reads the hub from the start of its retention. The document is signed with
  the coordinator's key exactly as a decision is (``keyid`` and ``signature`` members beside the
  others: approvals/signing.py), and a snapshot that does not verify with a trusted key
  (trust.snapshot) is not used: whoever can write the container cannot write the fold.

The document carries the name of the coordinator it belongs to (``[coordinator] name``): another
coordinator's snapshot copied here is refused, even signed with a shared key. And a *generation*,
one more at every save: the leader records the generation it saved on the leader blob's metadata
(ha/lease.py, under its lease) and a snapshot older than the generation recorded there is refused
(ha/keeper.py): an older signed snapshot put back in the blob (rolled back) cannot make an instance
forget what it folded since.

Every call has short timeouts of its own and no SDK retry (``SNAPSHOT_CALL``): ha/keeper.py retries on
its own schedule, with a deadline (reach.py), off the service's loop.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ....approvals import signing
from ....errors import StateError
from ..edge import trust
from ..input.hub_reader import Position
from ..signer import signed_json

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

FORMAT = 1
SNAPSHOT_CALL: dict[str, Any] = {"connection_timeout": 5, "read_timeout": 25, "retry_total": 0}
SNAPSHOT_DEADLINE = 30.0


@dataclass
class Snapshot:
    state: dict[str, Any]
    positions: dict[str, Position]
    written_at: float
    instance: str
    generation: int = 0  # 0: written before generations were kept


class SnapshotBlob:
    """``<name>/snapshot.json.gz``: the fold and the positions it covers, signed with ``key()``
    and taken only when it verifies with ``trusted()`` (module docstring)."""

    def __init__(self, container: Any, name: str, hub: str, key: Callable[[], Ed25519PrivateKey],
                 trusted: Callable[[], signing.VerifyKeys]) -> None:
        self.blob = container.get_blob_client(f"{name}/snapshot.json.gz")
        self.name, self.hub, self.key, self.trusted = name, hub, key, trusted

    def save(self, state: dict[str, Any], positions: dict[str, Position], instance: str,
             generation: int = 0) -> int:
        """Write the snapshot; its size in bytes (compressed)."""
        data = {"format": FORMAT, "hub": self.hub, "coordinator": self.name, "generation": generation,
                "instance": instance, "writtenAt": time.time(),
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
            if data.get("coordinator", self.name) != self.name:
                owner = str(data.get("coordinator"))[:100]
                raise StateError(f"the snapshot belongs to coordinator {owner!r}, not {self.name!r}")
            positions = {str(pid): Position(int(p["sequence"]), str(p["offset"]))
                         for pid, p in data["positions"].items()}
            return Snapshot(data["state"], positions, float(data["writtenAt"]), str(data.get("instance")),
                            int(data.get("generation", 0)))
        except StateError:
            raise
        except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StateError(f"the snapshot blob is damaged ({type(exc).__name__}: {str(exc)[:100]})") \
                from None
