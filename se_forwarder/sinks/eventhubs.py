"""eventhubs sink: CloudEvents to Azure Event Hubs over AMQP, one partition per VM.

One long-lived ``EventHubProducerClient`` per sink (connections and CBS handshakes are slow, so never
a client per event). Events go out as ``send_batch`` calls of up to the link's maximum message size,
with partition key = the event's ``vmid`` extension, so one VM's events stay in order on one
partition. The outbox gives durability and retries, so the SDK's buffered mode and its long retry
loops are not used: a failure comes back at once as an outcome.

Wire forms: ``structured`` (default; body = the CloudEvent JSON, AMQP content-type
``application/cloudevents+json``: the only form AMQP and Kafka consumers of one hub read alike) and
``binary`` (``cloudEvents_*`` application properties from the ``cloudevents`` SDK's AMQP binding,
with ``time`` as an RFC 3339 string because the SDK's epoch-milliseconds int is mis-encoded by
azure-eventhub).

Outcomes: unreachable hub, timeouts, server busy, credential failures -> Retry (one line, never a
secret); an event larger than the hub accepts -> DeadLetter with the sizes. Credentials:
managed identity (default), DefaultAzureCredential, or a connection string from an environment
variable or a file, read when the producer is (re)created so a rotated secret is picked up after an
authentication failure. Azure packages are imported only inside functions.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..validation import as_choice, as_str, no_unknown
from .base import DeadLetter, Delivered, DeliveryReport, Outcome, Retry, StoredEvent

CREDENTIALS = ("managed-identity", "default", "connection-string")
MODES = ("structured", "binary")
KNOWN_KEYS = (
    "name",
    "fully_qualified_namespace",
    "eventhub",
    "credential",
    "client_id",
    "connection_string_env",
    "connection_string_file",
    "mode",
)
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json"
SEND_TIMEOUT = 30.0  # seconds for one send_batch, including reconnecting
# Small SDK retries: the outbox retries for ever with its own backoff, and with the SDK's defaults a
# down hub takes 12-24 s per call to fail.
CLIENT_RETRY: dict[str, Any] = {"retry_total": 2, "retry_backoff_factor": 0.1, "retry_backoff_max": 1}

log = logging.getLogger(__name__)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_PATTERNS = (
    re.compile(r"(SharedAccessKey\s*=\s*)[^;\s'\"]+", re.IGNORECASE),
    re.compile(r"(SharedAccessSignature\s*=?\s*)[^;\s'\"]+", re.IGNORECASE),
    re.compile(r"(\bsig=)[^&\s'\"]+", re.IGNORECASE),
)


# --------------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------------


def validate(options: dict[str, Any], where: str) -> dict[str, Any]:
    """Check the keys of one ``[[sinks]] type = "eventhubs"`` table; cheap, reads no secret.

    ``eventhub`` is always required (it keys the sink's default name, which must not depend on a
    secret); ``fully_qualified_namespace`` is required except with a connection string, which
    carries its own endpoint.
    """
    from ..errors import ConfigError

    no_unknown(options, where, KNOWN_KEYS)
    out = dict(options)
    out["credential"] = as_choice(
        out.get("credential", "managed-identity"), f"{where}.credential", CREDENTIALS
    )
    out["mode"] = as_choice(out.get("mode", "structured"), f"{where}.mode", MODES)
    if "eventhub" not in out:
        raise ConfigError(f"{where}.eventhub: missing (the Event Hub's name)")
    hub = as_str(out["eventhub"], f"{where}.eventhub").strip()
    if not hub or "/" in hub or ";" in hub:
        raise ConfigError(f"{where}.eventhub: {hub!r} is not an Event Hub name")
    out["eventhub"] = hub

    credential = out["credential"]
    if "fully_qualified_namespace" in out:
        out["fully_qualified_namespace"] = _namespace(
            out["fully_qualified_namespace"], f"{where}.fully_qualified_namespace"
        )
    elif credential != "connection-string":
        raise ConfigError(
            f"{where}.fully_qualified_namespace: missing (e.g. 'myns.servicebus.windows.net'; "
            f"required with credential = {credential!r})"
        )

    if "client_id" in out:
        if credential == "connection-string":
            raise ConfigError(f"{where}.client_id: only for credential = managed-identity or default")
        out["client_id"] = as_str(out["client_id"], f"{where}.client_id").strip()
        if not out["client_id"]:
            raise ConfigError(f"{where}.client_id: must not be empty")

    sources = [k for k in ("connection_string_env", "connection_string_file") if k in out]
    if credential != "connection-string":
        if sources:
            raise ConfigError(f"{where}.{sources[0]}: only for credential = connection-string")
    elif len(sources) != 1:
        raise ConfigError(
            f"{where}.connection_string_env: give exactly one of connection_string_env or "
            "connection_string_file with credential = connection-string"
        )
    if "connection_string_env" in out:
        env = as_str(out["connection_string_env"], f"{where}.connection_string_env")
        if not _ENV_NAME.match(env):
            raise ConfigError(
                f"{where}.connection_string_env: {env!r} is not an environment variable name "
                "(give the variable's name, not the connection string)"
            )
    if "connection_string_file" in out:
        path = as_str(out["connection_string_file"], f"{where}.connection_string_file")
        if not path.strip():
            raise ConfigError(f"{where}.connection_string_file: must not be empty")
        out["connection_string_file"] = str(Path(path).expanduser())
    return out


def _namespace(value: Any, where: str) -> str:
    """``ns.servicebus.windows.net`` from that or ``sb://ns.servicebus.windows.net/``."""
    from ..errors import ConfigError

    text = as_str(value, where).strip()
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme.lower() not in ("sb", "amqps"):
            raise ConfigError(f"{where}: {value!r} is not an Event Hubs namespace host")
    text = text.rstrip("/")
    if not text or any(c in text for c in "/;?@ ="):
        raise ConfigError(f"{where}: {value!r} is not a namespace host (e.g. 'myns.servicebus.windows.net')")
    return text


