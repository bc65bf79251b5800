"""A small local Event Hubs broker for tests, built on Apache Qpid Proton.

Why: the real ``azure-eventhub`` client must be tested over real AMQP 1.0, and the official emulator
needs Docker. This broker speaks just enough of the Event Hubs protocol for the unmodified SDK:
SASL ANONYMOUS, CBS put-token (SAS signatures are checked against the broker's key), ``$management``
READ of hub and partition properties, sender links (single messages and SDK batches, partition keys,
explicit partitions) and consumer links with offset / sequence-number / enqueued-time filters.

Like Event Hubs, it can refuse what the caller may not do (both off unless asked for):
``consumer_groups`` (names; ``$Default`` is always one) refuses a consumer link in any other group
with ``amqp:not-found`` "The messaging entity '<namespace>:eventhub:<hub>~<n>|<group>' could not be
found" (the service's words for a missing consumer group); ``policies`` adds SAS policies besides
the root one, each with its claims (``Listen``, ``Send``, ``Manage``): a link the token's claims do
not cover is refused with ``amqp:unauthorized-access`` "Unauthorized access. 'Send' claim(s) are
required to perform this operation. Resource: 'sb://<host>/<hub>'." (for a sender; ``'Listen'``
and the consumer group's partition for a receiver), at attach, as the service does.

azure-eventhub 5.15.1 reads performative fields by position while Proton legally omits trailing nulls,
so clients connect through :class:`PaddingRelay`, which re-pads every broker-to-client performative
(and the error / source / target / outcome lists inside it) to its full field count, the way the real
service sends them. See ``../shared/docs/eventhubs-local-broker.md``.

Threads: one for the Proton container, one for the relay. All Proton objects live on the container
thread; other threads talk to it only through the store (locked) and an ``EventInjector``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import itertools
import os
import re
import secrets
import selectors
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote_plus, urlparse

from proton import (
    Condition,
    Data,
    Delivery,
    Described,
    Endpoint,
    Message,
    Terminus,
    int32,
    symbol,
    timestamp,
    ulong,
)
from proton.reactor import ApplicationEvent, Container, EventInjector

# --------------------------------------------------------------------------------------------------
# AMQP encoding helpers (just enough to walk frames and message sections)
# --------------------------------------------------------------------------------------------------

#: Full field counts of the composites the SDK reads by position (performatives, SASL frames,
#: error, source, target and delivery outcomes).
FIELD_COUNTS: dict[int, int] = {
    0x10: 10,  # open
    0x11: 8,  # begin
    0x12: 14,  # attach
    0x13: 11,  # flow
    0x14: 11,  # transfer
    0x15: 6,  # disposition
    0x16: 3,  # detach
    0x17: 1,  # end
    0x18: 1,  # close
    0x1D: 3,  # error
    0x23: 2,  # received
    0x24: 0,  # accepted
    0x25: 1,  # rejected
    0x26: 0,  # released
    0x27: 3,  # modified
    0x28: 11,  # source
    0x29: 7,  # target
    0x40: 1,  # sasl-mechanisms
    0x41: 3,  # sasl-init
    0x42: 1,  # sasl-challenge
    0x43: 1,  # sasl-response
    0x44: 2,  # sasl-outcome
}

_FIXED_WIDTH = {0x40: 0, 0x50: 1, 0x60: 2, 0x70: 4, 0x80: 8, 0x90: 16}
_NULL = b"\x40"
_PROTOCOL_HEADER = b"AMQP"


def skip_value(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Return the position just after the AMQP-encoded value starting at ``pos``."""
    code = buf[pos]
    pos += 1
    if code == 0x00:  # described: descriptor, then value
        return skip_value(buf, skip_value(buf, pos))
    high = code & 0xF0
    if high in _FIXED_WIDTH:
        return pos + _FIXED_WIDTH[high]
    if high in (0xA0, 0xC0, 0xE0):
        return pos + 1 + buf[pos]
    if high in (0xB0, 0xD0, 0xF0):
        return pos + 4 + struct.unpack_from(">I", buf, pos)[0]
    raise ValueError(f"unknown AMQP constructor 0x{code:02x} at {pos - 1}")


def _descriptor_code(buf: bytes, pos: int) -> tuple[int | None, int]:
    """Numeric descriptor at ``pos`` (None when symbolic or not a ulong) and the position after it."""
    code = buf[pos]
    if code == 0x53:
        return buf[pos + 1], pos + 2
    if code == 0x80:
        return struct.unpack_from(">Q", buf, pos + 1)[0], pos + 9
    if code == 0x44:
        return 0, pos + 1
    return None, skip_value(buf, pos)


def _list_items(buf: bytes, pos: int) -> tuple[list[bytes], int] | None:
    """The raw items of the list at ``pos`` and the position after it; None if not a list."""
    code = buf[pos]
    if code == 0x45:
        return [], pos + 1
    if code == 0xC0:
        size, count, start = buf[pos + 1], buf[pos + 2], pos + 3
        end = pos + 2 + size
    elif code == 0xD0:
        size, count = struct.unpack_from(">II", buf, pos + 1)
        start, end = pos + 9, pos + 5 + size
    else:
        return None
    items = []
    for _ in range(count):
        after = skip_value(buf, start)
        items.append(bytes(buf[start:after]))
        start = after
    return items, end


