"""One webhook endpoint over HTTP(S): its session, its headers, and failures said in one line.

TLS verification is always on (``ca_file`` adds a private CA); redirects are never followed; the
proxy variables are honoured for a remote host only, and no other environment variable is (a
``CURL_CA_BUNDLE=""`` would even turn verification off in some requests versions). A reply is read
only as far as a reason needs.
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

import requests

from ... import __version__
from ...errors import one_line, root_cause
from ...imds import parse_retry_after
from ...validation import is_loopback, public_url
from ..base import Retry
from .auth import EntraToken

SNIPPET_CHARS = 200
MAX_REPLY_BYTES = 64 * 1024
# OpenSSL verify codes meaning "the issuer is not trusted": a private CA, fixed by ca_file.
_UNTRUSTED_ISSUER = frozenset({2, 18, 19, 20, 21})


class Endpoint:
    """The receiver's URL with the session, timeouts, TLS settings and headers every request uses."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None,
                 token: EntraToken | None = None, ca_file: str | None = None,
                 connect_timeout: float = 5.0, read_timeout: float = 15.0) -> None:
        self.url = url
        self.where = public_url(url)  # for messages: never the query string
        self.timeout = (connect_timeout, read_timeout)
        self._static = dict(headers or {})
        self._token = token
        self._verify: str | bool = ca_file or True
        self._has_ca_file = bool(ca_file)
        self._session = requests.Session()
        self._session.trust_env = False
        host = urlsplit(url).hostname or ""
        if not is_loopback(host):
            self._session.proxies.update(requests.utils.get_environ_proxies(url))

    def headers(self) -> dict[str, str]:
        """What every request carries; raises ``auth.TokenError`` when no token can be had."""
        headers = {"User-Agent": f"se-forwarder/{__version__}", **self._static}
        if self._token is not None:
            headers["Authorization"] = self._token.header()
        return headers

    def request(self, method: str, headers: dict[str, str],
                body: bytes | None = None) -> tuple[requests.Response, bytes]:
        """(response, at most MAX_REPLY_BYTES of its body); requests' errors propagate."""
        response = self._session.request(
            method, self.url, data=body, headers=headers, timeout=self.timeout,
            verify=self._verify, allow_redirects=False, stream=True,
        )
        return response, read_some(response)

    def failure(self, exc: requests.RequestException) -> Retry:
        """One line, no traceback, no secrets: what went wrong and what to do."""
        cause = root_cause(exc)
        if isinstance(exc, requests.exceptions.SSLError) or isinstance(cause, ssl.SSLError):
            if isinstance(cause, ssl.SSLCertVerificationError):
                detail = cause.verify_message or cause.reason or str(cause)
                hint = ""
                if cause.verify_code in _UNTRUSTED_ISSUER:
                    hint = ("; give ca_file (the receiver's CA bundle)" if not self._has_ca_file
                            else "; ca_file does not hold the CA that issued the receiver's certificate")
                return Retry(f"TLS verification failed for {self.where}: {detail}{hint}")
            reason = getattr(cause, "reason", None) or one_line(cause)
            return Retry(f"TLS handshake with {self.where} failed: {reason}")
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return Retry(f"timeout connecting to {self.where} after {self.timeout[0]:g} s")
        if isinstance(exc, requests.exceptions.ReadTimeout):
            return Retry(f"no answer from {self.where} within {self.timeout[1]:g} s")
        if isinstance(exc, requests.exceptions.ConnectionError):
            return Retry(f"cannot connect to {self.where}: {one_line(cause)}")
        return Retry(f"request to {self.where} failed: {type(exc).__name__}: {one_line(cause)}")

    def close(self) -> None:
        self._session.close()
        if self._token is not None:
            self._token.close()


def read_some(response: requests.Response) -> bytes:
    """At most MAX_REPLY_BYTES of the reply (enough for a reason); the rest is not downloaded."""
    data = bytearray()
    try:
        for chunk in response.iter_content(8192):
            data += chunk
            if len(data) >= MAX_REPLY_BYTES:
                break
    except requests.RequestException:
        pass  # the status line is what counts; a broken body only loses the snippet
    finally:
        response.close()
    return bytes(data)


def snippet(reply: bytes) -> str:
    """``: <the reply's text>`` on one line, cut to SNIPPET_CHARS; "" for an empty reply."""
    text = " ".join(reply.decode("utf-8", "replace").split())
    text = "".join(c for c in text if c.isprintable())
    if not text:
        return ""
    return ": " + (text[:SNIPPET_CHARS] + "..." if len(text) > SNIPPET_CHARS else text)


def retry_after(value: str | None) -> float | None:
    """``parse_retry_after``, with a malformed value (e.g. non-ASCII digits) counting as absent."""
    try:
        return parse_retry_after(value)
    except (ValueError, OverflowError):
        return None
