"""webhook sink: CloudEvents over HTTP(S), signed per Standard Webhooks, retried, never lost.

Wire forms come from the ``cloudevents`` SDK (HTTP binding, JSON format): ``structured`` (one event
per POST, ``application/cloudevents+json``, no ``ce-*`` headers), ``binary`` (``ce-*`` headers, body =
data) and ``batch`` (``application/cloudevents-batch+json``, a JSON array). Signatures come from the
``standardwebhooks`` library. Status codes map to outcomes exactly as design.md says: 2xx only is
success; 3xx is a failure and never followed; 410 parks the sink; 408/429/502/503/504, timeouts and
connection errors are retried honouring ``Retry-After``; any other 4xx dead-letters the event; any
other 5xx is retried. The delivery worker owns backoff, parking and the cursor.

Secrets (signing keys, header values from env/file, bearer tokens) are read at start and never
appear in a log line or an outcome reason; neither does the URL's query string.

``format = "teams" | "slack"`` posts a chat message per event instead of the CloudEvent; what that
changes is in ``sinks/chat.py``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.formats.json import JSONFormat

from .. import __version__
from ..cloudevents import from_json
from ..errors import ConfigError
from ..imds import parse_retry_after
from ..validation import as_bool, as_choice, as_number, as_str, no_unknown, public_url
from ..validation import check_ca_file as _check_ca_file
from ..validation import is_loopback as _is_loopback
from . import chat
from .base import DeadLetter, Delivered, DeliveryReport, Outcome, Park, Retry, StoredEvent

MODES = ("structured", "binary", "batch")
BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
DEFAULTS: dict[str, Any] = {
    "mode": "structured",
    "batch_max_events": 100,
    "batch_max_bytes": 1024 * 1024,
    "connect_timeout": 5.0,
    "read_timeout": 15.0,
    "handshake": False,
    "auth": "none",
}
KNOWN_KEYS = (
    "name", "url", "mode", "batch_max_events", "batch_max_bytes", "secret_env", "secret_file",
    "headers", "auth", "scope", "client_id", "ca_file", "connect_timeout", "read_timeout",
    "handshake", "format", "events",
)
# Headers the sink owns: a static header may not override them.
RESERVED_HEADERS = frozenset({
    "content-type", "content-length", "host", "transfer-encoding", "connection",
    "webhook-id", "webhook-timestamp", "webhook-signature", "webhook-request-origin",
})
TOKEN_REFRESH_MARGIN = 300.0  # renew a bearer token this long before it expires
SNIPPET_CHARS = 200
MAX_REPLY_BYTES = 64 * 1024
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_FORMAT = JSONFormat()
# OpenSSL verify codes meaning "the issuer is not trusted": a private CA, fixed by ca_file.
_UNTRUSTED_ISSUER = frozenset({2, 18, 19, 20, 21})


# -- configuration ---------------------------------------------------------------------------------


def validate(options: dict[str, Any], where: str) -> dict[str, Any]:
    """Check every key cheaply (no file or environment reads); defaults filled in."""
    no_unknown(options, where, KNOWN_KEYS)
    if "name" in options and not as_str(options["name"], f"{where}.name").strip():
        raise ConfigError(f"{where}.name: must not be empty")
    if "url" not in options:
        raise ConfigError(f"{where}.url: missing (required for this sink type)")
    options["url"] = _validate_url(options["url"], f"{where}.url")
    chat.validate(options, where)
    mode = as_choice(options.get("mode", DEFAULTS["mode"]), f"{where}.mode", MODES)
    for key in ("batch_max_events", "batch_max_bytes"):
        if key in options and mode != "batch":
            raise ConfigError(f'{where}.{key}: only applies to mode = "batch"')
    for key, value in DEFAULTS.items():
        options.setdefault(key, value)
    options["batch_max_events"] = int(
        as_number(options["batch_max_events"], f"{where}.batch_max_events", 1, 10_000)
    )
    options["batch_max_bytes"] = int(
        as_number(options["batch_max_bytes"], f"{where}.batch_max_bytes", 1024, 64 * 1024 * 1024)
    )
    options["connect_timeout"] = as_number(
        options["connect_timeout"], f"{where}.connect_timeout", 0.1, 120
    )
    options["read_timeout"] = as_number(options["read_timeout"], f"{where}.read_timeout", 0.1, 600)
    options["handshake"] = as_bool(options["handshake"], f"{where}.handshake")
    for key in ("secret_env", "secret_file"):
        if key in options:
            options[key] = _string_list(options[key], f"{where}.{key}")
    if "secret_file" in options:
        options["secret_file"] = [str(Path(p).expanduser()) for p in options["secret_file"]]
    if "ca_file" in options:
        options["ca_file"] = str(Path(as_str(options["ca_file"], f"{where}.ca_file")).expanduser())
    options["auth"] = as_choice(options["auth"], f"{where}.auth", ("none", "entra"))
    _validate_auth(options, where)
    options["headers"] = _validate_headers(options.get("headers", {}), options["auth"], where)
    return options


def _validate_url(value: Any, where: str) -> str:
    text = as_str(value, where)
    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(f"{where}: bad port in {_display_url(text)!r}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: {_display_url(text)!r} is not an http(s) URL")
    if parts.username or parts.password:
        raise ConfigError(
            f"{where}: credentials in the URL are not allowed (they would end up in logs); "
            "use headers, a signing secret or auth = \"entra\""
        )
    if parts.fragment:
        raise ConfigError(f"{where}: a URL fragment (#...) is never sent; remove it")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ConfigError(
            f"{where}: plain http is allowed only to a loopback address (127.0.0.1, ::1, "
            "localhost); use https (give ca_file for a private CA)"
        )
    return text


def _string_list(value: Any, where: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: must be a string or a non-empty list of strings")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{where}[{i}]: must be a non-empty string")
    return [item.strip() for item in items]


def _validate_auth(options: dict[str, Any], where: str) -> None:
    if options["auth"] == "entra":
        if "scope" not in options:
            raise ConfigError(f'{where}.scope: missing (required with auth = "entra"), '
                              'e.g. "api://<app-id>/.default"')
        if not as_str(options["scope"], f"{where}.scope").strip():
            raise ConfigError(f"{where}.scope: must not be empty")
        if "client_id" in options:
            as_str(options["client_id"], f"{where}.client_id")
        return
    for key in ("scope", "client_id"):
        if key in options:
            raise ConfigError(f'{where}.{key}: only applies to auth = "entra"')


def _validate_headers(raw: Any, auth: str, where: str) -> dict[str, Any]:
    """A table of name -> value, where a value is a string or ``{env = "VAR"}`` / ``{file = "PATH"}``."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}.headers: must be a table of header names to values")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        key = f"{where}.headers.{name}"
        low = name.lower()
        if not _HEADER_NAME.match(name):
            raise ConfigError(f"{key}: not a valid HTTP header name")
        if low in RESERVED_HEADERS or low.startswith("ce-") or (
            low == "authorization" and auth == "entra"
        ):
            raise ConfigError(f"{key}: this header is set by the sink and cannot be overridden")
        if isinstance(value, dict):
            if len(value) != 1 or next(iter(value)) not in ("env", "file"):
                raise ConfigError(f'{key}: a table value must be {{env = "VAR"}} or {{file = "PATH"}}')
            source, ref = next(iter(value.items()))
            ref = as_str(ref, f"{key}.{source}")
            out[name] = {source: str(Path(ref).expanduser()) if source == "file" else ref}
        else:
            text = as_str(value, key)
            if any(c in text for c in "\r\n\0"):
                raise ConfigError(f"{key}: the value must not contain line breaks")
            _check_latin1(text, key)
            out[name] = text
    return out


