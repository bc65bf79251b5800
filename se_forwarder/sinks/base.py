"""The one small interface every sink implements.

A sink receives a batch of stored CloudEvents, in outbox order, and answers with one outcome per
event for the prefix it handled. The delivery worker (``se_forwarder.delivery``) owns retries,
backoff, parking and the cursor; a sink only says what happened.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError
from ..validation import as_str


@dataclass(frozen=True)
class StoredEvent:
    """A CloudEvent as kept in the outbox: ``payload`` is its structured-mode JSON text."""

    seq: int
    ce_id: str
    event_id: str
    state: str
    ce_type: str
    payload: str
    observed_at: float  # unix time the agent observed the transition

    def as_dict(self) -> dict[str, Any]:
        return json.loads(self.payload)

    @classmethod
    def never_stored(cls, row: Any) -> StoredEvent:
        """A CloudEvent handed to sinks without entering the outbox (heartbeats, the identity
        event): ``row`` is its ``cloudevents.for_outbox`` row; no seq, about no EventId."""
        return cls(seq=0, ce_id=row.ce_id, event_id="", state=row.state, ce_type=row.ce_type,
                   payload=row.payload, observed_at=row.observed_at)


@dataclass(frozen=True)
class Delivered:
    """The sink confirmed this event."""


@dataclass(frozen=True)
class DeadLetter:
    """The sink refused this event for good; it is kept with the reason and the next one goes on."""

    reason: str


@dataclass(frozen=True)
class Retry:
    """A transient failure at this event: try it again after ``after`` seconds (None: backoff)."""

    reason: str
    after: float | None = None


@dataclass(frozen=True)
class Park:
    """The endpoint is gone: stop this sink and keep its whole backlog until resumed."""

    reason: str


Outcome = Delivered | DeadLetter | Retry | Park


@dataclass
class DeliveryReport:
    """Outcomes for a prefix of the batch, in order.

    ``outcomes[i]`` belongs to ``batch[i]``. Only the last outcome may be ``Retry`` or ``Park``;
    events after it were not attempted. An empty list means nothing was attempted (same as Retry).
    """

    outcomes: list[Outcome] = field(default_factory=list)


@runtime_checkable
class Sink(Protocol):
    """What the delivery worker needs from a sink."""

    name: str
    max_batch: int  # how many events the worker hands over at once

    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport: ...

    def check(self) -> str | None:
        """Reach the destination once; None when fine, else one line saying what is wrong."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class SinkOptions(Mapping[str, Any]):
    """Base of each sink type's options: a frozen dataclass built once by the type's ``validate``,
    with the defaults as its field defaults.

    It also reads like the table it came from (``options["url"]``, ``"ca_file" in options``): an
    optional key that was not given (None) is absent, as it was from the table.
    """

    name: str | None = None  # the sink's own name; None: a default one is derived

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, None) if key in self._keys() else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (key for key in self._keys() if getattr(self, key) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def _keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self))


def sink_name(table: Mapping[str, Any], where: str) -> str | None:
    """The ``name`` key of a sink's table: absent (None) or a non-empty string."""
    if "name" not in table:
        return None
    name = as_str(table["name"], f"{where}.name")
    if not name.strip():
        raise ConfigError(f"{where}.name: must not be empty")
    return name
