"""Client for the IMDS scheduled-events, instance-compute and attested-data endpoints.

Never through a proxy (IMDS is link-local; a proxy would answer for another machine), never with
X-Forwarded-For, always with ``Metadata: true``. The first scheduled-events request may take up to
130 s because it switches the service on for the VM; later ones, and every instance-metadata
request, time out after a few seconds. The service stays on while it is asked at least once every
24 h, so an agent whose state directory shows a successful poll within that time knows it is on
(``already_enabled``, ``assume_enabled``): its first request times out like any other, and a
hanging IMDS blinds it for one read timeout, not for two minutes.

IMDS accepts 5 requests per second per VM. Every request of the process to one IMDS (poller,
approver, approval-queue consumer, enrichment) first takes a slot of one shared limiter that lets
at most ``MAX_REQUESTS_PER_SECOND`` (4) start in any second, so the agent stays under that limit
whatever its threads do at once.
"""

from __future__ import annotations

import collections
import email.utils
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from . import __version__
from .errors import SeForwarderError
from .http_client import HttpError, Origin, Reply
from .http_plain import PlainOrigin
from .model import Document, MalformedDocument, parse_document

log = logging.getLogger("se_forwarder.imds")

DEFAULT_URL = "http://169.254.169.254"
DEFAULT_API_VERSION = "2020-07-01"
COMPUTE_API_VERSION = "2021-02-01"
EVENTS_PATH = "/metadata/scheduledevents"
COMPUTE_PATH = "/metadata/instance/compute"
ATTESTED_PATH = "/metadata/attested/document"  # the agent's identity (identity/attested.py)
ATTESTED_API_VERSION = "2021-02-01"
MAX_REPLY_BYTES = 4 * 1024 * 1024  # a real document is a few kB; anything this big is garbage
FIRST_CALL_TIMEOUT = 130.0
ENABLED_FOR = 24 * 3600.0  # seconds without a request after which IMDS switches the service off
MAX_REQUESTS_PER_SECOND = 4  # IMDS allows 5 per second and VM; one in reserve for clock jitter
THROTTLED_WAIT = (1.0, 1.25)  # seconds after a 429 without Retry-After (uniform, for jitter)
MAX_RETRY_AFTER = 5.0  # a longer Retry-After would blind the agent; a 429 more costs nothing


