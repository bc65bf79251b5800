"""The eventhubs sink's producer: built from the configured credential, rebuilt after an
authentication failure (so a rotated secret is picked up), and failures said in one line.

One long-lived ``EventHubProducerClient`` per sink (connections and CBS handshakes are slow, so never
a client per event). Credentials: managed identity (default), DefaultAzureCredential, or a connection
string from an environment variable or a file, read when the producer is (re)created. The SDK's
retries are kept small: the outbox retries for ever with its own backoff. Azure packages are
imported only inside functions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ... import __version__
from ...errors import ConfigError, find_cause, one_line
from ..azure_common import (
    eventhubs_target,
    plaintext_problem,
    quiet_sdk_logs,
    read_connection_string,
    scrub,
    token_credential,
)
from ..base import Retry
from .config import EventHubsOptions

# Small SDK retries: the outbox retries for ever with its own backoff, and with the SDK's defaults a
# down hub takes 12-24 s per call to fail.
CLIENT_RETRY: dict[str, Any] = {"retry_total": 2, "retry_backoff_factor": 0.1, "retry_backoff_max": 1}

log = logging.getLogger("se_forwarder.sinks.eventhubs")


class CredentialProblem(Exception):
    """The credential cannot be obtained; the message is one line without any secret."""


class HubClient:
    """The producer for one Event Hub, created on first use; use ``lock`` around a send.
    ``make``, when given, makes it in place of the SDK (sinks.SinkContext.eventhubs_producer)."""

    def __init__(self, options: EventHubsOptions, make: Callable[[], Any] | None = None) -> None:
        self.options = options
        self.make = make
        self.eventhub = options.eventhub
        self.credential_kind = options.credential
        self.namespace = options.fully_qualified_namespace
        self.lock = threading.RLock()
        self._producer: Any = None
        self._secret: str | None = None  # the connection string, kept only to scrub messages

    @property
    def target(self) -> str:
        """``namespace/hub`` for messages (never anything secret)."""
        return f"{self.namespace or '?'}/{self.eventhub}"

    def producer(self) -> Any:
        with self.lock:
            if self._producer is None:
                self._producer = self._new_producer()
            return self._producer

    def drop(self) -> None:
        """Forget the producer so the next attempt re-reads the credential (rotation)."""
        with self.lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close()
            except Exception as exc:  # closing a broken client must not hide the real failure
                log.debug("closing the Event Hubs producer failed: %s", self.scrub(str(exc)))

    def scrub(self, text: str) -> str:
        return scrub(text, self._secret)

    def _new_producer(self) -> Any:
        if self.make is not None:
            return self.make()
        from azure.eventhub import EventHubProducerClient, TransportType

        common: dict[str, Any] = {"user_agent": f"se-forwarder/{__version__}", **CLIENT_RETRY}
        if self.options.transport == "amqp-websockets":  # port 443; needs websocket-client
            common["transport_type"] = TransportType.AmqpOverWebsocket
        if self.options.custom_endpoint_address:
            common["custom_endpoint_address"] = self.options.custom_endpoint_address
        quiet_sdk_logs()
        if self.credential_kind != "connection-string":
            return EventHubProducerClient(
                fully_qualified_namespace=self.namespace or "", eventhub_name=self.eventhub,
                credential=token_credential(self.credential_kind, self.options.client_id), **common,
            )
        conn = self._connection_string()
        self._secret = conn
        problem = plaintext_problem(conn)
        if problem:
            raise CredentialProblem(problem)
        try:
            host, entity = eventhubs_target(conn)
        except ConfigError as exc:
            raise CredentialProblem(str(exc)) from None
        if entity and entity != self.eventhub:
            raise CredentialProblem(
                f"the connection string is for Event Hub {entity!r}, not {self.eventhub!r}"
            )
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

    def _connection_string(self) -> str:
        env = self.options.connection_string_env
        try:
            value = read_connection_string(env, self.options.connection_string_file)
        except ConfigError as exc:
            raise CredentialProblem(str(exc)) from None
        if not value:
            raise CredentialProblem(f"environment variable {env} is not set or empty")
        return value

    def failure(self, exc: BaseException) -> Retry:
        """One line, no secret, for a failure that the outbox will retry."""
        from azure.core.exceptions import ClientAuthenticationError
        from azure.eventhub.exceptions import (
            AuthenticationError,
            ConnectError,
            ConnectionLostError,
            EventHubError,
            OperationTimeoutError,
        )

        detail = self.scrub(one_line(str(exc))) or type(exc).__name__
        kind = self.credential_kind
        if isinstance(exc, CredentialProblem):
            self.drop()
            return Retry(f"Event Hubs credential ({kind}): {detail}")
        token_failure = find_cause(exc, ClientAuthenticationError)
        if token_failure is not None:  # azure-identity could not get a token (wrapped by the SDK)
            self.drop()
            reason = self.scrub(one_line(str(token_failure))) or type(token_failure).__name__
            return Retry(f"Event Hubs credential ({kind}) failed: {reason}")
        if isinstance(exc, AuthenticationError):  # the hub refused the token (CBS 401)
            self.drop()
            return Retry(f"Event Hubs credential ({kind}) was refused for {self.target}: {detail}")
        if isinstance(exc, ConnectError | ConnectionLostError):
            return Retry(f"cannot reach Event Hubs {self.target}: {detail}")
        if isinstance(exc, OperationTimeoutError | TimeoutError):
            return Retry(f"Event Hubs {self.target} timed out: {detail}")
        if "server-busy" in str(exc).lower() or "serverbusy" in str(exc).lower():
            return Retry(f"Event Hubs {self.target} is busy: {detail}")
        if isinstance(exc, EventHubError):
            return Retry(f"Event Hubs {self.target} failed: {detail}")
        return Retry(f"Event Hubs {self.target} failed: {type(exc).__name__}: {detail}")


def missing_sdk(transport: str = "amqp") -> str | None:
    """None when azure-eventhub (and, over WebSockets, websocket-client) can be imported, else how
    to install it."""
    try:
        import azure.eventhub  # noqa: F401
    except ImportError:
        return "the eventhubs sink needs azure-eventhub: pip install 'se-forwarder[eventhubs]'"
    if transport == "amqp-websockets":
        try:
            import websocket  # noqa: F401
        except ImportError:
            return ("transport = \"amqp-websockets\" needs websocket-client: "
                    "pip install 'se-forwarder[eventhubs]'")
    return None