def create(name: str, options: dict[str, Any], ctx: Any) -> WebhookSink:
    """Read the secrets, CA bundle and header values now (a missing one stops the start)."""
    where = f"sink {name!r}"
    secrets = _read_secrets(options, where)
    headers = {k: _header_value(v, f"{where} headers.{k}") for k, v in options["headers"].items()}
    ca_file = options.get("ca_file")
    if ca_file:
        _check_ca_file(ca_file, f"{where} ca_file")
    token = None
    if options["auth"] == "entra":
        token = EntraToken(options["scope"], options.get("client_id"))
    return WebhookSink(
        name, options["url"], mode=options["mode"], secrets=secrets, headers=headers,
        token=token, ca_file=ca_file, connect_timeout=options["connect_timeout"],
        read_timeout=options["read_timeout"], handshake=options["handshake"],
        batch_max_events=options["batch_max_events"], batch_max_bytes=options["batch_max_bytes"],
        state_dir=getattr(ctx, "state_dir", None), fmt=options["format"], events=options.get("events"),
    )


def _read_secrets(options: dict[str, Any], where: str) -> list[str]:
    secrets: list[tuple[str, str]] = []  # (where it came from, value)
    for var in options.get("secret_env", []):
        value = os.environ.get(var, "").strip()
        if not value:
            raise ConfigError(f"{where} secret_env: environment variable {var} is not set or empty")
        secrets.append((f"${var}", value))
    for path in options.get("secret_file", []):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where} secret_file: cannot read {path}: {_strerror(exc)}") from exc
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        if not lines:
            raise ConfigError(f"{where} secret_file: {path} holds no secret")
        secrets += [(path, line) for line in lines]  # one secret a line: rotation by editing
    for origin, value in secrets:
        Signer.check_secret(value, f"{where}: the secret from {origin}")
    return [value for _, value in secrets]


