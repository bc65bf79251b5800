"""Approval messages: an ``approve`` decision signed (signer.py) and put in its target VM's queue.

The message is the agents' Ed25519-signed CloudEvent (``approvals/signing.py``) with ``id`` = the
decision id, so an agent carries out one decision once however often it arrives, and ``VmName`` =
the target, so no other VM can use it. The queue is the target's, named by the agents' template
(``approvals.queue.queue_name``). ``ApprovalMessages.send`` makes one attempt, with no SDK retry and
timeouts of its own (``SEND_CALL``: a long read timeout, so that a queue that is only slow answers
the one request rather than receiving a second copy); queue_sender.py retries until the message
is sent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ....approvals.queue import queue_name
from ....errors import ConfigError
from ..azure.clients import Queues
from ..signer import Approval, Signer

log = logging.getLogger("se_forwarder.coordinator.sender")


SEND_CALL: dict[str, Any] = {"connection_timeout": 5, "read_timeout": 60, "retry_total": 0}


@dataclass(frozen=True)
class Sent:
    queue: str
    ok: bool
    problem: str = ""
    reached: bool = True  # the queue service answered (a refusal, or the message taken)


class ApprovalMessages:
    """Puts signed approval messages in the agents' queues."""

    def __init__(self, queues: Queues | Any, signer: Signer, template: str, ttl: float) -> None:
        self.queues, self.signer, self.template, self.ttl = queues, signer, template, ttl

    def queue_for(self, approval: Approval) -> str:
        return queue_name(self.template, approval.target.name, approval.target.vm_id)

    def send(self, approval: Approval, now: float) -> Sent:
        """One attempt to send ``approval``; what happened (never raises for a service failure)."""
        from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError

        try:
            name = self.queue_for(approval)
            text = self.signer.message(approval, now, self.ttl)
        except (ConfigError, ValueError) as exc:
            return Sent("", False, str(exc))
        try:
            self.queues.client(name).send_message(text, time_to_live=int(self.ttl), **SEND_CALL)
        except ResourceNotFoundError:
            return Sent(name, False, f"queue {name} does not exist (is the agent on {approval.target.name} "
                                     "configured with [approvals.queue] and running?)")
        except HttpResponseError as exc:
            return Sent(name, False, f"queue {name} refused the message: {_first_line(exc)}",
                        reached=exc.status_code is not None and exc.status_code < 500)
        except (AzureError, ConfigError, OSError) as exc:
            return Sent(name, False, f"cannot send to queue {name}: {_first_line(exc)}", reached=False)
        return Sent(name, True)


def _first_line(exc: BaseException) -> Any:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
