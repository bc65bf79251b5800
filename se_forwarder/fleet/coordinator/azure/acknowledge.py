"""The Maintenance ``acknowledge``, posted with the coordinator's identity, off the service's loop.

No generated client has the operation (docs/azure-feed.md), so it is a POST through
``azure-mgmt-core``'s ARM pipeline (ARM's bearer policy, azure-core's retries, TLS verified with
``[azure] ca_file`` or the system's roots). One event, or several events of one resource at once
(``AcknowledgeList``)::

    POST <the scheduled event's ARM id>/acknowledge?api-version=2025-11-01           (no body)
    POST <the resource's ARM id>/providers/Microsoft.Maintenance/scheduledevents?api-version=2025-11-01
         {"value": ["<EventId>", ...]}
    200 {"value": "Successfully Approved"}

``Acknowledger`` posts on a thread of its own (never the service's loop), one call at a time in
order, each through ``azure_graph.arm_call``: it ends at ``DEADLINE`` seconds (the SDK's retries
included; a request that got no answer by then is left to end on its own) and says whether ARM
answered (reach.py, ``arm``). A batch (``submit``: the events of one resource approved in one
decision pass, input/azure.py) of one event takes the single form, of several the list form.
Azure's spec does not say what the list form does when one of its events cannot be acknowledged,
so when it answers 404 or another 4xx but 401, 403 and 429, each event is posted on its own and
gets its own answer. For every event it hands ``(approval id, outcome, reason, term)`` to
``done``; the service publishes that as the approval's ``acknowledge`` record while the term
lasts (decide/arm_path.py).

``outcome`` is a pure function of what came back: ``approved`` (2xx), ``unauthorized`` (401),
``forbidden`` (403 ``AuthorizationFailed`` or any other 403: the identity lacks the role),
``disallowed-by-policy`` (403 ``RequestDisallowedByPolicy``: an Azure Policy assignment denies it,
whatever the role; its reason names the policy and its assignment when ARM gives them),
``not-found`` (404: the event is not, or no longer, the resource's), ``refused`` (another 4xx but
429), ``failed`` (429 after the retries, 5xx, no answer by the deadline). An acknowledge approves
the event itself (there is no message an agent could act on twice), so one that got no answer may
be posted again: by the approval's retry after ``echo_timeout``, once the event is still
Scheduled (azure_paths.arm_target).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ....sinks.azure_common import scrub
from ..config.azure import AzureSettings
from ..decide.arm_path import ACK_API_VERSION
from .graph import ARM_PART, ERROR_LIMIT, arm_call, arm_pipeline
from .reach import Reach, describe_error

log = logging.getLogger("se_forwarder.coordinator.azure")

TIMEOUT = 30  # s the SDK waits for an answer
DEADLINE = 45.0  # s for one acknowledge, retries included
Done = Callable[[str, str, str, int], None]  # (approval id, outcome, reason, term)
EVENTS = "/providers/Microsoft.Maintenance/scheduledevents"
ALL_OR_NONE = ("approved", "forbidden", "disallowed-by-policy", "unauthorized", "failed")  # the list's
ROLE = "Scheduled Events Contributor"


@dataclass(frozen=True)
class Ack:
    """One event of a batch: the approval that approves it, and the event's ARM id."""

    approval_id: str
    event_id: str
    resource_id: str  # <the resource>/providers/Microsoft.Maintenance/scheduledevents/<EventId>

    @property
    def owner(self) -> str:
        """The resource the event is filed under (the VM, scale set or availability set)."""
        cut = self.resource_id.lower().rfind(EVENTS.lower() + "/")
        return self.resource_id[:cut] if cut > 0 else self.resource_id


def single_path(resource_id: str) -> str:
    return f"{resource_id}/acknowledge?api-version={ACK_API_VERSION}"


def list_path(owner: str) -> str:
    return f"{owner}{EVENTS}?api-version={ACK_API_VERSION}"


def outcome(status: int | None, body: Any, error: str = "") -> tuple[str, str]:
    """(outcome, one line for people) of one acknowledge (module docstring)."""
    if status is None:
        return "failed", f"no answer from ARM: {error}"[:400]
    inner: dict[str, Any] = {}
    if isinstance(body, dict):
        nested = body.get("error")
        inner = nested if isinstance(nested, dict) else body
    code, message = inner.get("code"), inner.get("message") or inner.get("value")
    said = " ".join(str(x) for x in (code, message) if x)
    detail = ": " + scrub(said)[:300] if said else ""
    if 200 <= status < 300:
        return "approved", f"ARM answered {status}{detail}"
    if status == 403 and code == "RequestDisallowedByPolicy":
        return "disallowed-by-policy", f"ARM answered 403 RequestDisallowedByPolicy: {policy_named(inner)}"
    kind = {401: "unauthorized", 403: "forbidden", 404: "not-found"}.get(status)
    if kind is None:
        kind = "refused" if 400 <= status < 500 and status != 429 else "failed"
    hint = f"; give the coordinator's identity the {ROLE} role" if kind == "forbidden" else ""
    return kind, f"ARM answered {status}{detail}"[:360] + hint