def _encode_list(items: list[bytes]) -> bytes:
    if not items:
        return b"\x45"
    payload = b"".join(items)
    if len(payload) + 1 <= 0xFF and len(items) <= 0xFF:
        return bytes((0xC0, len(payload) + 1, len(items))) + payload
    return b"\xd0" + struct.pack(">II", len(payload) + 4, len(items)) + payload


def pad_described(buf: bytes) -> tuple[bytes, int]:
    """Re-encode the described value at the start of ``buf`` with its list padded to full length.

    Known composites nested as list items (an error inside a detach, a source inside an attach...)
    are padded too. Returns the new encoding and how many bytes of ``buf`` it replaces.
    """
    if not buf or buf[0] != 0x00:
        end = skip_value(buf, 0)
        return bytes(buf[:end]), end
    code, value_pos = _descriptor_code(buf, 1)
    parsed = _list_items(buf, value_pos) if code in FIELD_COUNTS else None
    if parsed is None:
        end = skip_value(buf, 0)
        return bytes(buf[:end]), end
    items, end = parsed
    fixed = []
    for item in items:
        if item[:1] == b"\x00":
            item, _ = pad_described(item)
        fixed.append(item)
    fixed.extend([_NULL] * (FIELD_COUNTS[code] - len(fixed)))
    return bytes(buf[:value_pos]) + _encode_list(fixed), end


def pad_frame(frame: bytes) -> bytes:
    """A complete AMQP/SASL frame with its performative padded; heartbeats pass unchanged."""
    doff = frame[4] * 4
    body = frame[doff:]
    if not body:
        return frame
    performative, used = pad_described(body)
    new_body = performative + body[used:]  # a transfer's payload follows its performative
    header = struct.pack(">I", doff + len(new_body)) + frame[4:doff]
    return header + new_body