def _header_value(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if "env" in value:
        text = os.environ.get(value["env"])
        if text is None:
            raise ConfigError(f"{where}: environment variable {value['env']} is not set")
    else:
        try:
            text = Path(value["file"]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: cannot read {value['file']}: {_strerror(exc)}") from exc
    text = text.strip()
    if any(c in text for c in "\r\n\0"):
        raise ConfigError(f"{where}: the value must be one line")
    _check_latin1(text, where)
    return text


def _check_latin1(text: str, where: str) -> None:
    """HTTP sends header values as Latin-1 bytes; anything else would fail every POST."""
    try:
        text.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{where}: the value has a character an HTTP header cannot carry (position {exc.start}); "
            "use Latin-1 text"
        ) from None


def _strerror(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


# -- signing and authentication --------------------------------------------------------------------


class Signer:
    """Standard Webhooks signatures with every configured secret (several during a rotation)."""

    def __init__(self, secrets: Sequence[str]) -> None:
        from standardwebhooks.webhooks import Webhook

        self._hooks = [Webhook(s) for s in secrets]

    @staticmethod
    def check_secret(value: str, where: str) -> None:
        """Raise ConfigError, without echoing the value, unless it is ``whsec_<base64>``."""
        import binascii

        from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook

        if not value.startswith("whsec_"):
            raise ConfigError(f"{where} does not start with whsec_ (a Standard Webhooks secret)")
        try:
            Webhook(value)
        except (binascii.Error, ValueError, EmptyWebhookSecretError) as exc:
            raise ConfigError(f"{where} is not whsec_ followed by base64") from exc

    def headers(self, msg_id: str, body: bytes) -> dict[str, str]:
        """``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` for one attempt."""
        # The library formats ``timestamp.replace(tzinfo=UTC)``: it must already be UTC, or a
        # naive local time would be signed as if it were UTC.
        now = datetime.fromtimestamp(int(time.time()), UTC)
        text = body.decode("utf-8")
        signature = " ".join(h.sign(msg_id, now, text) for h in self._hooks)
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature,
        }


class EntraToken:
    """A bearer token from the managed identity, cached until shortly before it expires."""

    def __init__(self, scope: str, client_id: str | None = None) -> None:
        try:
            from azure.identity import ManagedIdentityCredential
        except ImportError as exc:
            raise ConfigError(
                "auth = \"entra\" needs the package azure-identity; "
                "install it with: pip install 'se-forwarder[entra]'"
            ) from exc
        self.scope = scope
        self._credential = (
            ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()
        )
        self._token: str | None = None
        self._expires_on = 0.0
        self._lock = threading.Lock()

    def header(self) -> str:
        """``Bearer <token>``; raises TokenError with one line when none can be had."""
        with self._lock:
            if self._token is None or time.time() >= self._expires_on - TOKEN_REFRESH_MARGIN:
                try:
                    got = self._credential.get_token(self.scope)
                except Exception as exc:  # noqa: BLE001 - azure-identity raises several kinds
                    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    raise TokenError(
                        f"cannot get an Entra token for {self.scope} from the managed identity: "
                        f"{first[:300]}"
                    ) from exc
                self._token, self._expires_on = got.token, float(got.expires_on)
            return f"Bearer {self._token}"

    def close(self) -> None:
        self._credential.close()


class TokenError(Exception):
    """No bearer token could be obtained (the message is one line, without secrets)."""


# -- the sink --------------------------------------------------------------------------------------


@dataclass
class _Item:
    """One stored event, rendered for the wire (or the reason it cannot be)."""

    event: StoredEvent
    cloud: Any = None  # the parsed CloudEvent (cloudevents.core.v1.event.CloudEvent)
    structured: bytes = b""  # its structured-mode JSON, for batches and their size
    refused: DeadLetter | None = None
    settled: Delivered | None = None  # nothing to send for it (chat formats: heartbeats, filtered)


class WebhookSink:
    """POSTs CloudEvents to one URL; one outcome per event, in outbox order."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        mode: str = "structured",
        secrets: Sequence[str] = (),
        headers: dict[str, str] | None = None,
        token: EntraToken | None = None,
        ca_file: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 15.0,
        handshake: bool = False,
        batch_max_events: int = 100,
        batch_max_bytes: int = 1024 * 1024,
        state_dir: str | Path | None = None,
        fmt: str = "cloudevents",
        events: list[str] | None = None,
    ) -> None:
        self.name = name
        self._url = url
        self.mode = mode
        self.max_batch = min(5000, max(100, 4 * batch_max_events)) if mode == "batch" else 50
        self._where = _display_url(url)
        self._signer = Signer(secrets) if secrets else None
        self._static = dict(headers or {})
        self._token = token
        self._verify: str | bool = ca_file or True
        self._has_ca_file = bool(ca_file)
        self._timeout = (connect_timeout, read_timeout)
        self._handshake = handshake
        self._handshake_done = not handshake
        self._chat = chat.ChatFormat(fmt, events) if fmt in chat.FORMATS else None
        # from WebHook-Allowed-Rate, or the chat service's pace
        self._min_interval = self._chat.min_interval if self._chat is not None else 0.0
        self._next_slot = 0.0
        self._batch_max_events = batch_max_events
        self._batch_max_bytes = batch_max_bytes
        self._unacked: tuple[str, ...] = ()  # ids of the batch that failed last: resent as is
        # Kept on disk too, so a restarted agent resends the same batch (same webhook-id).
        self._unacked_file: Path | None = None
        if mode == "batch" and state_dir is not None:
            digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
            self._unacked_file = Path(state_dir) / f"webhook-batch-{digest}.json"
            self._unacked = self._load_unacked()
        self._closed = threading.Event()
        self._session = requests.Session()
        # No proxy/netrc/CA-bundle variables behind our back (CURL_CA_BUNDLE="" would even turn
        # verification off in some requests versions); proxies are taken explicitly instead.
        self._session.trust_env = False
        host = urlsplit(url).hostname or ""
        if not _is_loopback(host):
            self._session.proxies.update(requests.utils.get_environ_proxies(url))

    # -- Sink interface ------------------------------------------------------------------------
    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport:
        if not batch:
            return DeliveryReport([])
        ready = self._ready()
        if ready is not None:
            return DeliveryReport([ready])
        outcomes: list[Outcome] = []
        for group in self._groups([self._render(e) for e in batch]):
            result = self._send_group(group)
            outcomes += result
            if not isinstance(result[-1], Delivered | DeadLetter):
                break
        return DeliveryReport(outcomes)

    def check(self) -> str | None:
        """One OPTIONS request (the handshake when enabled): reachable, TLS verified, not gone."""
        if self._handshake:
            failure = self._do_handshake()
            return None if failure is None else failure.reason
        try:
            headers = self._base_headers()
            deadline = self._deadline()
            response = self._session.options(
                self._url, headers=headers, timeout=self._timeout, verify=self._verify,
                allow_redirects=False, stream=True,
            )
            _read_some(response, deadline)
        except TokenError as exc:
            return str(exc)
        except requests.RequestException as exc:
            return self._transport_failure(exc).reason
        status = response.status_code
        if status == 410:
            return f"{self._where} answers 410 Gone: the endpoint was removed"
        if 300 <= status < 400:
            return (f"{self._where} answers {status} (redirect to "
                    f"{_display_url(response.headers.get('Location', '?'))}); redirects are never "
                    "followed: put the final URL in the configuration")
        return None

    def close(self) -> None:
        self._closed.set()
        self._session.close()
        if self._token is not None:
            self._token.close()

    # -- rendering -----------------------------------------------------------------------------
    def _render(self, event: StoredEvent) -> _Item:
        if self._chat is not None:
            body = self._chat.body(event)
            if isinstance(body, Delivered):
                return _Item(event, settled=body)
            if isinstance(body, DeadLetter):
                return _Item(event, refused=body)
            return _Item(event, structured=body)
        try:
            cloud = from_json(event.payload)
            return _Item(event, cloud, _FORMAT.write(cloud))
        except Exception as exc:  # noqa: BLE001 - a corrupt stored event must not stop the sink
            return _Item(event, refused=DeadLetter(f"stored event is not a valid CloudEvent: {exc}"))

    def _groups(self, items: list[_Item]) -> list[list[_Item]]:
        """One POST each: single events, or batches cut by count and bytes (a refused item alone).

        A batch that failed last time is cut the same way again, so its webhook-id stays the same
        across retries even when more events arrived meanwhile.
        """
        if self.mode != "batch":
            return [[item] for item in items]
        groups: list[list[_Item]] = []
        start = 0
        ids = tuple(i.event.ce_id for i in items[: len(self._unacked)])
        if self._unacked and ids == self._unacked:
            groups.append(items[: len(self._unacked)])
            start = len(self._unacked)
        current: list[_Item] = []
        size = 2
        for item in items[start:]:
            if item.refused is not None:
                if current:
                    groups.append(current)
                groups.append([item])
                current, size = [], 2
                continue
            grown = size + len(item.structured) + (1 if current else 0)
            if current and (len(current) >= self._batch_max_events or grown > self._batch_max_bytes):
                groups.append(current)
                current, grown = [], 2 + len(item.structured)
            current.append(item)
            size = grown
        if current:
            groups.append(current)
        return groups

    def _request(self, group: list[_Item]) -> tuple[str, dict[str, str], bytes]:
        """(webhook-id, headers, body) for one POST, rendered with the cloudevents SDK."""
        if self._chat is not None:
            return group[0].event.ce_id, {"Content-Type": chat.CONTENT_TYPE}, group[0].structured
        if self.mode == "batch":
            body = b"[" + b",".join(i.structured for i in group) + b"]"
            return batch_id([i.event.ce_id for i in group]), {"Content-Type": BATCH_CONTENT_TYPE}, body
        cloud = group[0].cloud
        if self.mode == "binary":
            message = ce_http.to_binary(cloud, _FORMAT)
        else:
            message = ce_http.to_structured(cloud, _FORMAT)
        return group[0].event.ce_id, dict(message.headers), message.body

    # -- sending -------------------------------------------------------------------------------
    def _send_group(self, group: list[_Item]) -> list[Outcome]:
        """Outcomes for the group's events; a refused batch is split to find the bad event."""
        if group[0].refused is not None:
            return [group[0].refused]
        if group[0].settled is not None:
            return [group[0].settled]
        if self.mode == "batch":
            self._remember(tuple(i.event.ce_id for i in group))
        outcome = self._post(group)
        if isinstance(outcome, Delivered):
            self._unacked = ()
            return [outcome] * len(group)
        if isinstance(outcome, DeadLetter):
            self._unacked = ()
            if len(group) == 1:
                return [outcome]
            # A batch refused for good may hold one bad event: halve until it is found alone.
            half = len(group) // 2
            first = self._send_group(group[:half])
            if not isinstance(first[-1], Delivered | DeadLetter):
                return first
            return first + self._send_group(group[half:])
        return [outcome]  # Retry or Park: the worker stops at this event

    def _remember(self, ids: tuple[str, ...]) -> None:
        """The batch about to be sent, in memory and (before the POST) on disk; best effort."""
        self._unacked = ids
        if self._unacked_file is None:
            return
        try:
            tmp = self._unacked_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(list(ids)), encoding="utf-8")
            os.replace(tmp, self._unacked_file)
        except OSError:
            pass  # then only this process keeps the batch composition, as without a state dir

    def _load_unacked(self) -> tuple[str, ...]:
        assert self._unacked_file is not None
        try:
            ids = json.loads(self._unacked_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return ()
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return ()
        return tuple(ids)

    def _post(self, group: list[_Item]) -> Outcome:
        msg_id, headers, body = self._request(group)
        if not self._wait_for_slot():
            return Retry("sink is closing")
        try:
            all_headers = {**self._base_headers(), **headers}
            if self._signer is not None:
                all_headers.update(self._signer.headers(msg_id, body))
            deadline = self._deadline()
            response = self._session.post(
                self._url, data=body, headers=all_headers, timeout=self._timeout,
                verify=self._verify, allow_redirects=False, stream=True,
            )
            reply = _read_some(response, deadline)
        except TokenError as exc:
            return Retry(str(exc))
        except requests.RequestException as exc:
            return self._transport_failure(exc)
        return self._classify(response, reply)

    def _classify(self, response: requests.Response, reply: bytes) -> Outcome:
        status = response.status_code
        label = f"HTTP {status}{' ' + response.reason if response.reason else ''} from {self._where}"
        if 200 <= status < 300:
            return Delivered()
        if 300 <= status < 400:
            where_to = _display_url(response.headers.get("Location", "")) or "nowhere"
            return Retry(f"{label}: redirect to {where_to} not followed (redirects never are); "
                         "put the final URL in the configuration")
        refusal = self._chat.refusal(status, reply, label) if self._chat is not None else None
        if refusal is not None:
            return refusal
        if status == 410:
            return Park(f"{label}: the endpoint is gone")
        after = _retry_after(response.headers.get("Retry-After"))
        if status in RETRY_STATUSES or status >= 500:
            return Retry(label + _snippet(reply), after)
        if 400 <= status < 500:
            return DeadLetter(label + _snippet(reply))
        return Retry(f"{label}: unexpected status")

    def _transport_failure(self, exc: requests.RequestException) -> Retry:
        """One line, no traceback, no secrets: what went wrong and what to do."""
        cause = _root_cause(exc)
        if isinstance(exc, requests.exceptions.SSLError) or isinstance(cause, ssl.SSLError):
            if isinstance(cause, ssl.SSLCertVerificationError):
                detail = cause.verify_message or cause.reason or str(cause)
                hint = ""
                if cause.verify_code in _UNTRUSTED_ISSUER:
                    hint = ("; give ca_file (the receiver's CA bundle)" if not self._has_ca_file
                            else "; ca_file does not hold the CA that issued the receiver's certificate")
                return Retry(f"TLS verification failed for {self._where}: {detail}{hint}")
            reason = getattr(cause, "reason", None) or _short(cause)
            return Retry(f"TLS handshake with {self._where} failed: {reason}")
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return Retry(f"timeout connecting to {self._where} after {self._timeout[0]:g} s")
        if isinstance(exc, requests.exceptions.ReadTimeout):
            return Retry(f"no answer from {self._where} within {self._timeout[1]:g} s")
        if isinstance(exc, requests.exceptions.ConnectionError):
            return Retry(f"cannot connect to {self._where}: {_short(cause)}")
        return Retry(f"request to {self._where} failed: {type(exc).__name__}: {_short(cause)}")

    def _deadline(self) -> float:
        """When a request must be over: connect_timeout + read_timeout from now, in total."""
        return time.monotonic() + self._timeout[0] + self._timeout[1]

    def _base_headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"se-forwarder/{__version__}", **self._static}
        if self._token is not None:
            headers["Authorization"] = self._token.header()
        return headers

    # -- abuse protection ----------------------------------------------------------------------
    def _ready(self) -> Retry | Park | None:
        """Run the handshake once before the first delivery; a failure is retried later."""
        if self._handshake_done:
            return None
        failure = self._do_handshake()
        if failure is None:
            self._handshake_done = True
        return failure

    def _do_handshake(self) -> Retry | Park | None:
        """CloudEvents webhook abuse protection: OPTIONS with WebHook-Request-Origin."""
        origin = socket.gethostname() or "se-forwarder"
        try:
            deadline = self._deadline()
            response = self._session.options(
                self._url, headers={**self._base_headers(), "WebHook-Request-Origin": origin},
                timeout=self._timeout, verify=self._verify, allow_redirects=False, stream=True,
            )
            reply = _read_some(response, deadline)
        except TokenError as exc:
            return Retry(str(exc))
        except requests.RequestException as exc:
            return self._transport_failure(exc)
        prefix = f"abuse-protection handshake with {self._where} refused"
        if response.status_code == 410:
            return Park(f"{prefix}: HTTP 410: the endpoint is gone")
        if not 200 <= response.status_code < 300:
            return Retry(f"{prefix}: HTTP {response.status_code}{_snippet(reply)}")
        allowed = response.headers.get("WebHook-Allowed-Origin", "").strip()
        if allowed not in ("*", origin):
            return Retry(f"{prefix}: WebHook-Allowed-Origin is {allowed or 'missing'!r}, "
                         f"not {origin!r}")
        self._min_interval = _interval_from_rate(response.headers.get("WebHook-Allowed-Rate"))
        return None

    def _wait_for_slot(self) -> bool:
        """Space POSTs by the receiver's WebHook-Allowed-Rate; False when closed meanwhile."""
        if self._min_interval <= 0:
            return not self._closed.is_set()
        now = time.monotonic()
        wait = self._next_slot - now
        if wait > 0 and self._closed.wait(wait):
            return False
        self._next_slot = max(now, self._next_slot) + self._min_interval
        return not self._closed.is_set()


