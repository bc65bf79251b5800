"""eventhubs sink: CloudEvents to Azure Event Hubs over AMQP, one partition per VM.

The package's parts, one concern each: ``config`` (``EventHubsOptions``, the checked options with
their defaults), ``client`` (the producer and its credential, through ``sinks/azure_common``, and
failures said in one line without secrets) and ``delivery`` (the sink: batches per partition key,
wire forms, outcomes).

Wire forms: ``structured`` (default; body = the CloudEvent JSON, AMQP content-type
``application/cloudevents+json``: the only form AMQP and Kafka consumers of one hub read alike) and
``binary`` (``cloudEvents_*`` application properties from the ``cloudevents`` SDK's AMQP binding,
with ``time`` as an RFC 3339 string because the SDK's epoch-milliseconds int is mis-encoded by
azure-eventhub). Azure packages are imported only when a producer is built.

With the agent's signer (``SinkContext.sign``) every event sent carries ``keyid`` and ``signature``
over its structured form (``docs/identity.md``): the body is that signed object; in binary mode the
two attributes travel as ``cloudEvents_keyid`` and ``cloudEvents_signature`` like any extension.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ..azure_common import check_plaintext, read_connection_string
from .client import CredentialProblem
from .config import EventHubsOptions
from .delivery import EventHubsSink, to_binary_amqp

__all__ = ["CredentialProblem", "EventHubsOptions", "EventHubsSink", "create", "to_binary_amqp",
           "validate"]


def validate(options: dict[str, Any], where: str) -> EventHubsOptions:
    """Check the keys of one ``[[sinks]] type = "eventhubs"`` table; cheap, reads no secret."""
    return EventHubsOptions.parse(options, where)


def create(name: str, options: EventHubsOptions, ctx: Any) -> EventHubsSink:
    """The sink for validated ``options``; connects lazily, on the first delivery or check.

    A connection string that can be read now is checked now: plaintext (the emulator's) to a host
    that is not loopback stops the agent at start (ConfigError)."""
    if options.credential == "connection-string":
        try:
            conn = read_connection_string(options.connection_string_env,
                                          options.connection_string_file)
        except ConfigError:
            conn = None  # missing now: retried at delivery, where it is checked again
        if conn:
            check_plaintext(conn, f"sink {name}")
    return EventHubsSink(name, options, sign=getattr(ctx, "sign", None),
                         producer=getattr(ctx, "eventhubs_producer", None))
