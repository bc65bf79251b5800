"""Plain HTTP/1.1 to one origin on kept-open sockets, without ``http.client``: the IMDS client's.

IMDS is asked once a second on every VM of a fleet, forever, over plain HTTP to a link-local
address and never through a proxy. On a VM that sleeps between polls, ``http.client``'s work per
request (the request line and each header built and checked, the reply's header parsed by the
``email`` package, the socket wrapped in file objects) was most of an idle poll's CPU
(docs/performance.md). ``PlainOrigin`` builds each distinct request head once and sends its bytes
again, reads the reply with ``recv`` onto one buffer, and frames it as RFC 9112 says:

- a status line ``HTTP/1.x NNN reason``; interim (1xx) replies are skipped;
- header fields ``name: value`` (names case-insensitive, a repeated field's values joined with
  ``", "``); a line with a control character other than tab, a line without a colon, or a head
  longer than ``MAX_HEAD`` bytes is a malformed reply;
- no body after HEAD or for 1xx, 204 and 304; else a chunked body (``Transfer-Encoding`` ending
  in ``chunked``), else ``Content-Length`` bytes (lengths that disagree are a malformed reply),
  else everything up to the server's close;
- the connection is kept for the next request unless the reply says ``Connection: close`` (or
  is HTTP/1.0 without ``keep-alive``), its body was read to the server's close, or anything went
  wrong.

The framing is the project's own because ``h11`` in its place measured over the idle poll's goals
(0.29-0.33x the sample's CPU against 0.19x, 32.2 MB RSS against 31.9; docs/performance.md).

The contract is ``http_client.Origin.request``'s, for what IMDS needs: the whole reply as a
``Reply``, at most ``max_bytes`` of body (more is ``too-large``), ``timeout`` bounding each read
and the whole request, ``HttpError`` with the same kinds, a connection the server closed while
idle noticed before reuse, and an idempotent request that fails on a reused connection before any
reply sent once more on a fresh one.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from .http_client import IDEMPOTENT, MAX_IDLE, Headers, HttpError, Reply, describe_error, usable

MAX_HEAD = 64 * 1024  # bytes of status line and header fields (http.client allows 100 x 64 KiB)
MAX_HEADS_KEPT = 8  # distinct request heads kept built (a poll's, with and without If-None-Match)
READ_SIZE = 65536
_NO_BODY = frozenset({204, 304})
_BAD_IN_HEADER = frozenset("\r\n\0")
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")  # in a field: control characters but tab


class Malformed(Exception):
    """The reply does not frame as HTTP/1.1."""


class _Stale(Exception):
    """A reused connection turned out closed before any reply: safe to retry idempotent ones."""


class PlainOrigin:
    """Requests to one ``http://host:port`` (and path prefix), over at most ``MAX_IDLE`` kept-open
    sockets; thread-safe like ``Origin``."""

    def __init__(self, base_url: str, *, connect_timeout: float,
                 headers: Mapping[str, str] | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not an http URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.connect_timeout = connect_timeout
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._fixed = {"Host": host if self.port == 80 else f"{host}:{self.port}", **(headers or {})}
        _check_headers(self._fixed)
        self._heads: dict[tuple[object, ...], bytes] = {}
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    def request(self, method: str, path: str, *, timeout: float, max_bytes: int,
                headers: Mapping[str, str] | None = None, body: bytes | None = None) -> Reply:
        """``method`` ``prefix + path`` (path with its query); the whole reply, at most
        ``max_bytes`` of body. ``timeout`` bounds each read and the whole request from now;
        connecting has its own timeout."""
        head = self._head(method, path, headers, body)
        message = head + body if body else head
        deadline = time.monotonic() + timeout
        sock, reused = self._take()
        try:
            return self._exchange(sock, message, method, timeout, max_bytes, deadline)
        except _Stale:
            if not (reused and method in IDEMPOTENT):
                raise HttpError("connection", "the connection was closed before the reply") from None
            try:
                return self._exchange(self._connect(), message, method, timeout, max_bytes, deadline)
            except _Stale:
                raise HttpError("connection", "the connection was closed before the reply") from None

    # -- internals ------------------------------------------------------------------------------
    def _head(self, method: str, path: str, headers: Mapping[str, str] | None,
              body: bytes | None) -> bytes:
        key = (method, path, len(body) if body is not None else None,
               *(headers.items() if headers else ()))
        head = self._heads.get(key)
        if head is None:
            fields = {**self._fixed, **headers} if headers else dict(self._fixed)
            _check_headers(fields)
            if body is not None:
                fields["Content-Length"] = str(len(body))
            if any(c in _BAD_IN_HEADER or c == " " for c in method + path):
                raise ValueError(f"invalid request line: {method} {path!r}")
            lines = [f"{method} {self.prefix}{path} HTTP/1.1"]
            lines += [f"{name}: {value}" for name, value in fields.items()]
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            with self._lock:
                if len(self._heads) >= MAX_HEADS_KEPT:
                    self._heads.clear()
                self._heads[key] = head
        return head

    def _take(self) -> tuple[socket.socket, bool]:
        with self._lock:
            while self._idle:
                sock = self._idle.pop()
                if usable(sock):
                    return sock, True
                sock.close()
        return self._connect(), False

    def _give_back(self, sock: socket.socket) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(sock)
                return
        sock.close()

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection((self.host, self.port), self.connect_timeout)
        except TimeoutError as exc:
            raise HttpError("timeout", "timed out connecting", True) from exc
        except OSError as exc:
            raise HttpError("connection", describe_error(exc), True) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _exchange(self, sock: socket.socket, message: bytes, method: str, timeout: float,
                  max_bytes: int, deadline: float) -> Reply:
        reader = _Reader(sock, timeout, deadline)
        try:
            sock.settimeout(timeout)
            sock.sendall(message)
            reply, keep = _read_reply(reader, method, max_bytes)
        except (BrokenPipeError, ConnectionResetError) as exc:
            sock.close()
            if not reader.received:
                raise _Stale from exc
            raise HttpError("connection", f"the reply broke off: {describe_error(exc)}") from exc
        except _Closed as exc:
            sock.close()
            if not reader.received:
                raise _Stale from exc
            raise HttpError("connection", "the reply broke off: the server closed the connection") from exc
        except TimeoutError as exc:
            sock.close()
            raise HttpError("timeout", "no answer in time" if not reader.received else
                            "the reply stopped arriving in time") from exc
        except Malformed as exc:
            sock.close()
            raise HttpError("connection", f"malformed reply: {exc}") from exc
        except HttpError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            raise HttpError("connection", describe_error(exc)) from exc
        if keep:
            self._give_back(sock)
        else:
            sock.close()
        return reply


class _Closed(Exception):
    """The server closed the connection where the reply needed more."""


class _Reader:
    """The reply's bytes from the socket, each read waiting at most ``timeout`` and never past
    ``deadline`` (then ``TimeoutError``)."""

    def __init__(self, sock: socket.socket, timeout: float, deadline: float) -> None:
        self.sock, self.timeout, self.deadline = sock, timeout, deadline
        self.buf = bytearray()
        self.pos = 0  # what was consumed of ``buf``
        self.received = False

    def more(self) -> bool:
        """Read what has arrived onto the buffer; False at the server's close."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's total time is up")
        if left < self.timeout:
            self.sock.settimeout(left)
        chunk = self.sock.recv(READ_SIZE)
        if not chunk:
            return False
        self.received = True
        if self.pos:
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += chunk
        return True

    def line(self, limit: int) -> bytes:
        """The next line without its CRLF (or bare LF), at most ``limit`` bytes long."""
        while True:
            end = self.buf.find(b"\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos:end])
                self.pos = end + 1
                return line[:-1] if line.endswith(b"\r") else line
            if len(self.buf) - self.pos > limit:
                raise Malformed("a line of the reply's head is too long")
            if not self.more():
                raise _Closed

    def exactly(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n:
            if not self.more():
                raise _Closed
        data = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return data

    def rest(self, max_bytes: int) -> bytes:
        """Everything up to the server's close."""
        while len(self.buf) - self.pos <= max_bytes and self.more():
            pass
        if len(self.buf) - self.pos > max_bytes:
            raise HttpError("too-large", f"reply larger than {max_bytes} bytes")
        data = bytes(self.buf[self.pos:])
        self.pos = len(self.buf)
        return data


def _read_reply(reader: _Reader, method: str, max_bytes: int) -> tuple[Reply, bool]:
    """The reply and whether its connection may serve another request."""
    while True:
        version, status, reason = _status_line(reader.line(MAX_HEAD))
        headers = _header_fields(reader)
        if not 100 <= status < 200:
            break
    connection = (headers.get("connection") or "").lower()
    keep = ("close" not in connection) if version == "HTTP/1.1" else ("keep-alive" in connection)
    coding = (headers.get("transfer-encoding") or "").lower()
    if method == "HEAD" or status in _NO_BODY:
        body = b""
    elif coding:
        if coding.rsplit(",", 1)[-1].strip() != "chunked":
            body, keep = reader.rest(max_bytes), False
        else:
            body = _chunked(reader, max_bytes)
    elif (length := _content_length(headers.get("content-length"))) is not None:
        if length > max_bytes:
            raise HttpError("too-large", f"reply larger than {max_bytes} bytes")
        body = reader.exactly(length)
    else:
        body, keep = reader.rest(max_bytes), False
    if len(reader.buf) > reader.pos:  # bytes past the reply: not a connection to reuse
        keep = False
    return Reply(status, reason, headers, body), keep


def _status_line(line: bytes) -> tuple[str, int, str]:
    text = line.decode("latin-1")
    version, _, rest = text.partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise Malformed(f"status line {text[:80]!r}")
    return version, int(code), reason.strip()


def _header_fields(reader: _Reader) -> Headers:
    headers = Headers()
    size = 0
    while line := reader.line(MAX_HEAD):
        size += len(line) + 2
        if size > MAX_HEAD:
            raise Malformed(f"a head longer than {MAX_HEAD} bytes")
        text = line.decode("latin-1")
        name, colon, value = text.partition(":")
        if not colon or not name or name != name.strip() or _CONTROL.search(text):
            raise Malformed(f"header field {text[:80]!r}")
        key, value = name.lower(), value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _content_length(value: str | None) -> int | None:
    if value is None:
        return None
    lengths = {v.strip() for v in value.split(",")}
    if len(lengths) != 1 or not (length := lengths.pop()).isdigit() or not length.isascii():
        raise Malformed(f"Content-Length {value[:40]!r}")
    return int(length)


def _chunked(reader: _Reader, max_bytes: int) -> bytes:
    body = bytearray()
    while True:
        size_text = reader.line(MAX_HEAD).split(b";", 1)[0].strip(b" \t")
        if not 0 < len(size_text) <= 16 or size_text.strip(b"0123456789abcdefABCDEF"):
            raise Malformed(f"chunk size {size_text[:20]!r}")
        size = int(size_text, 16)
        if size == 0:
            while reader.line(MAX_HEAD):  # trailer fields, up to the empty line
                pass
            return bytes(body)
        if len(body) + size > max_bytes:
            raise HttpError("too-large", f"reply larger than {max_bytes} bytes")
        body += reader.exactly(size)
        if reader.line(2):
            raise Malformed("a chunk longer than its size")


def _check_headers(fields: Mapping[str, str]) -> None:
    for name, value in fields.items():
        if not name or any(c in _BAD_IN_HEADER or c in " :" for c in name) or any(
                c in _BAD_IN_HEADER for c in value):
            raise ValueError(f"invalid header field {name!r}")