# -- helpers ---------------------------------------------------------------------------------------


def batch_id(ce_ids: Sequence[str]) -> str:
    """A stable webhook-id for a batch: the same events in the same order give the same id."""
    digest = hashlib.sha256("\n".join(ce_ids).encode("utf-8")).hexdigest()[:32]
    return f"batch_{digest}"


def _retry_after(value: str | None) -> float | None:
    """``parse_retry_after``, with a malformed value (e.g. non-ASCII digits) counting as absent."""
    try:
        return parse_retry_after(value)
    except (ValueError, OverflowError):
        return None


def _interval_from_rate(value: str | None) -> float:
    """Seconds between requests for a WebHook-Allowed-Rate (requests per minute; * = no limit)."""
    if not value or value.strip() == "*":
        return 0.0
    try:
        rate = float(value.strip())
    except ValueError:
        return 0.0
    if not math.isfinite(rate) or rate <= 0:
        return 0.0
    # The spec's rate is a whole number of requests per minute: never more than 60 s apart.
    return min(60.0 / rate, 60.0)


def _display_url(url: str) -> str:
    return public_url(url)


def _read_some(response: requests.Response, deadline: float) -> bytes:
    """At most MAX_REPLY_BYTES of the reply (enough for a reason), read until ``deadline``
    (``time.monotonic()``) at the latest: a body that trickles in a byte at a time cannot hold the
    sink longer than its total timeout (requests' read timeout applies to each read). The rest is
    not downloaded; the status line is what counts."""
    data = bytearray()
    sock = getattr(getattr(response.raw, "connection", None), "sock", None)
    try:
        while len(data) < MAX_REPLY_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if sock is not None:
                sock.settimeout(left)  # one read waits at most until the deadline
            chunk = response.raw.read1(min(8192, MAX_REPLY_BYTES - len(data)))
            if not chunk:
                break
            data += chunk
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError):
        pass  # a broken or slow body only loses the snippet
    finally:
        response.close()
    return bytes(data)


def _snippet(reply: bytes) -> str:
    text = " ".join(reply.decode("utf-8", "replace").split())
    text = "".join(c for c in text if c.isprintable())
    if not text:
        return ""
    return ": " + (text[:SNIPPET_CHARS] + "..." if len(text) > SNIPPET_CHARS else text)


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost error under requests' and urllib3's wrappers (MaxRetryError, ...)."""
    seen: set[int] = set()
    current: BaseException = exc
    while id(current) not in seen:
        seen.add(id(current))
        nxt = getattr(current, "reason", None)
        if not isinstance(nxt, BaseException):
            nxt = next((a for a in current.args if isinstance(a, BaseException)), None)
        if nxt is None:
            nxt = current.__cause__ or current.__context__
        if nxt is None:
            break
        current = nxt
    return current


def _short(exc: BaseException) -> str:
    """A one-line description of a low-level error, without urllib3's object reprs."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc)
    text = re.sub(r"<[^>]*>: ", "", text)
    return (text.splitlines() or [type(exc).__name__])[0][:300]