def create(name: str, options: dict[str, Any], ctx: Any) -> EventHubsSink:
    """The sink for validated ``options``; connects lazily, on the first delivery or check.

    A connection string that can be read now is checked now: plaintext (the emulator's) to a host
    that is not loopback stops the agent at start (ConfigError)."""
    sink = EventHubsSink(name, options)
    if sink.credential_kind == "connection-string":
        try:
            conn = sink._read_connection_string()
        except CredentialProblem:
            return sink  # missing now: retried at delivery, where it is checked again
        from .azure_common import check_plaintext

        check_plaintext(conn, f"sink {name}")
    return sink


# --------------------------------------------------------------------------------------------------
# secrets
# --------------------------------------------------------------------------------------------------


class CredentialProblem(Exception):
    """The credential cannot be obtained; the message is one line without any secret."""


def scrub(text: str, secret: str | None = None) -> str:
    """``text`` on one line, without keys, signatures or the connection string itself."""
    if secret:
        text = text.replace(secret, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1***", text)
    return " ".join(text.split())


def _connection_settings(conn: str) -> dict[str, str]:
    """Key/value pairs of a connection string, keys lower-cased (values are not logged)."""
    settings = {}
    for part in conn.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            settings[key.strip().lower()] = value.strip()
    return settings


# --------------------------------------------------------------------------------------------------
# the sink
# --------------------------------------------------------------------------------------------------


@dataclass
class _Prepared:
    """One outbox event as Event Hubs event data, with its partition key."""

    index: int
    partition_key: str | None
    data: Any  # azure.eventhub.EventData
    dead: DeadLetter | None = None  # set when the stored event cannot be sent at all


class EventHubsSink:
    """Delivers CloudEvents to one Event Hub; see the module docstring."""

    max_batch = 200

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        self.name = name
        self.options = options
        self.eventhub: str = options["eventhub"]
        self.credential_kind: str = options.get("credential", "managed-identity")
        self.mode: str = options.get("mode", "structured")
        self.namespace: str | None = options.get("fully_qualified_namespace")
        self._producer: Any = None
        self._secret: str | None = None  # the connection string, kept only to scrub messages
        self._lock = threading.RLock()

    @property
    def target(self) -> str:
        """``namespace/hub`` for messages (never anything secret)."""
        return f"{self.namespace or '?'}/{self.eventhub}"

    # -- producer ------------------------------------------------------------------------------

    def _read_connection_string(self) -> str:
        env = self.options.get("connection_string_env")
        if env:
            value = os.environ.get(env, "").strip()
            if not value:
                raise CredentialProblem(f"environment variable {env} is not set or empty")
            return value
        path = Path(self.options["connection_string_file"])
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CredentialProblem(f"cannot read {path}: {exc.strerror or exc}") from None
        if not value:
            raise CredentialProblem(f"{path} is empty")
        return value

    def _new_producer(self) -> Any:
        from azure.eventhub import EventHubProducerClient

        from .. import __version__

        common: dict[str, Any] = {"user_agent": f"se-forwarder/{__version__}", **CLIENT_RETRY}
        _quiet_azure_logs()
        if self.credential_kind == "connection-string":
            conn = self._read_connection_string()
            self._secret = conn
            from .azure_common import plaintext_problem

            if plaintext_problem(conn):
                raise CredentialProblem(str(plaintext_problem(conn)))
            settings = _connection_settings(conn)
            endpoint = settings.get("endpoint", "")
            if not endpoint.lower().startswith("sb://") or not settings.get("sharedaccesskeyname"):
                raise CredentialProblem(
                    "the connection string is malformed (needs Endpoint=sb://...;"
                    "SharedAccessKeyName=...;SharedAccessKey=...)"
                )
            entity = settings.get("entitypath")
            if entity and entity != self.eventhub:
                raise CredentialProblem(
                    f"the connection string is for Event Hub {entity!r}, not {self.eventhub!r}"
                )
            host = endpoint[len("sb://") :].strip("/")
            if self.namespace and self.namespace.lower() != host.lower():
                raise CredentialProblem(
                    f"the connection string is for namespace {host!r}, not {self.namespace!r}"
                )
            self.namespace = host
            try:
                return EventHubProducerClient.from_connection_string(
                    conn, eventhub_name=self.eventhub, **common
                )
            except ValueError as exc:
                raise CredentialProblem(
                    f"the connection string is malformed: {scrub(str(exc), conn)}"
                ) from None
        credential = self._token_credential()
        return EventHubProducerClient(
            fully_qualified_namespace=self.namespace,
            eventhub_name=self.eventhub,
            credential=credential,
            **common,
        )

    def _token_credential(self) -> Any:
        client_id = self.options.get("client_id")
        if self.credential_kind == "managed-identity":
            from azure.identity import ManagedIdentityCredential

            return (
                ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()
            )
        from azure.identity import DefaultAzureCredential

        if client_id:
            return DefaultAzureCredential(managed_identity_client_id=client_id)
        return DefaultAzureCredential()

    def _client(self) -> Any:
        with self._lock:
            if self._producer is None:
                self._producer = self._new_producer()
            return self._producer

    def _drop_client(self) -> None:
        """Forget the producer so the next attempt re-reads the credential (rotation)."""
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close()
            except Exception as exc:  # closing a broken client must not hide the real failure
                log.debug("closing the Event Hubs producer failed: %s", scrub(str(exc), self._secret))

    # -- delivery ------------------------------------------------------------------------------

    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport:
        """Send ``batch`` in order; outcomes for the prefix handled (see base.DeliveryReport)."""
        outcomes: list[Outcome] = []
        missing = _missing_sdk()
        if missing:
            return DeliveryReport([Retry(missing)])
        prepared: list[_Prepared] = []
        for index, event in enumerate(batch):
            try:
                prepared.append(self._prepare(index, event))
            except Exception as exc:  # a stored event that is not a CloudEvent never will be
                reason = f"not a valid CloudEvent: {type(exc).__name__}: {one_line(str(exc))}"
                prepared.append(_Prepared(index, None, None, DeadLetter(reason)))
        try:
            with self._lock:
                producer = self._client()
                for run in _runs(prepared):
                    if run[0].dead is not None:
                        outcomes.append(run[0].dead)
                        continue
                    self._send_run(producer, run, outcomes)
        except Exception as exc:  # every failure becomes an outcome for the next event
            outcomes.append(self._failure(exc))
        return DeliveryReport(outcomes)

    def _prepare(self, index: int, event: StoredEvent) -> _Prepared:
        from azure.eventhub import EventData

        ce = event.as_dict()
        key = ce.get("vmid") or ce.get("source")
        if self.mode == "structured":
            data = EventData(event.payload.encode("utf-8"))
            data.content_type = STRUCTURED_CONTENT_TYPE
        else:
            message = to_binary_amqp(event.payload)
            data = EventData(message.application_data)
            if "content-type" in message.properties:
                data.content_type = message.properties["content-type"]
            data.properties = dict(message.application_properties)
        return _Prepared(index, str(key) if key is not None else None, data)

    def _send_run(self, producer: Any, run: list[_Prepared], outcomes: list[Outcome]) -> None:
        """Send events sharing one partition key in as few batches as the link size allows."""
        key = run[0].partition_key
        current = producer.create_batch(partition_key=key)
        pending: list[_Prepared] = []
        for item in run:
            if _added(current, item, pending):
                continue
            if pending:  # the batch is full: send it, start another
                self._send(producer, current, pending, outcomes)
                current = producer.create_batch(partition_key=key)
                pending = []
                if _added(current, item, pending):
                    continue
            outcomes.append(self._too_large(current, item))
        if pending:
            self._send(producer, current, pending, outcomes)

    def _send(self, producer: Any, batch: Any, items: list[_Prepared], outcomes: list[Outcome]) -> None:
        from azure.eventhub.exceptions import EventDataSendError

        try:
            producer.send_batch(batch, timeout=SEND_TIMEOUT)
        except EventDataSendError as exc:
            if "message-size-exceeded" not in str(exc):
                raise
            # The hub refused the size although the link allowed it: send one by one, and
            # dead-letter what is still refused.
            if len(items) == 1:
                outcomes.append(DeadLetter(self._size_reason(batch.size_in_bytes, batch.max_size_in_bytes)))
                return
            for item in items:
                single = producer.create_batch(partition_key=item.partition_key)
                single.add(item.data)
                self._send(producer, single, [item], outcomes)
            return
        outcomes.extend(Delivered() for _ in items)

    def _too_large(self, empty_batch: Any, item: _Prepared) -> DeadLetter:
        from azure.eventhub import EventDataBatch

        probe = EventDataBatch(max_size_in_bytes=2**31 - 1, partition_key=item.partition_key)
        probe.add(item.data)
        return DeadLetter(self._size_reason(probe.size_in_bytes, empty_batch.max_size_in_bytes))

    def _size_reason(self, size: int, limit: int) -> str:
        return (
            f"event of {size} bytes is larger than Event Hub {self.target} accepts "
            f"({limit} bytes per message)"
        )

    def _failure(self, exc: BaseException) -> Retry:
        """One line, no secret, for a failure that the outbox will retry."""
        from azure.core.exceptions import ClientAuthenticationError
        from azure.eventhub.exceptions import (
            AuthenticationError,
            ConnectError,
            ConnectionLostError,
            EventHubError,
            OperationTimeoutError,
        )

        detail = scrub(one_line(str(exc)), self._secret) or type(exc).__name__
        if isinstance(exc, CredentialProblem):
            self._drop_client()
            return Retry(f"Event Hubs credential ({self.credential_kind}): {detail}")
        token_failure = _cause(exc, ClientAuthenticationError)
        if token_failure is not None:  # azure-identity could not get a token (wrapped by the SDK)
            self._drop_client()
            reason = scrub(one_line(str(token_failure)), self._secret) or type(token_failure).__name__
            return Retry(f"Event Hubs credential ({self.credential_kind}) failed: {reason}")
        if isinstance(exc, AuthenticationError):  # the hub refused the token (CBS 401)
            self._drop_client()
            return Retry(
                f"Event Hubs credential ({self.credential_kind}) was refused for {self.target}: {detail}"
            )
        if isinstance(exc, ConnectError | ConnectionLostError):
            return Retry(f"cannot reach Event Hubs {self.target}: {detail}")
        if isinstance(exc, OperationTimeoutError | TimeoutError):
            return Retry(f"Event Hubs {self.target} timed out: {detail}")
        if "server-busy" in str(exc).lower() or "serverbusy" in str(exc).lower():
            return Retry(f"Event Hubs {self.target} is busy: {detail}")
        if isinstance(exc, EventHubError):
            return Retry(f"Event Hubs {self.target} failed: {detail}")
        log.debug("unexpected Event Hubs failure", exc_info=False)
        return Retry(f"Event Hubs {self.target} failed: {type(exc).__name__}: {detail}")

    # -- check and close -----------------------------------------------------------------------

    def check(self) -> str | None:
        """Reach the hub (``get_eventhub_properties``); None when fine, else what failed."""
        missing = _missing_sdk()
        if missing:
            return missing
        try:
            with self._lock:
                props = self._client().get_eventhub_properties()
        except Exception as exc:
            return self._failure(exc).reason
        if props.get("eventhub_name") and props["eventhub_name"] != self.eventhub:
            return f"{self.target} answered for hub {props['eventhub_name']!r}"
        if not props.get("partition_ids"):
            return f"Event Hub {self.target} has no partitions"
        return None

    def close(self) -> None:
        self._drop_client()


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def to_binary_amqp(payload: str | bytes) -> Any:
    """CloudEvents AMQP binary form of a structured JSON event (``cloudevents`` SDK binding).

    The binding writes ``time`` as epoch milliseconds, an int azure-eventhub encodes as a 32-bit
    AMQP int and fails on; it is replaced with the RFC 3339 string the binding also reads.
    """
    from cloudevents.core.bindings.amqp import AMQPMessage, to_binary
    from cloudevents.core.formats.json import JSONFormat

    fmt = JSONFormat()
    event = fmt.read(None, payload)
    message = to_binary(event, fmt)
    props = dict(message.application_properties)
    if "cloudEvents_time" in props:
        # The agent's own text when it is one, so both forms carry the same string.
        original = json.loads(payload).get("time")
        props["cloudEvents_time"] = (
            original if isinstance(original, str) else _rfc3339(event.get_attributes()["time"])
        )
    return AMQPMessage(message.properties, props, message.application_data)


def _rfc3339(moment: Any) -> str:
    from datetime import UTC, datetime

    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return str(moment)


def _runs(items: list[_Prepared]) -> Iterator[list[_Prepared]]:
    """Consecutive events with the same partition key (a dead letter is a run of its own)."""
    run: list[_Prepared] = []
    for item in items:
        if item.dead is not None:
            if run:
                yield run
                run = []
            yield [item]
            continue
        if run and run[0].partition_key != item.partition_key:
            yield run
            run = []
        run.append(item)
    if run:
        yield run


def _missing_sdk() -> str | None:
    """None when azure-eventhub can be imported, else how to install it."""
    try:
        import azure.eventhub  # noqa: F401
    except ImportError:
        return "the eventhubs sink needs azure-eventhub: pip install 'se-forwarder[eventhubs]'"
    return None


def one_line(text: str) -> str:
    """The SDK's multi-line error text as one line, without its repeated trailer.

    ``CBS Token authentication failed.\nStatus code: 401\nDescription: ...\nError: ...`` becomes
    ``CBS Token authentication failed. Status code: 401 Description: ...``.
    """
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if kept and (line in kept or line.startswith(("Error condition", "Error Description", "Error:"))):
            break
        kept.append(line)
    return " ".join(kept)[:300]


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` or the first exception of type ``kind`` it was raised from or during."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _quiet_azure_logs() -> None:
    """The SDK logs every AMQP state change at INFO; keep the agent's log about the agent."""
    levels = {
        "azure.eventhub": logging.WARNING,
        "azure.core.pipeline.policies.http_logging_policy": logging.WARNING,
        # azure-identity warns on every failed get_token, i.e. on every retry; the sink's own
        # Retry reason already says it once.
        "azure.identity": logging.ERROR,
    }
    for name, level in levels.items():
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(level)


def _added(batch: Any, item: _Prepared, pending: list[_Prepared]) -> bool:
    """Add ``item`` to ``batch`` (and to ``pending``) if it fits; False when it does not."""
    try:
        batch.add(item.data)
    except ValueError:
        return False
    pending.append(item)
    return True
