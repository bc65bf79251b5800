"""logs-ingestion sink: CloudEvents as rows of a Log Analytics table, through a Data Collection Rule.

Uses ``azure-monitor-ingestion``'s ``LogsIngestionClient`` (imported only when this sink is
configured) with a managed identity (optionally a user-assigned one by ``client_id``) or
``DefaultAzureCredential``; the token's audience is ``https://monitor.azure.com``. Rows are
``logs_rows.to_row``'s, in outbox order.

Batches: up to ``batch_max_events`` rows and ``batch_max_bytes`` of JSON per request (the service
takes at most 1 MB a call; the SDK would split a larger list into several requests, so each call
here is cut to fit in one, and one call is one outcome). The SDK's own retries and redirects are
off: the delivery worker retries. Outcomes:

- 204 -> Delivered;
- 429, 408, 5xx (Retry-After honoured), timeouts, refused connections, TLS failures, no token,
  401, 403 (the identity lacks "Monitoring Metrics Publisher" on the DCR, or the assignment is not
  yet effective: that takes up to 30 minutes) and 404 (wrong endpoint, DCR or stream; perhaps not yet
  deployed) -> Retry with one line saying which;
- 400, 413 and other 4xx -> the rows are refused: a batch is halved until the refused row is alone,
  which is dead-lettered with the service's reason; the other rows go on.

TLS verification is always on (``ca_file`` adds a private CA); plain http only to loopback.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError, find_cause, one_line
from ..imds import parse_retry_after
from ..validation import (
    api_url,
    as_choice,
    as_number,
    as_str,
    check_ca_file,
    no_unknown,
    public_url,
)
from ..validation import is_loopback as _is_loopback
from . import logs_rows
from .azure_common import CREDENTIALS, token_credential
from .base import DeadLetter, Delivered, DeliveryReport, Outcome, Retry, SinkOptions, StoredEvent, sink_name

KNOWN_KEYS = ("name", "endpoint", "rule_id", "stream", "credential", "client_id", "ca_file",
              "batch_max_events", "batch_max_bytes", "connect_timeout", "read_timeout")
MAX_REQUEST_BYTES = 1_000_000  # the service's "1 MB" a call, counted as the JSON array sent
SCOPE = "https://monitor.azure.com/.default"
RETRY_STATUSES = frozenset({401, 403, 404, 408, 429})
_RULE_ID = re.compile(r"^dcr-[0-9a-f]{32}$")
_STREAM = re.compile(r"^Custom-[A-Za-z0-9_-]{1,200}$")
_HINTS = {
    401: "the token was refused",
    403: "the identity lacks 'Monitoring Metrics Publisher' on the data collection rule "
         "(a new role assignment takes up to 30 minutes to apply)",
    404: "no such data collection rule or stream at this endpoint (check endpoint, rule_id, stream)",
}
_UNTRUSTED_ISSUER = frozenset({2, 18, 19, 20, 21})


# -- configuration ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LogsIngestionOptions(SinkOptions):
    """One ``[[sinks]] type = "logs-ingestion"`` table, checked."""

    endpoint: str
    rule_id: str
    stream: str = logs_rows.STREAM
    credential: str = "managed-identity"
    client_id: str | None = None
    ca_file: str | None = None
    batch_max_events: int = 500
    batch_max_bytes: int = MAX_REQUEST_BYTES
    connect_timeout: float = 5.0
    read_timeout: float = 30.0

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> LogsIngestionOptions:
        """Every key checked cheaply; nothing is read or imported here."""
        no_unknown(table, where, KNOWN_KEYS)
        name = sink_name(table, where)
        if "endpoint" not in table:
            raise ConfigError(f"{where}.endpoint: missing (the DCE or DCR logs ingestion URL, "
                              "https://<name>.<region>-1.ingest.monitor.azure.com)")
        endpoint = api_url(table["endpoint"], f"{where}.endpoint")
        if "rule_id" not in table:
            raise ConfigError(f"{where}.rule_id: missing (the DCR's immutable id, dcr-<32 hex digits>)")
        rule_id = as_str(table["rule_id"], f"{where}.rule_id").strip()
        if not _RULE_ID.match(rule_id):
            raise ConfigError(f"{where}.rule_id: {rule_id!r} is not an immutable DCR id "
                              "(dcr-<32 hex digits>; not the DCR's resource id)")
        stream = as_str(table.get("stream", cls.stream), f"{where}.stream").strip()
        if not _STREAM.match(stream):
            raise ConfigError(f"{where}.stream: {stream!r} is not a DCR stream name (Custom-<name>)")
        credential = as_choice(table.get("credential", cls.credential), f"{where}.credential",
                               CREDENTIALS)
        client_id = None
        if "client_id" in table:
            client_id = as_str(table["client_id"], f"{where}.client_id").strip()
            if not client_id:
                raise ConfigError(f"{where}.client_id: must not be empty")
        ca_file = None
        if "ca_file" in table:
            ca_file = str(Path(as_str(table["ca_file"], f"{where}.ca_file")).expanduser())
        return cls(
            name=name, endpoint=endpoint, rule_id=rule_id, stream=stream, credential=credential,
            client_id=client_id, ca_file=ca_file,
            batch_max_events=int(as_number(table.get("batch_max_events", cls.batch_max_events),
                                           f"{where}.batch_max_events", 1, 10_000)),
            batch_max_bytes=int(as_number(table.get("batch_max_bytes", cls.batch_max_bytes),
                                          f"{where}.batch_max_bytes", 1024, MAX_REQUEST_BYTES)),
            connect_timeout=as_number(table.get("connect_timeout", cls.connect_timeout),
                                      f"{where}.connect_timeout", 0.1, 120),
            read_timeout=as_number(table.get("read_timeout", cls.read_timeout),
                                   f"{where}.read_timeout", 0.1, 600),
        )


def validate(options: dict[str, Any], where: str) -> LogsIngestionOptions:
    return LogsIngestionOptions.parse(options, where)


def create(name: str, options: LogsIngestionOptions, ctx: Any) -> LogsIngestionSink:
    """Check the CA bundle now; the SDK and the credential come with the first delivery."""
    if options.ca_file:
        check_ca_file(options.ca_file, f"sink {name!r} ca_file")
    return LogsIngestionSink(name, options)


def default_name(options: Mapping[str, Any]) -> str:
    host = urlsplit(str(options.get("endpoint", ""))).hostname or "?"
    return f"logs-ingestion:{host}/{options.get('rule_id', '?')}/{options.get('stream', '?')}"


# -- the sink --------------------------------------------------------------------------------------


class LogsIngestionSink:
    """Uploads rows to one DCR stream; one outcome per event, in outbox order."""

    def __init__(self, name: str, options: LogsIngestionOptions) -> None:
        self.name = name
        self.max_batch = options.batch_max_events
        self._options = options
        self._endpoint = options.endpoint
        self._where = public_url(self._endpoint)
        self._max_bytes = options.batch_max_bytes
        self._client: Any = None
        self._credential: Any = None
        self._per_request: dict[str, Any] = {}
        if urlsplit(self._endpoint).scheme == "http":  # loopback only (validated)
            self._per_request["enforce_https"] = False

    # -- Sink interface ------------------------------------------------------------------------
    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport:
        if not batch:
            return DeliveryReport([])
        try:
            self._connect()
        except ImportError:
            return DeliveryReport([Retry("the logs-ingestion sink needs the package azure-monitor-ingestion; "
                                         "install it with: pip install 'se-forwarder[logs-ingestion]'")])
        except Exception as exc:  # noqa: BLE001 - e.g. a credential that cannot be built here
            return DeliveryReport([Retry(f"cannot create the Logs ingestion client: {type(exc).__name__}: "
                                         f"{one_line(exc)}")])
        outcomes: list[Outcome] = []
        for run in self._runs(batch):
            result = run if isinstance(run[0], DeadLetter) else self._send(run)
            outcomes += result
            if not isinstance(result[-1], Delivered | DeadLetter):
                break
        return DeliveryReport(outcomes)

    def check(self) -> str | None:
        """A token from the configured credential, and one request through TLS to the endpoint."""
        try:
            self._connect()
            self._credential.get_token(SCOPE)
            from azure.core.rest import HttpRequest

            response = self._client.send_request(HttpRequest("GET", self._endpoint + "/"),
                                                 **self._per_request)
            response.close()
        except ImportError:
            return "the logs-ingestion sink needs: pip install 'se-forwarder[logs-ingestion]'"
        except Exception as exc:  # noqa: BLE001 - one line whatever azure-core raised
            return self._failure(exc).reason
        return None

    def close(self) -> None:
        for thing in (self._client, self._credential):
            if thing is not None:
                with contextlib.suppress(Exception):  # closing is best effort
                    thing.close()

    # -- batching ------------------------------------------------------------------------------
    def _runs(self, batch: Sequence[StoredEvent]) -> list[list[Any]]:
        """Consecutive rows cut by count and bytes; a row that cannot be sent is a run of its own."""
        runs: list[list[Any]] = []
        current: list[tuple[dict[str, Any], int]] = []
        size = 2  # "[" and "]"
        for event in batch:
            refused, row, length = self._row(event)
            if refused is not None:
                if current:
                    runs.append(current)
                runs.append([refused])
                current, size = [], 2
                continue
            grown = size + length + (2 if current else 0)  # ", " between rows, as json.dumps writes
            if current and (len(current) >= self.max_batch or grown > self._max_bytes):
                runs.append(current)
                current, grown = [], 2 + length
            current.append((row, length))
            size = grown
        if current:
            runs.append(current)
        return runs

    def _row(self, event: StoredEvent) -> tuple[DeadLetter | None, dict[str, Any], int]:
        try:
            row = logs_rows.to_row(json.loads(event.payload))
        except ValueError as exc:
            return DeadLetter(f"stored event is not a valid CloudEvent: {exc}"), {}, 0
        length = len(json.dumps(row))
        if length + 2 > self._max_bytes:
            return DeadLetter(f"the row is {length} bytes of JSON; a request takes at most "
                              f"{self._max_bytes}"), {}, 0
        return None, row, length

    # -- sending -------------------------------------------------------------------------------
    def _send(self, run: list[tuple[dict[str, Any], int]]) -> list[Outcome]:
        """Outcomes for the run's rows; a refused run is halved to find the refused row."""
        outcome = self._upload([row for row, _ in run])
        if isinstance(outcome, Delivered):
            return [outcome] * len(run)
        if isinstance(outcome, DeadLetter) and len(run) > 1:
            half = len(run) // 2
            first = self._send(run[:half])
            if not isinstance(first[-1], Delivered | DeadLetter):
                return first
            return first + self._send(run[half:])
        return [outcome]

    def _upload(self, rows: list[dict[str, Any]]) -> Outcome:
        try:
            self._client.upload(rule_id=self._options.rule_id, stream_name=self._options.stream,
                                logs=rows, **self._per_request)
        except Exception as exc:  # noqa: BLE001 - sorted into outcomes below
            return self._failure(exc)
        return Delivered()

    def _failure(self, exc: Exception) -> Retry | DeadLetter:
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )

        status = getattr(exc, "status_code", None)
        response = getattr(exc, "response", None)
        url = str(getattr(getattr(response, "request", None), "url", ""))
        answered = response is not None and url.startswith(self._endpoint)  # not the token endpoint
        if isinstance(exc, HttpResponseError) and status is not None and response is not None \
                and answered:
            label = f"HTTP {status} from {self._where}{_service_reason(response)}"
            after = _retry_after(response.headers)
            if status in RETRY_STATUSES or status >= 500:
                hint = f" ({_HINTS[status]})" if status in _HINTS else ""
                return Retry(label + hint, after)
            if 400 <= status < 500:
                return DeadLetter(label)
            return Retry(label + ": unexpected status", after)
        if isinstance(exc, ClientAuthenticationError):  # no HTTP answer: the credential failed
            return Retry(f"cannot get a token for {SCOPE} with credential = "
                         f"{self._options.credential!r}: {one_line(exc)}")
        if isinstance(exc, ServiceRequestError | ServiceResponseError):
            return Retry(self._transport_reason(exc))
        return Retry(f"upload to {self._where} failed: {type(exc).__name__}: {one_line(exc)}")

    def _transport_reason(self, exc: Exception) -> str:
        import ssl

        cause = find_cause(exc, ssl.SSLError)
        if isinstance(cause, ssl.SSLCertVerificationError):
            hint = ""
            if cause.verify_code in _UNTRUSTED_ISSUER:
                hint = ("; give ca_file (the endpoint's CA bundle)" if not self._options.ca_file
                        else "; ca_file does not hold the CA that issued the endpoint's certificate")
            return f"TLS verification failed for {self._where}: {cause.verify_message or cause}{hint}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS handshake with {self._where} failed: {cause.reason or cause}"
        return f"cannot reach {self._where}: {one_line(find_cause(exc, OSError) or exc)}"

    def _connect(self) -> None:
        if self._client is not None:
            return
        from azure.monitor.ingestion import LogsIngestionClient

        credential = token_credential(self._options.credential, self._options.client_id)
        kwargs: dict[str, Any] = {
            "retry_total": 0, "permit_redirects": False, "use_env_settings": False,
            "connection_timeout": self._options.connect_timeout,
            "read_timeout": self._options.read_timeout,
            "connection_verify": self._options.ca_file or True,
        }
        host = urlsplit(self._endpoint).hostname or ""
        if not _is_loopback(host):
            import requests.utils

            proxies = requests.utils.get_environ_proxies(self._endpoint)
            if proxies:
                kwargs["proxies"] = proxies
        self._client = LogsIngestionClient(self._endpoint, credential, **kwargs)
        self._credential = credential


def _service_reason(response: Any) -> str:
    """``: InvalidStream: The stream ... `` from the service's JSON error, else the text, cut."""
    try:
        text = response.text()
    except Exception:  # noqa: BLE001 - the status is what counts
        return ""
    try:
        error = json.loads(text).get("error", {})
        text = ": ".join(str(error[k]) for k in ("code", "message") if error.get(k))
    except (ValueError, AttributeError):
        pass
    text = " ".join(text.split())
    return f": {text[:300]}" if text else ""


def _retry_after(headers: Any) -> float | None:
    for key, scale in (("retry-after-ms", 0.001), ("x-ms-retry-after-ms", 0.001)):
        value = headers.get(key)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                pass
    try:
        return parse_retry_after(headers.get("Retry-After"))
    except (ValueError, OverflowError):
        return None
