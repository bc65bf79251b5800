"""Fetching the intermediate CA certificates Azure's attested documents leave out, off the service loop.

Azure's SignedData carries the signing certificate alone; its issuer is published at the
certificate's "CA Issuers" URL (attestation.issuer_urls). ``Intermediates.lookup(url)`` is what
trust.py is given: the certificates fetched there, ``()`` when fetching failed (or the URL is not
on an allowed path), or None while a fetch is on its way, after which ``on_done(url)`` is called
(from the fetching thread: the service hands it to its own thread). Nothing fetched is trusted: the
chain is still verified against the configured roots, so a wrong certificate only fails that check.
trust.py asks only for a document that passed the cheap checks and whose signature verified with
the certificate it carries (attestation.py), so a forger's document asks only for the URL its own
certificate names, which must then be on one of Azure's PKI paths.

Bounds, so that forgers cannot fill the cache or make the coordinator send requests where they
like: only ``http``/``https`` URLs under a prefix of ``[trust] intermediate_paths`` (default: the
paths Azure's subordinate CAs are published on, ``DEFAULT_PATHS``: Microsoft's ``/pkiops/certs/``,
``/pki/certs/`` and ``/pki/mscorp/`` on www.microsoft.com, and DigiCert's cacerts host), naming a
certificate file (``.crt``, ``.cer``, ``.der``, ``.pem``, ``.p7c``), without a query, user or
``..``; at most ``MAX_BYTES`` read, one request at a time with ``TIMEOUT`` seconds each, at most
``MAX_REDIRECTS`` redirects (each to an allowed path); the certificates of at most ``MAX_URLS``
URLs kept, the least recently used evicted; at most ``MAX_FAILED`` failed URLs remembered (the
oldest forgotten), each tried again after ``RETRY_AFTER`` seconds. A failure is said in one warning
a ``WARN_EVERY`` at most, with how many failed since; ``failures`` and ``missing`` (the URLs that
failed last, for /metrics) count them. A response may be a DER or PEM certificate or a PKCS#7
bundle of them. HTTPS is verified (certifi's roots, or ``ca_bundle``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs7

from ..config.trust import DEFAULT_PATHS

log = logging.getLogger("se_forwarder.coordinator.intermediates")

TIMEOUT = 10.0
MAX_BYTES = 64 * 1024
MAX_REDIRECTS = 3
MAX_URLS = 64
MAX_FAILED = 64
RETRY_AFTER = 600.0
WARN_EVERY = 60.0
MAX_CERTIFICATES = 4
SUFFIXES = (".crt", ".cer", ".der", ".pem", ".p7c")


class FetchError(Exception):
    """One line: why the URL gave no certificate."""


def parse(body: bytes) -> tuple[x509.Certificate, ...]:
    """The certificates of a CA Issuers response (DER, PEM, or PKCS#7 of either); FetchError."""
    loaders: list[Callable[[bytes], object]] = [
        x509.load_der_x509_certificate, x509.load_pem_x509_certificates,
        pkcs7.load_der_pkcs7_certificates, pkcs7.load_pem_pkcs7_certificates]
    for load in loaders:
        try:
            got = load(body)
        except (ValueError, TypeError):
            continue
        certs = tuple(got) if isinstance(got, list) else (got,)
        certs = tuple(c for c in certs if isinstance(c, x509.Certificate))
        if certs:
            return certs[:MAX_CERTIFICATES]
    raise FetchError("the response holds no certificate (DER, PEM or PKCS#7)")


def allowed(url: str, paths: tuple[str, ...]) -> bool:
    """Whether ``url`` names a certificate file under one of the URL prefixes ``paths``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or parts.username or parts.password or parts.query \
            or parts.fragment or ".." in parts.path or not parts.path.lower().endswith(SUFFIXES):
        return False
    host = (parts.hostname or "").lower().rstrip(".")
    where = f"{parts.scheme}://{host}{f':{port}' if port else ''}{parts.path}"
    return any(where.startswith(prefix) for prefix in paths)


class Intermediates:
    """The cache and the fetching thread (module docstring)."""

    def __init__(self, paths: tuple[str, ...] = DEFAULT_PATHS,
                 on_done: Callable[[str], None] = lambda _: None, *, timeout: float = TIMEOUT,
                 ca_bundle: str | None = None) -> None:
        self.paths = tuple(paths)
        self.on_done, self.timeout, self.ca_bundle = on_done, timeout, ca_bundle
        self._found: OrderedDict[str, tuple[x509.Certificate, ...]] = OrderedDict()  # LRU
        self._failed: OrderedDict[str, float] = OrderedDict()  # url -> monotonic time to try again
        self._warned_at = -WARN_EVERY
        self._unsaid = 0  # failures since the last warning
        self._asked: set[str] = set()
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.fetched = self.failures = 0

    def lookup(self, url: str) -> tuple[x509.Certificate, ...] | None:
        """The certificates at ``url``; () when there are none to be had; None: being fetched."""
        with self._lock:
            if url in self._found:
                self._found.move_to_end(url)
                return self._found[url]
            if not allowed(url, self.paths):
                return ()
            if self._failed.get(url, 0.0) > time.monotonic():
                return ()
            if url in self._asked:
                return None
            if len(self._asked) >= MAX_URLS:
                return ()
            self._asked.add(url)
            self._failed.pop(url, None)
        self._start()
        self._queue.put(url)
        return None

    def found(self) -> dict[str, tuple[bytes, ...]]:
        """Every URL fetched so far and its certificates as DER (for the verifier's workers)."""
        from cryptography.hazmat.primitives.serialization import Encoding

        with self._lock:
            found = dict(self._found)
        return {url: tuple(c.public_bytes(Encoding.DER) for c in certs) for url, certs in found.items()}

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="coordinator-intermediates",
                                                daemon=True)
                self._thread.start()

    def close(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        while True:
            url = self._queue.get()
            if url is None:
                return
            try:
                certs = self.fetch(url)
            except FetchError as exc:
                self._failure(url, exc)
            else:
                log.info("fetched the intermediate certificate %s from %s",
                         ", ".join(c.subject.rfc4514_string()[:120] for c in certs), url)
                with self._lock:
                    self._asked.discard(url)
                    self._found[url] = certs
                    while len(self._found) > MAX_URLS:
                        self._found.popitem(last=False)
                    self.fetched += 1
            self.on_done(url)

    def _failure(self, url: str, exc: FetchError) -> None:
        now = time.monotonic()
        with self._lock:
            self._asked.discard(url)
            self._failed[url] = now + RETRY_AFTER
            self._failed.move_to_end(url)
            while len(self._failed) > MAX_FAILED:
                self._failed.popitem(last=False)
            self.failures += 1
            self._unsaid += 1
            say, self._warned_at = now - self._warned_at >= WARN_EVERY, self._warned_at
            if say:
                self._warned_at, count, self._unsaid = now, self._unsaid, 0
        if say:
            log.warning("no intermediate certificate from %s (%d URL(s) failed since the last warning; each "
                        "tried again after %.0f min; give Azure's intermediates as [trust] "
                        "attestation_intermediates to need none): %s", url[:200], count, RETRY_AFTER / 60,
                        exc)

    @property
    def missing(self) -> int:
        """URLs that failed and are not tried again yet."""
        now = time.monotonic()
        with self._lock:
            return sum(1 for t in self._failed.values() if t > now)

    def fetch(self, url: str) -> tuple[x509.Certificate, ...]:
        """GET ``url`` within the module's bounds; its certificates, or FetchError."""
        import requests

        verify: str | bool = self.ca_bundle or True
        for _ in range(MAX_REDIRECTS + 1):
            if not allowed(url, self.paths):
                raise FetchError(f"{url[:200]} is not on an allowed path ([trust] intermediate_paths)")
            try:
                with requests.get(url, timeout=self.timeout, allow_redirects=False, stream=True,
                                  verify=verify, headers={"Accept": "*/*"}) as response:
                    if response.is_redirect:
                        url = urljoin(url, response.headers.get("Location", ""))
                        continue
                    if response.status_code != 200:
                        raise FetchError(f"HTTP {response.status_code}")
                    body = b""
                    for chunk in response.iter_content(8192):
                        body += chunk
                        if len(body) > MAX_BYTES:
                            raise FetchError(f"the response is larger than {MAX_BYTES} bytes")
            except requests.RequestException as exc:
                raise FetchError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
            return parse(body)
        raise FetchError(f"more than {MAX_REDIRECTS} redirects")
