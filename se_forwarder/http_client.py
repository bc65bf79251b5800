"""A small HTTP/1.1 client for one origin on keep-alive connections (the standard library's
``http.client``), for the agent's hot paths.

The agent polls IMDS once a second on every VM of a fleet, forever; requests' per-call work
(merging session settings, re-parsing the URL, building a pool key, protocol ``isinstance``
checks) was nearly all of an idle poll's CPU (see bench/RESULTS.md). This client does the fixed
work once: the origin is parsed when it is made, connections are reused, and a request is one
write and one read on an open socket.

Every request has a total deadline (``total``, else its read ``timeout``): a server that answers
a byte at a time, each inside the read timeout, cannot hold the caller longer.

What it never does: use proxies from the environment (``http.client`` knows none), follow
redirects, or read more of a reply than the caller allows. A connection the peer closed while
idle is noticed before it is reused (a zero-timeout readiness check, as urllib3 does), and an
idempotent request that fails on a reused connection before any reply is sent once more on a
fresh one, so a server's keep-alive timeout never surfaces as an error.
"""

from __future__ import annotations

import base64
import functools
import http.client
import io
import select
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
MAX_IDLE = 2  # connections kept open per origin (a poller and at most one more thread at once)


class HttpError(Exception):
    """A request that got no complete reply; ``kind`` is ``timeout``, ``connection`` or
    ``too-large``; ``connecting``: it failed before the connection (TLS included) was up. The
    low-level error, if any, is the ``__cause__`` (e.g. an ``ssl.SSLCertVerificationError``)."""

    def __init__(self, kind: str, message: str, connecting: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.connecting = connecting


class Headers(dict[str, str]):
    """A reply's header fields by lower-case name (``http_plain``'s replies)."""


@dataclass(frozen=True)
class Reply:
    status: int
    reason: str
    headers: http.client.HTTPMessage | Headers
    body: bytes

    def header(self, name: str) -> str | None:
        """The field ``name`` (any case), None when absent."""
        return self.headers.get(name.lower())


class Origin:
    """Requests to one ``scheme://host:port``, over at most ``MAX_IDLE`` kept-open connections.

    Thread-safe: each request takes an idle connection (or opens one) and gives it back after
    reading the whole reply.
    """

    def __init__(self, base_url: str, *, connect_timeout: float,
                 headers: Mapping[str, str] | None = None, ssl_context: ssl.SSLContext | None = None,
                 proxy: str | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")  # e.g. /vm/<name> on the simulator
        self.connect_timeout = connect_timeout
        self.headers = dict(headers or {})
        self.ssl_context = ssl_context  # https: None means the default context (system CAs)
        self.proxy = urlsplit(proxy) if proxy else None  # an http:// proxy, CONNECT for https
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def request(self, method: str, path: str, *, timeout: float, max_bytes: int,
                headers: Mapping[str, str] | None = None, body: bytes | None = None,
                truncate: bool = False, total: float | None = None) -> Reply:
        """``method`` ``prefix + path`` (path with its query); the whole reply, at most
        ``max_bytes`` of body: a longer one is an error, or with ``truncate`` cut there (and the
        connection closed). ``timeout`` bounds each read and ``total`` (default ``timeout``) the
        whole request from now; connecting has its own timeout. With ``truncate``, a body still
        arriving at the deadline is cut there too: the status line is what counts."""
        all_headers = {**self.headers, **headers} if headers else self.headers
        deadline = time.monotonic() + (timeout if total is None else total)
        conn, reused = self._take()
        args = (method, path, all_headers, body, timeout, max_bytes, truncate, deadline)
        try:
            return self._exchange(conn, *args)
        except _Stale:
            if not (reused and method in IDEMPOTENT):
                raise HttpError("connection", "the connection was closed before the reply") from None
            try:
                return self._exchange(self._new(), *args)
            except _Stale:
                raise HttpError("connection", "the connection was closed before the reply") from None

    # -- internals ------------------------------------------------------------------------------
    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if usable(conn.sock):
                    return conn, True
                conn.close()
        return self._new(), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def _new(self) -> http.client.HTTPConnection:
        host, port = self.host, self.port
        if self.proxy is not None and self.scheme == "https":
            host, port = self.proxy.hostname or "", self.proxy.port or 80
        if self.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=self.connect_timeout,
                context=self.ssl_context or ssl.create_default_context())
            if self.proxy is not None:
                conn.set_tunnel(self.host, self.port, headers=_proxy_auth(self.proxy))
            return conn
        if self.proxy is not None:
            host, port = self.proxy.hostname or "", self.proxy.port or 80
        return http.client.HTTPConnection(host, port, timeout=self.connect_timeout)

    def _target(self, path: str) -> str:
        """The request target: the path, or the absolute URL through a plain-HTTP proxy."""
        if self.proxy is not None and self.scheme == "http":
            port = "" if self.port == 80 else f":{self.port}"
            host = f"[{self.host}]" if ":" in self.host else self.host
            return f"http://{host}{port}{self.prefix}{path}"
        return self.prefix + path

    def _exchange(self, conn: http.client.HTTPConnection, method: str, path: str,
                  headers: Mapping[str, str], body: bytes | None, timeout: float,
                  max_bytes: int, truncate: bool, deadline: float) -> Reply:
        fresh = conn.sock is None
        connected = not fresh
        try:
            if fresh:
                conn.connect()
                connected = True
            assert conn.sock is not None
            conn.sock.settimeout(timeout)
            # One class for every request, the deadline bound per request: a class made per
            # request (and the cyclic garbage it leaves) cost more than the rest of an idle poll.
            conn.response_class = functools.partial(  # type: ignore[assignment]
                _DeadlineResponse, deadline=deadline, timeout=timeout)
            conn.request(method, self._target(path), body=body, headers=headers)
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            conn.close()
            if fresh:
                raise HttpError("connection", describe_error(exc), not connected) from exc
            raise _Stale from exc
        except TimeoutError as exc:
            conn.close()
            raise HttpError("timeout", "no answer in time" if connected else
                            "timed out connecting", not connected) from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise HttpError("connection", describe_error(exc), not connected) from exc
        try:
            data = _read_until_deadline(resp, max_bytes) if truncate else _read(resp, max_bytes, False)
        except TimeoutError as exc:
            conn.close()
            raise HttpError("timeout", "the reply stopped arriving in time") from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise HttpError("connection", f"the reply broke off: {describe_error(exc)}") from exc
        except HttpError:
            conn.close()
            raise
        if resp.will_close or not resp.isclosed():  # the server closes, or a body left unread
            conn.close()
        else:
            self._give_back(conn)
        return Reply(resp.status, resp.reason, resp.headers, data)


class _DeadlineResponse(http.client.HTTPResponse):
    """An ``HTTPResponse`` whose every socket read waits at most ``timeout`` and never past
    ``deadline`` (then ``TimeoutError``)."""

    def __init__(self, sock: socket.socket, *args: object, deadline: float, timeout: float,
                 **kwargs: object) -> None:
        super().__init__(_DeadlineSocket(sock, deadline, timeout), *args, **kwargs)  # type: ignore[arg-type]


class _DeadlineSocket:
    """What ``HTTPResponse`` asks of its socket (``makefile``), reading through ``_DeadlineIO``."""

    def __init__(self, sock: socket.socket, deadline: float, timeout: float) -> None:
        self._raw = _DeadlineIO(sock, deadline, timeout)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self._raw)