class FrameSplitter:
    """Cuts a byte stream into protocol headers and frames, padding each frame."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = bytearray()
        while len(self._buf) >= 8:
            if self._buf[:4] == _PROTOCOL_HEADER:
                out += self._buf[:8]
                del self._buf[:8]
                continue
            size = struct.unpack_from(">I", self._buf, 0)[0]
            if len(self._buf) < size:
                break
            out += pad_frame(bytes(self._buf[:size]))
            del self._buf[:size]
        return bytes(out)


def message_sections(raw: bytes) -> list[tuple[int | None, bytes]]:
    """Split an encoded AMQP message into (section descriptor code, section bytes)."""
    sections = []
    pos = 0
    while pos < len(raw):
        end = skip_value(raw, pos)
        code = _descriptor_code(raw, pos + 1)[0] if raw[pos] == 0x00 else None
        sections.append((code, raw[pos:end]))
        pos = end
    return sections


def _binary_value(section: bytes) -> bytes:
    """The binary payload of a data section."""
    _, pos = _descriptor_code(section, 1)
    if section[pos] == 0xA0:
        return section[pos + 2 : pos + 2 + section[pos + 1]]
    size = struct.unpack_from(">I", section, pos + 1)[0]
    return section[pos + 5 : pos + 5 + size]


def _owned(value: Any) -> Any:
    """Copy memoryviews (which point into Proton's reused buffers) into bytes, recursively."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return type(value)({_owned(k): _owned(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_owned(v) for v in value]
    return value


def decode_section(section: bytes) -> Any:
    """The value of one encoded section (a Described), with binaries copied."""
    data = Data()
    data.decode(section)
    data.rewind()
    data.next()
    return _owned(data.get_object())


def encode_value(value: Any) -> bytes:
    data = Data()
    data.put_object(value)
    return data.encode()


_ANNOTATIONS = 0x72
_DATA = 0x75


def is_batch(sections: list[tuple[int | None, bytes]]) -> bool:
    """True for an SDK batch: every body section is a data section holding a whole message.

    Python Proton does not expose the transfer's message-format (0x80013700 for batches), so the
    payload shape decides; a single event whose body is itself an encoded AMQP message would be
    mistaken for a batch, which no test does.
    """
    bodies = [s for code, s in sections if code is not None and code >= _DATA]
    if not bodies or any(code != _DATA for code, _ in sections if code is not None and code >= _DATA):
        return False
    for section in bodies:
        inner = _binary_value(section)
        if inner[:2] != b"\x00\x53" or len(inner) < 3 or not 0x70 <= inner[2] <= 0x78:
            return False
        try:
            message_sections(inner)
        except (ValueError, IndexError, struct.error):
            return False
    return True


def annotations_of(sections: list[tuple[int | None, bytes]]) -> dict:
    for code, section in sections:
        if code == _ANNOTATIONS:
            value = decode_section(section)
            return dict(value.value) if isinstance(value, Described) and value.value else {}
    return {}


def with_annotations(raw: bytes, extra: dict) -> bytes:
    """``raw`` message with ``extra`` merged into its message-annotations section."""
    sections = message_sections(raw)
    annotations = annotations_of(sections)
    annotations.update(extra)
    new_section = encode_value(Described(ulong(_ANNOTATIONS), annotations))
    out = []
    placed = False
    for code, section in sections:
        if code == _ANNOTATIONS:
            continue
        if not placed and (code is None or code > _ANNOTATIONS):
            out.append(new_section)
            placed = True
        out.append(section)
    if not placed:
        out.append(new_section)
    return b"".join(out)


# --------------------------------------------------------------------------------------------------
# The relay
# --------------------------------------------------------------------------------------------------


class PaddingRelay:
    """TCP relay on loopback: client bytes pass through, broker frames are re-padded.

    One thread serves every connection (selectors). ``stop()`` drops all connections abruptly and
    closes the listening socket, like a network outage; ``start()`` listens again on the same port.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.target_port = 0
        self._thread: threading.Thread | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._listener: socket.socket | None = None

    def start(self, target_port: int) -> None:
        self.target_port = target_port
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name=f"eh-relay-{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        assert self._wake_w is not None
        self._wake_w.send(b"x")
        self._thread.join(timeout=10)
        if self._thread.is_alive():
            raise RuntimeError("relay thread did not stop")
        self._thread = None
        for sock in (self._wake_r, self._wake_w, self._listener):
            if sock is not None:
                sock.close()
        self._wake_r = self._wake_w = self._listener = None

    # -- the loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        assert self._listener is not None and self._wake_r is not None
        sel.register(self._listener, selectors.EVENT_READ, ("accept", None))
        sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        pipes: dict[socket.socket, _Pipe] = {}
        try:
            while True:
                for key, mask in sel.select(timeout=1.0):
                    kind, pipe = key.data
                    if kind == "wake":
                        return
                    if kind == "accept":
                        self._accept(sel, pipes)
                        continue
                    pipe.handle(key.fileobj, mask)
                for pipe in {p for p in pipes.values() if p.closed}:
                    pipe.unregister(sel, pipes)
        finally:
            for pipe in set(pipes.values()):
                pipe.close_now()
            sel.close()

    def _accept(self, sel: selectors.BaseSelector, pipes: dict) -> None:
        assert self._listener is not None
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            upstream = socket.create_connection((self.host, self.target_port), timeout=2)
        except OSError:
            _abort(client)
            return
        pipe = _Pipe(client, upstream)
        pipes[client] = pipe
        pipes[upstream] = pipe
        pipe.register(sel)


def _abort(sock: socket.socket) -> None:
    """Close with RST, the way a vanished peer looks."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _Pipe:
    """One relayed connection: client <-> upstream, with broker frames padded."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        for sock in (client, upstream):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client = client
        self.upstream = upstream
        self.splitter = FrameSplitter()
        self.out: dict[socket.socket, bytearray] = {client: bytearray(), upstream: bytearray()}
        self.closed = False

    def register(self, sel: selectors.BaseSelector) -> None:
        sel.register(self.client, selectors.EVENT_READ, ("pipe", self))
        sel.register(self.upstream, selectors.EVENT_READ, ("pipe", self))
        self.sel = sel

    def unregister(self, sel: selectors.BaseSelector, pipes: dict) -> None:
        """One side hung up: pass on what is buffered, then close both sides normally."""
        for sock in (self.client, self.upstream):
            pipes.pop(sock, None)
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(sock)
        for sock in (self.client, self.upstream):
            if sock.fileno() == -1:
                continue
            try:
                if self.out[sock]:
                    sock.setblocking(True)
                    sock.settimeout(1)
                    sock.sendall(self.out[sock])
            except OSError:
                pass
            sock.close()

    def close_now(self) -> None:
        """The relay stops: drop both sides with a reset, like a vanished network."""
        self.closed = True
        for sock in (self.client, self.upstream):
            if sock.fileno() != -1:
                _abort(sock)

    def handle(self, sock: socket.socket, mask: int) -> None:
        if self.closed:
            return
        try:
            if mask & selectors.EVENT_READ:
                data = sock.recv(65536)
                if not data:
                    self.closed = True
                    return
                if sock is self.upstream:
                    self._queue(self.client, self.splitter.feed(data))
                else:
                    self._queue(self.upstream, data)
            if mask & selectors.EVENT_WRITE:
                self._flush(sock)
        except (OSError, ValueError, IndexError, struct.error):
            self.closed = True

    def _queue(self, sock: socket.socket, data: bytes) -> None:
        if data:
            self.out[sock] += data
            self._flush(sock)

    def _flush(self, sock: socket.socket) -> None:
        buf = self.out[sock]
        while buf:
            try:
                sent = sock.send(buf)
            except BlockingIOError:
                break
            del buf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if buf else 0)
        self.sel.modify(sock, events, ("pipe", self))


# --------------------------------------------------------------------------------------------------
# The store (survives broker restarts)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerMessage:
    """One event as stored in a partition, already stamped with the x-opt-* annotations."""

    partition: int
    sequence_number: int
    offset: int
    enqueued_time_ms: int
    partition_key: str | None
    encoded: bytes

    def message(self) -> Message:
        """Decoded with Proton (body copied out of Proton's buffer)."""
        msg = Message()
        msg.decode(self.encoded)
        msg.body = _owned(msg.body)
        return msg


class HubStore:
    """The partitions of one hub. Written on the container thread, read by tests under the lock."""

    def __init__(self, name: str, partition_count: int) -> None:
        self.name = name
        self.created_at_ms = int(time.time() * 1000)
        self.partitions: list[list[BrokerMessage]] = [[] for _ in range(partition_count)]
        self._next_offset = [0] * partition_count
        self.lock = threading.Lock()
        self.begins = [0] * partition_count  # the first sequence number kept (retention: ``expire``)
        self.stalled = False  # deliveries to consumers held (``EventHubsBroker.stall_deliveries``)

    @property
    def partition_ids(self) -> list[str]:
        return [str(i) for i in range(len(self.partitions))]

    def partition_for_key(self, key: str) -> int:
        return zlib.crc32(key.encode("utf-8")) % len(self.partitions)

    def append(self, partition: int, raw: bytes, partition_key: str | None) -> BrokerMessage:
        with self.lock:
            part = self.partitions[partition]
            seq = len(part)
            offset = self._next_offset[partition]
            now_ms = int(time.time() * 1000)
            annotations: dict[Any, Any] = {
                symbol("x-opt-sequence-number"): seq,
                symbol("x-opt-offset"): str(offset),
                symbol("x-opt-enqueued-time"): timestamp(now_ms),
            }
            if partition_key is not None:
                annotations[symbol("x-opt-partition-key")] = partition_key
            stored = BrokerMessage(
                partition, seq, offset, now_ms, partition_key, with_annotations(raw, annotations)
            )
            part.append(stored)
            self._next_offset[partition] += max(len(stored.encoded), 1)
            return stored

    def snapshot(self, partition: int) -> list[BrokerMessage]:
        with self.lock:
            return list(self.partitions[partition])

    def start_index(self, partition: int, selector: str | None) -> int:
        """Index of the first message a consumer with this selector filter receives."""
        with self.lock:
            return max(self.begins[partition], self._start_index(partition, selector))

    def _start_index(self, partition: int, selector: str | None) -> int:
        part = self.partitions[partition]
        if not selector:
            return 0
        match = _SELECTOR.search(selector)
        if not match:
            raise ValueError(f"unsupported selector filter {selector!r}")
        field, op, value = match.groups()
        if value == "@latest":
            return len(part)
        bound = int(value)
        for index, msg in enumerate(part):
            key = {
                "offset": msg.offset,
                "sequence-number": msg.sequence_number,
                "enqueued-time": msg.enqueued_time_ms,
            }[field]
            if key > bound or (op == ">=" and key == bound):
                return index
        return len(part)


_SELECTOR = re.compile(r"amqp\.annotation\.x-opt-(offset|sequence-number|enqueued-time)\s*(>=|>)\s*'([^']*)'")
# --------------------------------------------------------------------------------------------------
# The AMQP side (runs on the container thread)
# --------------------------------------------------------------------------------------------------

_CREDIT = 100
_KIND_CBS, _KIND_MGMT, _KIND_HUB_IN, _KIND_CONSUMER = "cbs", "mgmt", "hub-in", "consumer"


@dataclass
class _Fault:
    count: int
    condition: str
    description: str


def _selector_of(filter_data: Data | None) -> str | None:
    """The ``apache.org:selector-filter:string`` expression of a source's filter map, if any."""
    if filter_data is None:
        return None
    filter_data.rewind()
    if not filter_data.next():
        return None
    filters = filter_data.get_object()
    for value in (filters or {}).values():
        if isinstance(value, Described) and str(value.descriptor).endswith("selector-filter:string"):
            return str(_owned(value.value))
    return None


def _new_key() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _tracking() -> str:
    """The tail Event Hubs puts on its error descriptions."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    return f"TrackingId:{secrets.token_hex(16)}_G0, SystemTracker:local-eventhubs, Timestamp:{stamp}"


def _path_of(address: str | None) -> list[str]:
    if not address:
        return []
    path = urlparse(address).path if "://" in address else address
    return [p for p in path.strip("/").split("/") if p]


class _BrokerHandler:
    """Proton event handler: the broker's whole protocol logic."""

    def __init__(self, broker: EventHubsBroker) -> None:
        self.broker = broker
        self.store = broker.store
        self.consumers: dict[Any, list[Any]] = {}  # partition -> consumer links
        self.claims: dict[Any, set[str]] = {}  # connection -> the claims of the tokens put on it
        self.links: set[Any] = set()
        self.connections: set[Any] = set()
        self._tags = itertools.count(1)
        self._round_robin = itertools.count()
        self.container: Container | None = None
        self.acceptor: Any = None
        self.injector: EventInjector | None = None

    # -- connection, session ---------------------------------------------------------------------

    def on_connection_bound(self, event: Any) -> None:
        sasl = event.transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        self.connections.add(event.connection)

    def on_connection_remote_open(self, event: Any) -> None:
        if event.connection.state & Endpoint.LOCAL_UNINIT:
            event.connection.container = f"local-eventhubs-{self.broker.port}"
            event.connection.open()

    def on_session_remote_open(self, event: Any) -> None:
        if event.session.state & Endpoint.LOCAL_UNINIT:
            event.session.open()

    def on_connection_remote_close(self, event: Any) -> None:
        if not event.connection.state & Endpoint.LOCAL_CLOSED:
            event.connection.close()

    def on_session_remote_close(self, event: Any) -> None:
        if not event.session.state & Endpoint.LOCAL_CLOSED:
            event.session.close()

    def on_transport_closed(self, event: Any) -> None:
        conn = event.connection
        if conn is None:
            return
        self.connections.discard(conn)
        self.claims.pop(conn, None)
        for link in [lk for lk in self.links if lk.connection == conn]:
            self._forget(link)

    # -- links -----------------------------------------------------------------------------------

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        if link.is_receiver:
            self._open_incoming(link)
        else:
            self._open_outgoing(link)

    def _open_incoming(self, link: Any) -> None:
        """A link the client sends on: $cbs, $management or the hub (optionally a partition)."""
        address = link.remote_target.address
        path = _path_of(address)
        link.max_message_size = self.broker.max_message_size
        if address == "$cbs" or path[-1:] == ["$cbs"]:
            link.kind = _KIND_CBS
        elif address == "$management" or path[-1:] == ["$management"]:
            link.kind = _KIND_MGMT
        else:
            error = None
            partition = None
            if not path or path[0] != self.store.name:
                error = f"The messaging entity '{address}' could not be found."
            elif len(path) == 3 and path[1].lower() == "partitions":
                partition = self._partition_or_none(path[2])
                if partition is None:
                    error = f"Partition '{path[2]}' does not exist in hub '{self.store.name}'."
            elif len(path) != 1:
                error = f"Unsupported send address '{address}'."
            if error:
                self._refuse(link, "amqp:not-found", error)
                return
            if not self._may(link, "Send", f"sb://{self.broker.host}:{self.broker.port}/{self.store.name}"):
                return
            link.kind = _KIND_HUB_IN
            link.partition = partition
        self.links.add(link)
        link.open()
        link.flow(_CREDIT)

    def _open_outgoing(self, link: Any) -> None:
        """A link the client receives on: $cbs / $management replies or a partition."""
        address = link.remote_source.address
        path = _path_of(address)
        if address == "$cbs" or path[-1:] == ["$cbs"]:
            link.kind = _KIND_CBS
        elif address == "$management" or path[-1:] == ["$management"]:
            link.kind = _KIND_MGMT
        else:
            if (
                len(path) != 5
                or path[0] != self.store.name
                or path[1].lower() != "consumergroups"
                or path[3].lower() != "partitions"
            ):
                self._refuse(link, "amqp:not-found", f"The messaging entity '{address}' could not be found.")
                return
            partition = self._partition_or_none(path[4])
            if partition is None:
                self._refuse(link, "amqp:not-found", f"Partition '{path[4]}' does not exist.")
                return
            groups = self.broker.consumer_groups
            if groups is not None and path[2].lower() not in {g.lower() for g in (*groups, "$Default")}:
                self._refuse(link, "amqp:not-found", f"The messaging entity 'local-eventhubs:eventhub:"
                             f"{self.store.name}~16383|{path[2]}' could not be found. To know more visit "
                             "https://aka.ms/sbResourceMgrExceptions. " + _tracking())
                return
            if not self._may(link, "Listen", f"sb://{self.broker.host}:{self.broker.port}/{'/'.join(path)}"):
                return
            selector = _selector_of(link.remote_source.filter)
            try:
                link.cursor = self.store.start_index(partition, selector)
            except ValueError as exc:
                self._refuse(link, "amqp:not-implemented", str(exc))
                return
            link.kind = _KIND_CONSUMER
            link.partition = partition
            self.consumers.setdefault(partition, []).append(link)
        link.pending = []
        self.links.add(link)
        link.open()
        self._pump(link)

    def _may(self, link: Any, claim: str, resource: str) -> bool:
        """Whether the tokens put on the link's connection carry ``claim``; refuses the link if not."""
        held = self.claims.get(link.connection, set())
        if claim in held or "Manage" in held:
            return True
        self._refuse(link, "amqp:unauthorized-access", f"Unauthorized access. '{claim}' claim(s) are "
                     f"required to perform this operation. Resource: '{resource.lower()}'. " + _tracking())
        return False

    def _partition_or_none(self, text: str) -> int | None:
        return int(text) if text.isdigit() and int(text) < len(self.store.partitions) else None

    def _refuse(self, link: Any, condition: str, description: str) -> None:
        """Refuse a link as AMQP says and Event Hubs does: an attach with a null terminus, then a
        detach carrying the error."""
        (link.target if link.is_receiver else link.source).type = Terminus.UNSPECIFIED
        link.open()
        link.condition = Condition(condition, description, {symbol("tracking-id"): "local"})
        link.close()

    def on_link_remote_close(self, event: Any) -> None:
        link = event.link
        self._forget(link)
        if not link.state & Endpoint.LOCAL_CLOSED:
            link.close()

    def _forget(self, link: Any) -> None:
        self.links.discard(link)
        partition = (
            getattr(link, "partition", None) if getattr(link, "kind", None) == _KIND_CONSUMER else None
        )
        if partition is not None and link in self.consumers.get(partition, []):
            self.consumers[partition].remove(link)

    def on_link_flow(self, event: Any) -> None:
        if event.link.is_sender and event.link in self.links:
            self._pump(event.link)

    # -- deliveries ------------------------------------------------------------------------------

    def on_delivery(self, event: Any) -> None:
        dlv = event.delivery
        link = event.link
        if link.is_sender:
            if dlv.remote_state or dlv.remote_settled:
                dlv.settle()
            return
        if not dlv.readable or dlv.partial:
            return
        chunks = []
        while True:
            chunk = link.recv(max(dlv.pending, 1))
            if not chunk:
                break
            chunks.append(bytes(chunk))
        link.advance()
        raw = b"".join(chunks)
        kind = getattr(link, "kind", None)
        try:
            if kind == _KIND_HUB_IN:
                self._on_event_message(link, dlv, raw)
            elif kind in (_KIND_CBS, _KIND_MGMT):
                self._on_request(link, raw)
                dlv.update(Delivery.ACCEPTED)
                dlv.settle()
        except Exception as exc:  # a bad message must not take the broker down
            self._reject(dlv, "amqp:internal-error", f"{type(exc).__name__}: {exc}")
        if link.credit < _CREDIT // 2:
            link.flow(_CREDIT - link.credit)

    def _reject(self, dlv: Any, condition: str, description: str) -> None:
        dlv.local.condition = Condition(condition, description, {symbol("tracking-id"): "local"})
        dlv.update(Delivery.REJECTED)
        dlv.settle()

    def _on_event_message(self, link: Any, dlv: Any, raw: bytes) -> None:
        fault = self.broker._take_fault()
        if fault is not None:
            self._reject(dlv, fault.condition, fault.description)
            return
        if len(raw) > self.broker.max_message_size:
            self._reject(
                dlv,
                "amqp:link:message-size-exceeded",
                f"The received message (size {len(raw)}) exceeds the limit "
                f"({self.broker.max_message_size}) currently allowed on the link.",
            )
            return
        sections = message_sections(raw)
        outer_key = annotations_of(sections).get(symbol("x-opt-partition-key"))
        inners = [_binary_value(s) for code, s in sections if code == _DATA] if is_batch(sections) else [raw]
        key = str(outer_key) if outer_key is not None else None
        if link.partition is not None:
            partition = link.partition
        elif key is not None:
            partition = self.store.partition_for_key(key)
        else:
            partition = next(self._round_robin) % len(self.store.partitions)
        for inner in inners:
            inner_key = annotations_of(message_sections(inner)).get(symbol("x-opt-partition-key"))
            self.store.append(partition, inner, key if inner_key is None else str(inner_key))
        self.broker._received(len(inners))
        dlv.update(Delivery.ACCEPTED)
        dlv.settle()
        for consumer in list(self.consumers.get(partition, [])):
            self._pump(consumer)

    def _on_request(self, link: Any, raw: bytes) -> None:
        request = Message()
        request.decode(raw)
        props = {str(k): _owned(v) for k, v in (request.properties or {}).items()}
        if link.kind == _KIND_CBS:
            status, description = self._put_token(props, _owned(request.body), link.connection)
            body: Any = None
        else:
            status, description, body = self._management(props)
        reply = Message(
            correlation_id=request.id,
            properties={"status-code": int32(status), "status-description": description},
            body=body,
        )
        for out in self.links:
            if out.is_sender and out.connection == link.connection and out.kind == link.kind:
                out.pending.append(reply.encode())
                self._pump(out)
                break

    def _put_token(self, props: dict, token: Any, connection: Any) -> tuple[int, str]:
        if props.get("operation") != "put-token":
            return 400, f"Unsupported CBS operation {props.get('operation')!r}."
        if isinstance(token, bytes):
            token = token.decode("utf-8", "replace")
        claims = self.broker.claims_of(str(token or ""))
        if claims is None:
            return 401, "InvalidSignature: The token has an invalid signature."
        self.claims.setdefault(connection, set()).update(claims)
        return 202, "Accepted"

    def _management(self, props: dict) -> tuple[int, str, Any]:
        if props.get("operation") != "READ":
            return 400, f"Unsupported operation {props.get('operation')!r}.", None
        token = props.get("security_token")
        if token is not None and not self.broker.check_sas(str(token)):
            return 401, "InvalidSignature: The token has an invalid signature.", None
        if props.get("name") != self.store.name:
            return 404, f"The messaging entity '{props.get('name')}' could not be found.", None
        kind = props.get("type")
        if kind == "com.microsoft:eventhub":
            return (
                200,
                "OK",
                {
                    "name": self.store.name,
                    "created_at": timestamp(self.store.created_at_ms),
                    "partition_count": int32(len(self.store.partitions)),
                    "partition_ids": self.store.partition_ids,
                },
            )
        if kind == "com.microsoft:partition":
            partition = self._partition_or_none(str(props.get("partition")))
            if partition is None:
                return 404, f"Partition {props.get('partition')!r} not found.", None
            part = self.store.snapshot(partition)
            last = part[-1] if part else None
            begins = self.store.begins[partition]
            return (
                200,
                "OK",
                {
                    "name": self.store.name,
                    "partition": str(partition),
                    "begin_sequence_number": begins if len(part) > begins else -1,
                    "last_enqueued_sequence_number": last.sequence_number if last else -1,
                    "last_enqueued_offset": str(last.offset) if last else "-1",
                    "last_enqueued_time_utc": timestamp(last.enqueued_time_ms if last else 0),
                    "is_partition_empty": not part,
                },
            )
        return 400, f"Unsupported type {kind!r}.", None

    def _pump(self, link: Any) -> None:
        """Send what this outgoing link owes its client while it has credit."""
        if not link.state & Endpoint.LOCAL_ACTIVE or link.state & Endpoint.REMOTE_CLOSED:
            return
        if link.kind == _KIND_CONSUMER:
            if self.store.stalled:
                return
            with self.store.lock:
                backlog = self.store.partitions[link.partition][
                    link.cursor : link.cursor + max(link.credit, 0)
                ]
            for msg in backlog:
                self._send(link, msg.encoded)
                link.cursor += 1
        else:
            while link.pending and link.credit > 0:
                self._send(link, link.pending.pop(0))

    def _send(self, link: Any, payload: bytes) -> None:
        dlv = link.delivery(str(next(self._tags)))
        link.send(payload)
        link.advance()
        dlv.settle()

    # -- control ---------------------------------------------------------------------------------

    def on_broker_stop(self, event: Any) -> None:
        """Close the acceptor, every connection and the injector; the reactor then runs out of
        work and ``Container.run()`` returns after closing every socket it owns."""
        self.acceptor.close()
        for conn in list(self.connections):
            conn.close()
        self.injector.close()

    def on_broker_call(self, event: Any) -> None:
        func, done = event.subject
        try:
            func(self)
        finally:
            done.set()


class EventHubsBroker:
    """A local Event Hubs namespace with one hub, on loopback, for tests.

    ``connection_string`` points the real SDK at the relay port, which stays the same across
    ``stop()`` / ``start()``, and the stored events survive a restart.
    """

    def __init__(
        self,
        eventhub: str = "scheduled-events",
        partition_count: int = 4,
        max_message_size: int = 1024 * 1024,
        key_name: str = "RootManageSharedAccessKey",
        key: str | None = None,
        host: str = "127.0.0.1",
        consumer_groups: tuple[str, ...] | None = None,
        policies: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        """``consumer_groups``: the hub's groups besides ``$Default`` (None: any name is one);
        ``policies``: more SAS policies, name -> claims (each gets a key of its own: ``keys``)."""
        self.consumer_groups = consumer_groups
        self.policies = {key_name: ("Manage", "Send", "Listen"), **(policies or {})}
        self.eventhub = eventhub
        self.max_message_size = max_message_size
        self.key_name = key_name
        self.key = key or base64.b64encode(secrets.token_bytes(32)).decode("ascii")
        self.keys = {name: self.key if name == key_name else _new_key()
                     for name in self.policies}  # policy -> its key
        self.host = host
        self.store = HubStore(eventhub, partition_count)
        self.relay = PaddingRelay(host, 0)
        self.received_count = 0
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._container: Container | None = None
        self._injector: EventInjector | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.relay.port

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> EventHubsBroker:
        """Listen (again): Proton on an internal port, the relay on the public one."""
        if self._thread is not None:
            return self
        handler = _BrokerHandler(self)
        container = Container(handler)
        container.container_id = "local-eventhubs"
        handler.container = container
        acceptor = container.listen(f"{self.host}:0")
        internal_port = acceptor._selectable._delegate.getsockname()[1]
        injector = EventInjector()
        container.selectable(injector)
        handler.acceptor, handler.injector = acceptor, injector
        self._container, self._injector, self._handler = container, injector, handler
        self._thread = threading.Thread(target=container.run, name="eh-broker", daemon=True)
        self._thread.start()
        try:
            self.relay.start(internal_port)
        except OSError:
            self._stop_container()
            raise
        return self

    def stop(self) -> None:
        """Drop every client connection abruptly and stop listening; stored events are kept."""
        if self._thread is None:
            return
        self.relay.stop()
        self._stop_container()

    def _stop_container(self) -> None:
        assert self._injector is not None and self._thread is not None
        self._injector.trigger(ApplicationEvent("broker_stop"))
        self._thread.join(timeout=5)
        if self._thread.is_alive():  # a peer that never hangs up: stop the loop the hard way
            assert self._container is not None
            self._container.stop()
            self._thread.join(timeout=5)
        if self._thread.is_alive():
            raise RuntimeError("broker container thread did not stop")
        for fd in self._injector.pipe:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._thread = self._container = self._injector = None
        self._handler = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> EventHubsBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests use ----------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"sb://{self.host}:{self.port}"

    @property
    def fully_qualified_namespace(self) -> str:
        return f"{self.host}:{self.port}"

    def connection_string(self, *, key: str | None = None, entity: bool = True,
                          policy: str | None = None) -> str:
        """The SDK connection string (``UseDevelopmentEmulator=true`` = plain TCP to this port);
        ``policy``: one of ``policies`` instead of the root one."""
        name = policy or self.key_name
        parts = [
            f"Endpoint={self.endpoint}",
            f"SharedAccessKeyName={name}",
            f"SharedAccessKey={key if key is not None else self.keys[name]}",
        ]
        if entity:
            parts.append(f"EntityPath={self.eventhub}")
        parts.append("UseDevelopmentEmulator=true")
        return ";".join(parts)

    @property
    def partition_ids(self) -> list[str]:
        return self.store.partition_ids

    def messages(self, partition: int | str) -> list[BrokerMessage]:
        return self.store.snapshot(int(partition))

    def all_messages(self) -> Iterator[BrokerMessage]:
        for index in range(len(self.store.partitions)):
            yield from self.store.snapshot(index)

    def consumers_attached(self, partition: int | str) -> int:
        """How many consumer links are open on ``partition`` (asked on the broker thread)."""
        counts: list[int] = []
        self.call(lambda handler: counts.append(len(handler.consumers.get(int(partition), []))))
        return counts[0]

    def stall_deliveries(self) -> None:
        """Deliver nothing more to consumers (events are still taken and counted in the partitions'
        properties) until ``resume_deliveries``: a consumer falling behind without knowing it."""
        self.store.stalled = True

    def resume_deliveries(self) -> None:
        self.store.stalled = False
        self.call(lambda handler: [handler._pump(link) for links in list(handler.consumers.values())
                                   for link in list(links)])

    def expire(self, partition: int | str, before: int) -> None:
        """Retention: the partition keeps only sequence numbers from ``before`` on (consumers that
        ask for earlier ones start there, as Event Hubs does; the properties say where it begins)."""
        with self.store.lock:
            index = int(partition)
            self.store.begins[index] = max(self.store.begins[index], before)

    def fail_next_sends(
        self,
        count: int,
        condition: str = "com.microsoft:server-busy",
        description: str = "The server is busy. Please try again later.",
    ) -> None:
        """Reject the next ``count`` event deliveries with this error (server busy by default)."""
        with self._lock:
            self._faults.append(_Fault(count, condition, description))

    def call(self, func: Callable[[_BrokerHandler], None], timeout: float = 5) -> None:
        """Run ``func(handler)`` on the broker thread and wait for it."""
        assert self._injector is not None
        done = threading.Event()
        self._injector.trigger(ApplicationEvent("broker_call", subject=(func, done)))
        if not done.wait(timeout):
            raise TimeoutError("broker thread did not run the call")

    # -- internals ---------------------------------------------------------------------------------

    def _take_fault(self) -> _Fault | None:
        with self._lock:
            while self._faults:
                fault = self._faults[0]
                if fault.count <= 0:
                    self._faults.pop(0)
                    continue
                fault.count -= 1
                return fault
        return None

    def _received(self, count: int) -> None:
        with self._lock:
            self.received_count += count

    def check_sas(self, token: str) -> bool:
        """Verify a ``SharedAccessSignature`` token against this broker's keys."""
        return self.claims_of(token) is not None

    def claims_of(self, token: str) -> tuple[str, ...] | None:
        """The claims of a valid ``SharedAccessSignature`` token (its policy's), or None."""
        prefix = "SharedAccessSignature "
        if not token.startswith(prefix):
            return None
        fields = {k: v[0] for k, v in parse_qs(token[len(prefix) :]).items()}
        try:
            audience, signature, expiry = fields["sr"], fields["sig"], fields["se"]
        except KeyError:
            return None
        name = fields.get("skn", "")
        if name not in self.keys or int(expiry) < time.time():
            return None
        to_sign = f"{quote_plus(audience)}\n{expiry}".encode()
        expected = base64.b64encode(
            hmac.new(self.keys[name].encode("utf-8"), to_sign, hashlib.sha256).digest()
        ).decode("ascii")
        return self.policies[name] if hmac.compare_digest(expected, signature) else None