class ImdsError(SeForwarderError):
    """A failed IMDS call; ``reason`` is one of a small, bounded set (used as a metric label)."""

    def __init__(self, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason  # timeout | connection | throttled | server | client | malformed
        self.retry_after = retry_after


class NonceRefused(ImdsError):
    """IMDS answered 400 to an attested-data request: the nonce is not one it accepts."""


def throttled_delay(retry_after: float | None) -> float:
    """How long to wait after a 429: its Retry-After (at most ``MAX_RETRY_AFTER``), else ~1 s."""
    if retry_after is not None:
        return max(0.0, min(retry_after, MAX_RETRY_AFTER))
    return random.uniform(*THROTTLED_WAIT)


class RateLimiter:
    """At most ``limit`` request starts in any ``per`` seconds (a sliding window), thread-safe."""

    def __init__(self, limit: int = MAX_REQUESTS_PER_SECOND, per: float = 1.0) -> None:
        self.limit = limit
        self.per = per
        self._starts: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Wait for a slot and take it; the seconds waited. Waiters are served one at a time."""
        waited = 0.0
        with self._lock:
            while True:
                now = time.monotonic()
                while self._starts and self._starts[0] <= now - self.per:
                    self._starts.popleft()
                if len(self._starts) < self.limit:
                    self._starts.append(now)
                    return waited
                pause = self._starts[0] + self.per - now
                time.sleep(pause)
                waited += pause


_limiters: dict[str, RateLimiter] = {}
_limiters_lock = threading.Lock()


def limiter_for(base_url: str) -> RateLimiter:
    """The process-wide limiter of one IMDS (one per base URL: the simulator serves several VMs)."""
    with _limiters_lock:
        limiter = _limiters.get(base_url)
        if limiter is None:
            limiter = _limiters[base_url] = RateLimiter()
        return limiter


def resolve_base_url(base_url: str, lease_files: Sequence[str] | None = None) -> str:
    """``base_url`` itself, or for ``discover`` the address found in the DHCP leases."""
    if base_url.strip().lower() != "discover":
        return base_url.rstrip("/")
    from .discovery import discover  # only on VMs outside a virtual network

    found = discover(lease_files)
    log.info("IMDS endpoint: %s", found.describe())
    return found.url


def already_enabled(last_ok_poll: float | None, now: float) -> bool:
    """Whether a successful poll at ``last_ok_poll`` (Unix time; None: never) means the service
    is still on at ``now``: it was less than ``ENABLED_FOR`` ago (a time ahead of ``now``, from a
    clock set back, proves nothing)."""
    return last_ok_poll is not None and 0 <= now - last_ok_poll < ENABLED_FOR


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²" is a digit to Python, not to HTTP
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class ImdsClient:
    """GET the document, GET the compute metadata and the attested data, POST StartRequests.

    One kept-open connection serves every poll (``http_plain.PlainOrigin``): an unchanged document
    costs one small write and one read, and a reply byte-identical to the last one is not parsed
    again, whether IMDS sends an ``ETag`` (then a ``304``) or, as documented, does not.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        api_version: str = DEFAULT_API_VERSION,
        *,
        timeout: float = 5.0,
        connect_timeout: float = 3.0,
        first_call_timeout: float = FIRST_CALL_TIMEOUT,
        lease_files: Sequence[str] | None = None,
    ) -> None:
        self.base_url = resolve_base_url(base_url, lease_files)
        self.limiter = limiter_for(self.base_url)
        self.api_version = api_version
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.first_call_timeout = first_call_timeout
        self._answered: set[str] = set()  # paths that answered once (each may be slow first)
        self.last_request_at = 0.0  # monotonic time the rate limiter let the last request go
        self._etag: str | None = None
        self._cached: Document | None = None
        self._cached_body: bytes | None = None
        self._events_path = f"{EVENTS_PATH}?api-version={quote(api_version)}"
        headers = {"Metadata": "true", "User-Agent": f"se-forwarder/{__version__}", "Accept": "*/*"}
        try:
            # IMDS speaks plain HTTP; an https URL (a stand-in behind TLS) takes http.client's way.
            self._origin: PlainOrigin | Origin = (
                PlainOrigin(self.base_url, connect_timeout=connect_timeout, headers=headers)
                if self.base_url.lower().startswith("http://")
                else Origin(self.base_url, connect_timeout=connect_timeout, headers=headers))
        except ValueError as exc:
            raise ImdsError("connection", f"IMDS URL {self.base_url!r} is not an http URL") from exc

    @property
    def events_url(self) -> str:
        return f"{self.base_url}{EVENTS_PATH}"

    @property
    def first_call_pending(self) -> bool:
        return self._events_path not in self._answered

    def assume_enabled(self) -> None:
        """The service is known to be on (see ``already_enabled``): no first-call wait."""
        self._answered.add(self._events_path)

    def close(self) -> None:
        self._origin.close()

    def _read_timeout(self, path: str) -> float:
        # Only scheduledevents' first request switches the service on and may take two minutes;
        # the compute metadata answering says nothing about it, and answers at once itself.
        slow = path == self._events_path and path not in self._answered
        return self.first_call_timeout if slow else self.timeout

    def _request(self, method: str, path: str, *, timeout: float | None = None,
                 headers: dict[str, str] | None = None, body: bytes | None = None) -> Reply:
        self.limiter.acquire()
        self.last_request_at = time.monotonic()
        url = f"{self.base_url}{path.partition('?')[0]}"
        try:
            reply = self._origin.request(
                method, path, timeout=self._read_timeout(path) if timeout is None else timeout,
                max_bytes=MAX_REPLY_BYTES, headers=headers, body=body,
            )
        except HttpError as exc:
            if exc.kind == "timeout":
                raise ImdsError("timeout", f"IMDS did not answer in time ({url}): {exc}") from exc
            if exc.kind == "too-large":
                raise ImdsError("malformed", f"IMDS reply larger than {MAX_REPLY_BYTES} bytes") from exc
            raise ImdsError("connection", f"IMDS unreachable at {url}: {exc}") from exc
        if reply.status == 429:
            raise ImdsError(
                "throttled",
                "IMDS throttled the request (429)",
                parse_retry_after(reply.header("Retry-After")),
            )
        if reply.status >= 500:
            raise ImdsError(
                "server",
                f"IMDS answered {reply.status}",
                parse_retry_after(reply.header("Retry-After")),
            )
        self._answered.add(path)
        return reply

    def get_document(self) -> Document:
        """The current document. Raises ImdsError; a malformed reply has reason ``malformed``."""
        headers = {"If-None-Match": self._etag} if self._etag and self._cached else None
        reply = self._request("GET", self._events_path, headers=headers)
        if reply.status == 304 and self._cached is not None:
            return self._cached
        if reply.status != 200:
            raise ImdsError("client", f"IMDS answered {reply.status}: {_snippet(reply.body)}")
        body = reply.body
        if body == self._cached_body and self._cached is not None:
            # Byte-identical to the last reply: nothing to parse, the same Document object.
            self._etag = reply.header("ETag")
            return self._cached
        etag = reply.header("ETag")
        try:
            document = parse_document(body)
        except MalformedDocument as exc:
            # Keep the ETag of the cached document: a 304 must never stand for this garbage.
            raise ImdsError("malformed", f"IMDS reply is not a valid document: {exc}") from exc
        self._cached, self._cached_body, self._etag = document, body, etag
        return document

    def get_compute(self, timeout: float | None = None) -> dict[str, Any]:
        """The instance compute metadata (``timeout``: this call's own, else the client's)."""
        reply = self._request("GET", f"{COMPUTE_PATH}?api-version={COMPUTE_API_VERSION}",
                              timeout=timeout)
        return _json_object(reply, "instance metadata")

    def get_attested(self, nonce: str) -> dict[str, Any]:
        """The attested document for ``nonce`` (``{"encoding": "pkcs7", "signature": ...}``)."""
        path = f"{ATTESTED_PATH}?api-version={ATTESTED_API_VERSION}&nonce={quote(nonce)}"
        reply = self._request("GET", path)
        if reply.status == 400:
            raise NonceRefused("client", f"IMDS refused the nonce {nonce!r} (400): {_snippet(reply.body)}")
        return _json_object(reply, "attested data")

    def start_events(self, event_ids: Sequence[str]) -> None:
        """POST StartRequests for ``event_ids`` (approve them); raises ImdsError unless 200."""
        payload = {"StartRequests": [{"EventId": e} for e in event_ids]}
        reply = self._request(
            "POST",
            self._events_path,
            body=json.dumps(payload).encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
        if reply.status != 200:
            raise ImdsError(
                "client", f"IMDS refused the approval ({reply.status}): {_snippet(reply.body)}"
            )


class ClientThread:
    """A daemon thread with an IMDS client of its own, made when the thread starts and closed when
    it ends: ``work(client, stop)`` runs on it (the enrichment and the registration threads)."""

    def __init__(self, name: str, make_client: Callable[[], ImdsClient],
                 work: Callable[[ImdsClient, threading.Event], None]) -> None:
        self.name = name
        self.make_client = make_client
        self.work = work
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._run, args=(stop,), name=self.name, daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, stop: threading.Event) -> None:
        client = self.make_client()
        try:
            self.work(client, stop)
        finally:
            client.close()


def _json_object(reply: Reply, what: str) -> dict[str, Any]:
    if reply.status != 200:
        raise ImdsError("client", f"{what} answered {reply.status}")
    try:
        value = json.loads(reply.body)
    except ValueError as exc:
        raise ImdsError("malformed", f"{what} is not JSON") from exc
    if not isinstance(value, dict):
        raise ImdsError("malformed", f"{what} is not a JSON object")
    return value


def _snippet(body: bytes) -> str:
    return body[:200].decode("utf-8", "replace").replace("\n", " ").strip()