class _DeadlineIO(io.RawIOBase):
    """The socket's own reader (which keeps the socket open while the reply is read, even once its
    connection is closed), with each read's timeout cut to what is left before the deadline."""

    def __init__(self, sock: socket.socket, deadline: float, timeout: float) -> None:
        self._sock, self._deadline, self._timeout = sock, deadline, timeout
        self._raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int | None:  # type: ignore[override]
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's total time is up")
        self._sock.settimeout(min(self._timeout, left))
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _read_until_deadline(resp: http.client.HTTPResponse, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of the body, whatever had arrived when the deadline passed."""
    data = bytearray()
    try:
        while len(data) < max_bytes:
            chunk = resp.read1(min(65536, max_bytes - len(data)))
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        pass  # the rest is not waited for; the reply stays unfinished, so its connection is closed
    return bytes(data)


class _Stale(Exception):
    """A reused connection turned out closed before any reply: safe to retry idempotent ones."""


def _read(resp: http.client.HTTPResponse, max_bytes: int, truncate: bool) -> bytes:
    if resp.length is not None and resp.length > max_bytes:
        if truncate:
            return resp.read(max_bytes)
        raise HttpError("too-large", f"reply larger than {max_bytes} bytes")
    if resp.length is not None:
        return resp.read()  # IncompleteRead if the peer sends less than it announced
    data = resp.read(max_bytes + 1)
    if len(data) > max_bytes:
        if truncate:
            return data[:max_bytes]
        raise HttpError("too-large", f"reply larger than {max_bytes} bytes")
    return data


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """Verification always on: against ``ca_file``, else the certifi bundle (what requests used,
    so the same receivers stay trusted), else the system's CAs."""
    if ca_file is None:
        try:
            import certifi

            ca_file = certifi.where()
        except ImportError:
            pass
    return ssl.create_default_context(cafile=ca_file)


def _proxy_auth(proxy: SplitResult) -> dict[str, str] | None:
    if not proxy.username:
        return None
    pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}".encode()
    return {"Proxy-Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}


def environ_proxy(url: str) -> str | None:
    """The proxy the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``) sets for ``url``;
    never for loopback, whatever the environment says."""
    import urllib.request  # only for sinks reaching beyond this machine

    parts = urlsplit(url)
    host = parts.hostname or ""
    if host in ("localhost", "::1") or host.startswith("127."):
        return None
    # a helper of urllib.request that typeshed leaves out (it is undocumented)
    if urllib.request.proxy_bypass_environment(parts.netloc):  # type: ignore[attr-defined]
        return None
    return urllib.request.getproxies_environment().get(parts.scheme)


def usable(sock: socket.socket | None) -> bool:
    """An idle connection's socket is reusable unless the peer closed it (it is readable: EOF or
    junk)."""
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, socket.gaierror):
        return "name resolution failed"
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