def policy_named(error: dict[str, Any]) -> str:
    """Which Azure Policy denied the request, from ARM's ``RequestDisallowedByPolicy`` error: its
    ``PolicyViolation`` entry (definition and assignment names, scope), else its message."""
    for item in error.get("additionalInfo") or ():
        info = item.get("info") if isinstance(item, dict) and item.get("type") == "PolicyViolation" else None
        if isinstance(info, dict):
            definition = info.get("policyDefinitionDisplayName") or info.get("policyDefinitionName")
            assignment = info.get("policyAssignmentDisplayName") or info.get("policyAssignmentName")
            scope = info.get("policyAssignmentScope")
            named = f"Azure Policy {scrub(str(definition))[:120]!r}" if definition else "an Azure Policy"
            if assignment:
                at = f" at {scope}" if scope else ""
                named += f" (assignment {scrub(str(assignment))[:120]!r}{at})"
            return f"{named} denies acknowledging; no role fixes that: exempt the coordinator or change it"
    message = scrub(str(error.get("message") or ""))[:300]
    return f"an Azure Policy denies acknowledging ({message}); no role fixes that: exempt the coordinator " \
           "or change it"


class Acknowledger:
    """Posts acknowledges one call after another on its own thread (module docstring)."""

    def __init__(self, settings: AzureSettings, credential: Any, done: Done,
                 reach: Reach | None = None) -> None:
        self.settings, self.credential, self.done = settings, credential, done
        self.reach = reach or Reach(ARM_PART)
        self._pipeline: Any = None
        self._queue: queue.Queue[tuple[tuple[Ack, ...], int] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="coordinator-acknowledge", daemon=True)
        self.posted = 0  # calls made

    def start(self) -> None:
        self._thread.start()

    def submit(self, batch: Sequence[Ack], term: int) -> None:
        """Acknowledge ``batch`` (events of one resource) while ``term`` lasts."""
        if batch:
            self._queue.put((tuple(batch), term))

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(DEADLINE + 5)
        if self._pipeline is not None:
            self._pipeline.close()

    def post(self, path: str, body: Any = None) -> tuple[str, str]:
        """One call (``path`` with its api-version; ``body`` for the list form); its outcome (module
        docstring). Never raises."""
        from azure.core.rest import HttpRequest

        try:
            if self._pipeline is None:
                self._pipeline = arm_pipeline(self.settings, self.credential, retry_total=2)
            request = HttpRequest("POST", self._pipeline.format_url(path), json=body)
            send = partial(self._pipeline.send_request, request, connection_timeout=10, read_timeout=TIMEOUT)
            response = arm_call(self.reach, send, "acknowledging a scheduled event", DEADLINE)
        except Exception as exc:  # noqa: BLE001 - one line, an outcome like any other
            return outcome(None, None, describe_error(exc, ERROR_LIMIT))
        self.posted += 1
        try:
            answer = response.json()
        except ValueError:
            answer = None
        return outcome(response.status_code, answer)

    def acknowledge(self, batch: Sequence[Ack]) -> list[tuple[Ack, str, str]]:
        """Each event of ``batch`` with its outcome and reason: one call for the batch, or one per
        event when the list form's answer is about one of them (module docstring)."""
        if len(batch) == 1:
            return [(batch[0], *self.post(single_path(batch[0].resource_id)))]
        code, reason = self.post(list_path(batch[0].owner), {"value": [a.event_id for a in batch]})
        if code in ALL_OR_NONE:
            return [(ack, code, reason) for ack in batch]
        log.info("AcknowledgeList of %d events answered %s (%s); acknowledging each on its own", len(batch),
                 code, reason)
        return [(ack, *self.post(single_path(ack.resource_id))) for ack in batch]

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            batch, term = item
            for ack, code, reason in self.acknowledge(batch):
                level = logging.INFO if code == "approved" else logging.WARNING
                log.log(level, "acknowledge %s (%s): %s (%s)", ack.event_id[:128], ack.approval_id[:200],
                        code, reason)
                self.done(ack.approval_id, code, reason, term)
