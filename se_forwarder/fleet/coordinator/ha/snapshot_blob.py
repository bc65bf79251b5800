"""The snapshot blob: the fold's checkpoint, ``<name>/snapshot.json.gz`` in the coordinator's container.

The fold with the partition positions it covers, written by the leader every ``snapshot_interval``
and when it stops. A restarted instance loads it and reads the hub on from those positions; without
one (or with one for another hub) it reads the hub from the start of its retention.

Its text (format 2) is gzipped lines of JSON, made and read one line at a time, so that saving or
loading 100,000 VMs never holds the fold twice:

- the first line, the header: ``{"format": 2, "hub", "coordinator", "instance", "writtenAt",
  "positions"}``;
- the fold's lines (``fold/snapshot.lines``: records in batches);
- the last line, the seal: ``{"sha256": <hex of every byte before this line>, "lines": <their
  number>, "generation"}`` signed with the coordinator's key exactly as a decision is (``keyid`` and
  ``signature`` members beside the others: approvals/signing.py).

A snapshot whose seal does not verify with a trusted key (trust.snapshot), or whose lines are not
the ones the seal names, is not used: whoever can write the container cannot write the fold.
``pack`` runs on the service's loop: the fold as it is, its small parts encoded and its large ones
copied (a VM's values as a tuple: a fifth of a second for 100,000 VMs); ``save`` encodes the copies
into lines, hashes and compresses them, seals and uploads them off the loop. A format 1
snapshot (one JSON document signed whole, as earlier versions wrote it) still loads.

The header carries the name of the coordinator it belongs to (``[coordinator] name``): another
coordinator's snapshot copied here is refused, even signed with a shared key. And the seal a
*generation*, one more at every save (numbered as it is uploaded): the leader records the
generation it saved on the leader blob's metadata (ha/lease.py, under its lease) and a snapshot
older than the generation recorded there is refused (ha/keeper.py): an older signed snapshot put
back in the blob (rolled back) cannot make an instance forget what it folded since.

Every call has short timeouts of its own and no SDK retry (``SNAPSHOT_CALL``): ha/keeper.py retries on
its own schedule, with a deadline (reach.py), off the service's loop.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import TYPE_CHECKING, Any

from ....approvals import signing
from ....errors import StateError
from ..edge import trust
from ..fold.snapshot import Records, pieces, restore, restore_lines, written
from ..fold.state import FleetState
from ..input.hub_reader import Position

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

FORMAT = 2
SNAPSHOT_CALL: dict[str, Any] = {"connection_timeout": 5, "read_timeout": 25, "retry_total": 0}
SNAPSHOT_DEADLINE = 30.0
CHUNK = 1 << 20  # bytes of lines compressed at a time
MAX_LINE = 64 << 20  # a line longer than this is no snapshot of ours (the fold's lines are batched)
GZIP = 16 + zlib.MAX_WBITS


@dataclass
class Snapshot:
    state: FleetState
    positions: dict[str, Position]
    written_at: float
    instance: str
    generation: int = 0  # 0: written before generations were kept


@dataclass
class Packed:
    """The fold as it was when packed (``SnapshotBlob.pack``): its header line and its pieces
    (fold/snapshot.pieces), to be written, compressed, sealed and uploaded (``SnapshotBlob.save``)."""

    header: bytes
    pieces: list[bytes | Records] = field(repr=False)


@dataclass
class Compressed:
    """A snapshot's lines compressed as written, to be sealed (``sealed``)."""

    parts: list[bytes]
    digest: Any  # hashlib's sha256 of every line so far
    count: int
    compressor: Any = field(repr=False)
    size: int = 0  # bytes of text


# zlib level 1: 100,000 VMs' 56 MB of lines compress in 0.4 s to 9.8 MB, against 1.0 s and 8.7 MB at
# level 5 (bench/coordinator_fold.py's fold), on the thread that uploads them.
LEVEL = 1


def compressed(text: Iterable[bytes], level: int = LEVEL) -> Compressed:
    """The lines of ``text`` (the header, then the fold's) compressed and hashed as they come; zlib
    and hashlib let go of the interpreter's lock meanwhile, so the service's loop goes on."""
    packed = Compressed([], hashlib.sha256(), 0, zlib.compressobj(level, zlib.DEFLATED, GZIP))
    pending: list[bytes] = []
    size = 0
    for line in text:
        pending.append(line)
        size += len(line)
        packed.count += 1
        if size >= CHUNK:
            _flush(packed, pending)
            packed.size += size
            pending, size = [], 0
    _flush(packed, pending)
    packed.size += size
    return packed


def _flush(packed: Compressed, pending: list[bytes]) -> None:
    if pending:
        chunk = b"".join(pending)
        packed.digest.update(chunk)
        packed.parts.append(packed.compressor.compress(chunk))


