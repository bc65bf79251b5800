"""Approval messages: an ``approve`` decision signed (``Signer``) and put in its target VM's queue.

The message is the approvals issue's signed CloudEvent (``approvals/signing.py``) with ``id`` = the
decision id, so an agent carries out one decision once however often it arrives, and ``VmName`` =
the target, so no other VM can use it. The queue is the target's, named by the agents' template
(``approvals.queue.queue_name``). A failed send is logged and counted, never retried here: the
decision stays, and the core sends the approval to another affected VM when no ``approved`` echo
comes within ``echo_timeout``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ...approvals import signing
from ...approvals.messages import MAX_TEXT
from ...approvals.queue import KeySource, queue_name
from ...errors import ConfigError
from .access import Queues
from .events import Decision

log = logging.getLogger("se_forwarder.coordinator.sender")


class Signer(Protocol):
    """What the sender needs from a signing scheme: the queue message text of an approval.

    The only place a scheme is chosen is ``make_signer``; the sender and the service know nothing
    else about keys or algorithms.
    """

    def message(self, decision: Decision, now: float, ttl: float) -> str: ...


def make_signer(key_file: str, source: str) -> Signer:
    """The signer for ``[signing] key_file``: the agents' shared-key scheme (approvals/signing.py)."""
    return SharedKeySigner(key_file, source)


class SharedKeySigner:
    """Signs approval messages with the first key of ``[signing] key_file`` (re-read when it changes)."""

    def __init__(self, key_file: str, source: str) -> None:
        self.source = source
        self._keys = KeySource(None, key_file)

    def message(self, decision: Decision, now: float, ttl: float) -> str:
        """The queue message text for ``decision`` (an approve with a target), valid ``ttl`` s."""
        assert decision.event_id is not None and decision.target is not None
        moment = datetime.fromtimestamp(now, UTC)
        message = signing.new_message(
            decision.event_id, source=self.source, key=self._keys.keys()[0],
            expires_at=moment + timedelta(seconds=ttl), reason=decision.reason[:MAX_TEXT],
            vm_name=decision.target.name, now=moment, message_id=decision.id,
        )
        return signing.encode(message)


@dataclass(frozen=True)
class Sent:
    queue: str
    ok: bool
    problem: str = ""


class Sender:
    """Puts signed approval messages in the agents' queues."""

    def __init__(self, queues: Queues, signer: Signer, template: str, ttl: float) -> None:
        self.queues, self.signer, self.template, self.ttl = queues, signer, template, ttl

    def queue_for(self, decision: Decision) -> str:
        assert decision.target is not None
        return queue_name(self.template, decision.target.name, decision.target.vm_id)

    def send(self, decision: Decision, now: float) -> Sent:
        """Send the approval of ``decision``; what happened (never raises for a service failure)."""
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        try:
            name = self.queue_for(decision)
            text = self.signer.message(decision, now, self.ttl)
        except ConfigError as exc:
            return Sent("", False, str(exc))
        try:
            self.queues.client(name).send_message(text, time_to_live=int(self.ttl))
        except ResourceNotFoundError:
            return Sent(name, False, f"queue {name} does not exist (is the agent on "
                                     f"{decision.target.name if decision.target else '?'} configured "
                                     "with [approvals.queue] and running?)")
        except (AzureError, ConfigError, OSError) as exc:
            return Sent(name, False, f"cannot send to queue {name}: {_first_line(exc)}")
        return Sent(name, True)


def _first_line(exc: BaseException) -> Any:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
