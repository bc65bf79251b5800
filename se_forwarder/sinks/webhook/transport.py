"""One webhook endpoint over HTTP(S): its kept-open connection, its headers, and failures said in
one line.

TLS verification is always on (``ca_file`` adds a private CA, else the certifi bundle); redirects
are never followed; the proxy variables are honoured for a remote host only, and no other
environment variable is (no CA-bundle or netrc variables behind our back). A reply is read only as
far as a reason needs.
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

from ... import __version__
from ...errors import one_line
from ...http_client import HttpError, Origin, Reply, environ_proxy, tls_context
from ...imds import parse_retry_after
from ...validation import is_loopback, public_url
from ..base import Delivered, Retry
from .auth import EntraToken

SNIPPET_CHARS = 200
MAX_REPLY_BYTES = 64 * 1024
# OpenSSL verify codes meaning "the issuer is not trusted": a private CA, fixed by ca_file.
_UNTRUSTED_ISSUER = frozenset({2, 18, 19, 20, 21})


class Endpoint:
    """The receiver's URL with the connection, timeouts, TLS settings and headers every request
    uses."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None,
                 token: EntraToken | None = None, ca_file: str | None = None,
                 connect_timeout: float = 5.0, read_timeout: float = 15.0) -> None:
        self.url = url
        self.where = public_url(url)  # for messages: never the query string
        self.timeout = (connect_timeout, read_timeout)
        self._static = dict(headers or {})
        self._token = token
        self._has_ca_file = bool(ca_file)
        parts = urlsplit(url)
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.hostname or ""
        self._origin = Origin(
            f"{parts.scheme}://{parts.netloc}", connect_timeout=connect_timeout,
            ssl_context=tls_context(ca_file) if parts.scheme == "https" else None,
            proxy=None if is_loopback(host) else environ_proxy(url),
        )

    def headers(self) -> dict[str, str]:
        """What every request carries; raises ``auth.TokenError`` when no token can be had."""
        headers = {"User-Agent": f"se-forwarder/{__version__}", **self._static}
        if self._token is not None:
            headers["Authorization"] = self._token.header()
        return headers

    def request(self, method: str, headers: dict[str, str], body: bytes | None = None,
                target: str | None = None) -> Reply:
        """The reply with at most MAX_REPLY_BYTES of its body; ``HttpError`` when none came.
        ``connect_timeout + read_timeout`` bound the whole request, however slowly it trickles.
        ``target``: another path (with its query) on the same origin, instead of the URL's."""
        return self._origin.request(method, target or self._target, headers=headers, body=body,
                                    timeout=self.timeout[1], max_bytes=MAX_REPLY_BYTES,
                                    truncate=True, total=sum(self.timeout))

    def failure(self, exc: HttpError) -> Retry:
        """One line, no traceback, no secrets: what went wrong and what to do."""
        cause = exc.__cause__ or exc
        if isinstance(cause, ssl.SSLError):
            if isinstance(cause, ssl.SSLCertVerificationError):
                detail = cause.verify_message or cause.reason or str(cause)
                hint = ""
                if cause.verify_code in _UNTRUSTED_ISSUER:
                    hint = ("; give ca_file (the receiver's CA bundle)" if not self._has_ca_file
                            else "; ca_file does not hold the CA that issued the receiver's certificate")
                return Retry(f"TLS verification failed for {self.where}: {detail}{hint}")
            reason = getattr(cause, "reason", None) or one_line(cause)
            return Retry(f"TLS handshake with {self.where} failed: {reason}")
        if exc.kind == "timeout" and exc.connecting:
            return Retry(f"timeout connecting to {self.where} after {self.timeout[0]:g} s")
        if exc.kind == "timeout":
            return Retry(f"no answer from {self.where} within {self.timeout[1]:g} s")
        if exc.connecting:
            return Retry(f"cannot connect to {self.where}: {one_line(cause)}")
        return Retry(f"request to {self.where} failed: {one_line(cause)}")

    def close(self) -> None:
        self._origin.close()
        if self._token is not None:
            self._token.close()


def settled(response: Reply, where: str) -> tuple[str, Delivered | Retry | None]:
    """(the answer's label for reasons, its outcome when the status alone decides it): 2xx is
    delivered; 3xx is never followed, so it is retried with the URL it points to (credentials and
    query left out); None for the caller to decide the rest."""
    status = response.status
    label = f"HTTP {status}{' ' + response.reason if response.reason else ''} from {where}"
    if 200 <= status < 300:
        return label, Delivered()
    if 300 <= status < 400:
        where_to = public_url(response.header("Location") or "") or "nowhere"
        return label, Retry(f"{label}: redirect to {where_to} not followed (redirects never are); "
                            "put the final URL in the configuration")
    return label, None


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
