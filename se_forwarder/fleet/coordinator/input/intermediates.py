"""Fetching the intermediate CA certificates Azure's attested documents leave out, off the service loop.

Azure's SignedData carries the signing certificate alone; its issuer is published at the
certificate's "CA Issuers" URL (attestation.issuer_urls). ``Intermediates.lookup(url)`` is what
trust.py is given: the certificates fetched there, ``()`` when fetching failed (or the URL's host is
not allowed), or None while a fetch is on its way, after which ``on_done(url)`` is called (from the
fetching thread: the service hands it to its own thread). Nothing fetched is trusted: the chain is
still verified against the configured roots, so a wrong certificate only fails that check.

Bounds: only ``http``/``https`` URLs on a host of ``[trust] intermediate_hosts`` (default: the
hosts Azure's subordinate CAs publish their certificates on: Microsoft's PKI and DigiCert's), so
a VM cannot make the coordinator send requests where it likes; at most ``MAX_BYTES`` read, one
request at a time with ``TIMEOUT`` seconds each, at most ``MAX_REDIRECTS`` redirects (each to an
allowed host); at most ``MAX_URLS`` URLs remembered; a failure is remembered for
``RETRY_AFTER`` seconds, then tried again. A response may be a DER or PEM certificate or a PKCS#7
bundle of them (``.crt``, ``.cer``, ``.p7c``). HTTPS is verified (certifi's roots, or ``ca_bundle``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs7

from ..config.trust import DEFAULT_HOSTS

log = logging.getLogger("se_forwarder.coordinator.intermediates")

TIMEOUT = 10.0
MAX_BYTES = 64 * 1024
MAX_REDIRECTS = 3
MAX_URLS = 64
RETRY_AFTER = 600.0
MAX_CERTIFICATES = 4


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


def allowed(url: str, hosts: tuple[str, ...]) -> bool:
    parts = urlsplit(url)
    return (parts.scheme in ("http", "https") and not parts.username and not parts.password
            and (parts.hostname or "").lower().rstrip(".") in hosts)


class Intermediates:
    """The cache and the fetching thread (module docstring)."""

    def __init__(self, hosts: tuple[str, ...] = DEFAULT_HOSTS,
                 on_done: Callable[[str], None] = lambda _: None, *, timeout: float = TIMEOUT,
                 ca_bundle: str | None = None) -> None:
        self.hosts = tuple(h.lower().rstrip(".") for h in hosts)
        self.on_done, self.timeout, self.ca_bundle = on_done, timeout, ca_bundle
        self._found: dict[str, tuple[x509.Certificate, ...]] = {}
        self._failed: dict[str, float] = {}  # url -> monotonic time to try again
        self._asked: set[str] = set()
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.fetched = self.failures = 0

    def lookup(self, url: str) -> tuple[x509.Certificate, ...] | None:
        """The certificates at ``url``; () when there are none to be had; None: being fetched."""
        with self._lock:
            if url in self._found:
                return self._found[url]
            if not allowed(url, self.hosts):
                return ()
            if self._failed.get(url, 0.0) > time.monotonic():
                return ()
            if url in self._asked:
                return None
            if len(self._found) + len(self._asked) >= MAX_URLS:
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
                log.warning("no intermediate certificate from %s (tried again in %.0f min): %s", url,
                            RETRY_AFTER / 60, exc)
                with self._lock:
                    self._asked.discard(url)
                    self._failed[url] = time.monotonic() + RETRY_AFTER
                    self.failures += 1
            else:
                log.info("fetched the intermediate certificate %s from %s",
                         ", ".join(c.subject.rfc4514_string()[:120] for c in certs), url)
                with self._lock:
                    self._asked.discard(url)
                    self._found[url] = certs
                    self.fetched += 1
            self.on_done(url)

    def fetch(self, url: str) -> tuple[x509.Certificate, ...]:
        """GET ``url`` within the module's bounds; its certificates, or FetchError."""
        import requests

        verify: str | bool = self.ca_bundle or True
        for _ in range(MAX_REDIRECTS + 1):
            if not allowed(url, self.hosts):
                raise FetchError(f"{url[:200]} is not on an allowed host ([trust] intermediate_hosts)")
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
