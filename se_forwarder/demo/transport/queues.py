"""The fleet demo's Storage queues: a queue service in memory, behind the SDK's ``QueueClient``.

Only ``se-forwarder demo --fleet`` uses it: the coordinator's sender (``coordinator.access.Clients``)
and each agent's approval-queue consumer (``agent.Transport``) are handed clients of it in code,
and no configuration key can select it. It keeps Azure Storage queues' model, so the sending and
the consuming are the code that runs against Azure:

- named queues, created by ``create_queue`` (ResourceExistsError if there is one); sending to a
  queue that does not exist raises ResourceNotFoundError, as the service answers 404;
- ``send_message(content, time_to_live=...)``: a message with an id, its insertion and expiry
  times; an expired message is never received again;
- ``receive_messages(visibility_timeout=...)``: each visible message is handed out, made invisible
  for that long and given a new pop receipt, and its ``dequeue_count`` goes up by one; a message
  not deleted becomes visible again and is received again;
- ``update_message(message, visibility_timeout=...)`` and ``delete_message(message)`` need the pop
  receipt of the last receipt (ResourceNotFoundError otherwise, as the service answers 404).

The Azure SDK's exceptions are raised (azure-core, imported when one is), so the callers' error
handling is the one that meets Azure.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DEFAULT_TTL = 7 * 86400.0  # the service's default time to live


@dataclass
class QueueMessage:
    """A message as the SDK's ``QueueMessage`` shows it (times as UTC datetimes)."""

    id: str
    content: str
    inserted_on: datetime
    expires_on: datetime
    dequeue_count: int = 0
    pop_receipt: str | None = None
    next_visible_on: datetime | None = None


@dataclass
class _Stored:
    message: QueueMessage
    expires: float  # epoch seconds
    visible_at: float = 0.0
    receipt: str | None = None


def _not_found(what: str) -> Exception:
    from azure.core.exceptions import ResourceNotFoundError

    error = ResourceNotFoundError(message=what)
    error.status_code = 404
    return error


def _exists(what: str) -> Exception:
    from azure.core.exceptions import ResourceExistsError

    error = ResourceExistsError(message=what)
    error.status_code = 409
    return error


class LocalQueueService:
    """Every queue of the demo's storage account (module docstring)."""

    def __init__(self) -> None:
        self._queues: dict[str, OrderedDict[str, _Stored]] = {}
        self._lock = threading.Lock()

    def client(self, name: str, *_args: Any, **_kwargs: Any) -> LocalQueueClient:
        """A ``QueueClient`` for queue ``name`` (which may not exist yet)."""
        return LocalQueueClient(self, name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._queues)

    def close(self) -> None:
        """Nothing to release (the coordinator closes its ``Queues`` when it stops)."""

    def _queue(self, name: str) -> OrderedDict[str, _Stored]:
        queue = self._queues.get(name)
        if queue is None:
            raise _not_found(f"The specified queue {name} does not exist.")
        return queue


class LocalQueueClient:
    """``QueueClient`` for one queue of the local queue service."""

    def __init__(self, service: LocalQueueService, name: str) -> None:
        self.service, self.queue_name = service, name

    def create_queue(self, **_kwargs: Any) -> None:
        with self.service._lock:
            if self.queue_name in self.service._queues:
                raise _exists(f"The specified queue {self.queue_name} already exists.")
            self.service._queues[self.queue_name] = OrderedDict()

    def get_queue_properties(self, **_kwargs: Any) -> dict[str, Any]:
        with self.service._lock:
            queue = self.service._queue(self.queue_name)
            return {"name": self.queue_name, "approximate_message_count": len(queue), "metadata": {}}

    def send_message(self, content: Any, *, visibility_timeout: int | None = None,
                     time_to_live: int | None = None, **_kwargs: Any) -> QueueMessage:
        now = time.time()
        ttl = DEFAULT_TTL if time_to_live is None or time_to_live < 0 else float(time_to_live)
        message = QueueMessage(str(uuid.uuid4()), str(content), _utc(now), _utc(now + ttl))
        with self.service._lock:
            queue = self.service._queue(self.queue_name)
            queue[message.id] = _Stored(message, now + ttl, now + (visibility_timeout or 0))
        return message

    def receive_messages(self, *, messages_per_page: int | None = None, visibility_timeout: int | None = None,
                         max_messages: int | None = None, **_kwargs: Any) -> list[QueueMessage]:
        """The visible messages (up to ``max_messages``), each now invisible for ``visibility_timeout``
        seconds (default 30) with a new pop receipt and its dequeue count one higher."""
        now = time.time()
        hide = 30.0 if visibility_timeout is None else float(visibility_timeout)
        limit = max_messages or messages_per_page or 32
        out: list[QueueMessage] = []
        with self.service._lock:
            queue = self.service._queue(self.queue_name)
            for key in [k for k, s in queue.items() if s.expires <= now]:
                del queue[key]
            for stored in queue.values():
                if len(out) >= limit:
                    break
                if stored.visible_at > now:
                    continue
                stored.receipt = str(uuid.uuid4())
                stored.visible_at = now + hide
                m = stored.message
                m.dequeue_count += 1
                out.append(QueueMessage(m.id, m.content, m.inserted_on, m.expires_on, m.dequeue_count,
                                        stored.receipt, _utc(stored.visible_at)))
        return out

    def update_message(self, message: Any, pop_receipt: str | None = None, content: Any = None, *,
                       visibility_timeout: int | None = None, **_kwargs: Any) -> QueueMessage:
        """Keep a received message invisible ``visibility_timeout`` more seconds (a new receipt)."""
        now = time.time()
        with self.service._lock:
            stored = self._received(message, pop_receipt)
            stored.receipt = str(uuid.uuid4())
            stored.visible_at = now + float(visibility_timeout or 0)
            if content is not None:
                stored.message.content = str(content)
            m = stored.message
            return QueueMessage(m.id, m.content, m.inserted_on, m.expires_on, m.dequeue_count,
                                stored.receipt, _utc(stored.visible_at))

    def delete_message(self, message: Any, pop_receipt: str | None = None, **_kwargs: Any) -> None:
        with self.service._lock:
            self._received(message, pop_receipt)
            del self.service._queue(self.queue_name)[message.id if not isinstance(message, str) else message]

    def _received(self, message: Any, pop_receipt: str | None) -> _Stored:
        ident = message if isinstance(message, str) else message.id
        receipt = pop_receipt or getattr(message, "pop_receipt", None)
        stored = self.service._queue(self.queue_name).get(ident)
        if stored is None or stored.receipt is None or stored.receipt != receipt:
            raise _not_found("The specified message does not exist, or its pop receipt does not match.")
        return stored

    def close(self) -> None:
        """Nothing to release: the queues are in this process."""


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)
