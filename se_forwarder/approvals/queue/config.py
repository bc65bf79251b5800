"""``[approvals.queue]`` as configured: names of queues, variables and files, never secrets.

Pure (no Azure package): the configuration validates the table here; ``client.resolve`` reads
the secrets when the agent starts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from ...errors import ConfigError
from ...validation import as_number, as_str, no_unknown
from .names import validate_account_url, validate_template


@dataclass(frozen=True, kw_only=True)
class QueueConfig(Mapping[str, Any]):
    """``[approvals.queue]`` as configured: names, not secrets. It also reads like its table
    (``queue["queue"]``); a key not given (None) is absent, as it was from the table."""

    queue: str
    type: str = "storage-queue"
    account_url: str | None = None
    connection_string_env: str | None = None
    connection_string_file: str | None = None
    client_id: str | None = None
    verify_keys_env: str | None = None  # the coordinator's public key(s), never a private key
    verify_keys_file: str | None = None
    visibility_timeout: int = 30  # seconds a received message stays invisible
    poll_interval: float = 1.0  # seconds between receives from an empty queue
    # ... while the VM has no Scheduled event: a new event wakes the consumer at once
    idle_poll_interval: float = 30.0

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key) if key in _QUEUE_FIELDS else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (key for key in _QUEUE_FIELDS if getattr(self, key) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


_QUEUE_FIELDS = tuple(f.name for f in fields(QueueConfig))
QUEUE_KEYS = ("type", "account_url", "queue", "connection_string_env", "connection_string_file",
              "client_id", "verify_keys_env", "verify_keys_file", "visibility_timeout", "poll_interval",
              "idle_poll_interval")
# The shared HMAC key of earlier versions: refused, so no VM holds a key that can sign approvals.
REMOVED_QUEUE_KEYS = ("signing_key_env", "signing_key_file")


def parse_queue(raw: Mapping[str, Any], where: str) -> QueueConfig:
    """``[approvals.queue]``: names, not secrets (those are read when the agent starts)."""
    for key in REMOVED_QUEUE_KEYS:
        if key in raw:
            raise ConfigError(
                f"{where}.{key}: agents no longer hold a signing key (it would let this VM sign "
                "approvals for every VM); configure verify_keys_env or verify_keys_file with the "
                "coordinator's public key (the .pub file of 'se-forwarder fleet keygen')")
    no_unknown(raw, where, QUEUE_KEYS)
    if raw.get("type", "storage-queue") != "storage-queue":
        raise ConfigError(f"{where}.type: only 'storage-queue' is supported")
    names = {key: as_str(raw[key], f"{where}.{key}") for key in QUEUE_KEYS[1:8] if key in raw}
    if "queue" not in names:
        raise ConfigError(f"{where}.queue: missing (e.g. 'se-approvals-{{vm_name}}')")
    validate_template(names["queue"], f"{where}.queue")
    if "account_url" in names:
        names["account_url"] = validate_account_url(names["account_url"], f"{where}.account_url")
    if not {"account_url", "connection_string_env", "connection_string_file"} & names.keys():
        raise ConfigError(f"{where}.account_url: missing (or give connection_string_env)")
    if not {"verify_keys_env", "verify_keys_file"} & names.keys():
        raise ConfigError(f"{where}.verify_keys_env: missing (the coordinator's public key(s): "
                          "approval messages must be signed)")
    defaults = QueueConfig(queue=names["queue"])
    poll = float(as_number(raw.get("poll_interval", defaults.poll_interval),
                           f"{where}.poll_interval", 0.05, 60))
    idle = float(as_number(raw.get("idle_poll_interval", max(poll, defaults.idle_poll_interval)),
                           f"{where}.idle_poll_interval", 0.05, 600))
    if idle < poll:
        raise ConfigError(f"{where}.idle_poll_interval: {idle:g} is shorter than poll_interval "
                          f"({poll:g}); it is the interval while no event is scheduled, so at "
                          "least as long")
    return QueueConfig(
        **names,
        visibility_timeout=int(as_number(raw.get("visibility_timeout", defaults.visibility_timeout),
                                         f"{where}.visibility_timeout", 5, 3600)),
        poll_interval=poll,
        idle_poll_interval=idle,
    )