def _json_line(value: Any) -> bytes:
    return (json.dumps(value, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


def sealed(packed: Compressed, key: Ed25519PrivateKey, generation: int = 0) -> bytes:
    """The gzipped text of ``packed`` with its signed seal as the last line."""
    seal = {"sha256": packed.digest.hexdigest(), "lines": packed.count, "generation": generation}
    seal = signing.sign(seal, key)
    return b"".join([*packed.parts, packed.compressor.compress(_json_line(seal)), packed.compressor.flush()])


class SnapshotBlob:
    """``<name>/snapshot.json.gz``: the fold and the positions it covers, signed with ``key()``
    and taken only when it verifies with ``trusted()`` (module docstring)."""

    def __init__(self, container: Any, name: str, hub: str, key: Callable[[], Ed25519PrivateKey],
                 trusted: Callable[[], signing.VerifyKeys]) -> None:
        self.blob = container.get_blob_client(f"{name}/snapshot.json.gz")
        self.name, self.hub, self.key, self.trusted = name, hub, key, trusted

    def pack(self, state: FleetState, positions: dict[str, Position], instance: str) -> Packed:
        """The fold as it is now (on the service's loop: the fold must not change meanwhile), its
        large parts copied to be encoded by ``save`` (fold/snapshot.pieces)."""
        header = {"format": FORMAT, "hub": self.hub, "coordinator": self.name, "instance": instance,
                  "writtenAt": time.time(),
                  "positions": {pid: pos.as_data() for pid, pos in sorted(positions.items())}}
        enabled = gc.isenabled()
        gc.disable()  # copies make no cycle: a collection triggered by them would only cost the loop
        try:
            return Packed(_json_line(header), pieces(state))
        finally:
            if enabled:
                gc.enable()

    def save(self, packed: Packed, generation: int = 0) -> int:
        """Write, compress and seal the snapshot as ``generation`` (any thread), and upload it; its
        size in bytes (compressed)."""
        body = sealed(compressed(chain((packed.header,), written(packed.pieces))), self.key(), generation)
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
            return self.read(body)
        except StateError:
            raise
        except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, zlib.error) as exc:
            raise StateError(f"the snapshot blob is damaged ({type(exc).__name__}: {str(exc)[:100]})") \
                from None

    def read(self, body: bytes) -> Snapshot:
        """The snapshot in a blob's bytes (module docstring); StateError when it is not usable. Its
        seal is verified before anything of the fold is read: a first pass hashes the lines, a
        second restores them."""
        text = _text_lines(body)
        first = next(text, b"")
        header = json.loads(first)
        if not isinstance(header, dict):
            raise ValueError("the first line is not an object")
        if header.get("format") == 1:  # one document, signed whole
            return self._format_1(header, text)
        if header.get("format") != FORMAT:
            raise ValueError(f"format {header.get('format')!r}")
        digest, count, last = hashlib.sha256(first), 1, None
        for line in text:
            if last is not None:
                digest.update(last)
                count += 1
            last = line
        seal = self._sealed(json.loads(last) if last is not None else None, digest.hexdigest(), count)
        self._ours(header)
        state = restore_lines(islice(_text_lines(body), 1, count))
        positions = {str(pid): Position(int(p["sequence"]), str(p["offset"]))
                     for pid, p in header["positions"].items()}
        return Snapshot(state, positions, float(header["writtenAt"]), str(header.get("instance")),
                        int(seal.get("generation", 0)))

    def _ours(self, header: dict[str, Any]) -> None:
        if header.get("hub") != self.hub:
            raise StateError(f"the snapshot is of Event Hub {header.get('hub')!r}, not {self.hub!r}")
        if header.get("coordinator", self.name) != self.name:
            owner = str(header.get("coordinator"))[:100]
            raise StateError(f"the snapshot belongs to coordinator {owner!r}, not {self.name!r}")

    def _sealed(self, seal: Any, digest: str, count: int) -> dict[str, Any]:
        """The seal, when it verifies with a trusted key and names exactly the lines read."""
        if not isinstance(seal, dict):
            raise StateError("the snapshot blob is not the coordinator's: it has no seal")
        verdict = trust.snapshot(seal, self.trusted())
        if not verdict.trusted:
            raise StateError(f"the snapshot blob is not the coordinator's: {verdict.detail}")
        if seal.get("sha256") != digest or seal.get("lines") != count:
            raise StateError("the snapshot blob is not the coordinator's: the snapshot does not verify "
                             "(its lines are not the ones its signature seals)")
        return seal

    def _format_1(self, data: dict[str, Any], rest: Iterator[bytes]) -> Snapshot:
        if next(rest, None) is not None:
            raise ValueError("a format 1 snapshot is one document")
        verdict = trust.snapshot(data, self.trusted())
        if not verdict.trusted:
            raise StateError(f"the snapshot blob is not the coordinator's: {verdict.detail}")
        self._ours(data)
        positions = {str(pid): Position(int(p["sequence"]), str(p["offset"]))
                     for pid, p in data["positions"].items()}
        return Snapshot(restore(data["state"]), positions, float(data["writtenAt"]),
                        str(data.get("instance")), int(data.get("generation", 0)))


def _text_lines(body: bytes) -> Iterator[bytes]:
    """The lines of a gzipped text, each with its newline, decompressed a chunk at a time; a line
    longer than ``MAX_LINE`` is an error (a gzip bomb is not unpacked whole)."""
    if body[:2] != b"\x1f\x8b":
        raise ValueError("not gzip")
    unpack = zlib.decompressobj(GZIP)
    rest = b""
    view = memoryview(body)
    for start in range(0, len(body), CHUNK // 4):
        data = unpack.decompress(view[start:start + CHUNK // 4], MAX_LINE)
        while True:
            pieces = (rest + data).split(b"\n")
            rest = pieces.pop()
            for piece in pieces:
                yield piece + b"\n"
            if len(rest) > MAX_LINE:
                raise ValueError("a line is too long")
            if not unpack.unconsumed_tail:
                break
            data = unpack.decompress(unpack.unconsumed_tail, MAX_LINE)
    rest += unpack.flush()
    for piece in rest.split(b"\n"):
        if piece:
            yield piece + b"\n"
    if not unpack.eof:
        raise EOFError("the gzip stream is cut short")

