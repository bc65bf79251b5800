"""The Maintenance ``acknowledge``, posted with the coordinator's identity, off the service's loop.

No generated client has the operation (docs/azure-feed.md), so it is a POST through
``azure-mgmt-core``'s ARM pipeline (ARM's bearer policy, azure-core's retries, TLS verified with
``[azure] ca_file`` or the system's roots)::

    POST <the scheduled event's ARM id>/acknowledge?api-version=2025-11-01      (no body)
    200 {"value": "Successfully Approved"}

``Acknowledger`` posts on a thread of its own (never the service's loop), one at a time in order,
each through ``azure_graph.arm_call``: it ends at ``DEADLINE`` seconds (the SDK's retries
included; a request that got no answer by then is left to end on its own) and says whether ARM
answered (reach.py, ``arm``). It hands ``(approval id, outcome, reason, term)`` to ``done``; the
service publishes that as an ``acknowledge`` record while the term lasts (decide/arm_path.py).
``outcome`` is a pure function of what came back: ``approved`` (2xx), ``unauthorized`` (401),
``forbidden`` (403: the identity lacks the role), ``not-found`` (404: the event is not, or no
longer, the resource's), ``refused`` (another 4xx but 429), ``failed`` (429 after the retries,
5xx, no answer by the deadline). An acknowledge approves the event itself (there is no message an
agent could act on twice), so one that got no answer may be posted again: by the approval's retry
after ``echo_timeout``, once the event is still Scheduled (azure_paths.arm_target).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from ....sinks.azure_common import scrub
from ..config.azure import AzureSettings
from .graph import ARM_PART, ERROR_LIMIT, arm_call, arm_pipeline
from .reach import Reach, describe_error

log = logging.getLogger("se_forwarder.coordinator.azure")

TIMEOUT = 30  # s the SDK waits for an answer
DEADLINE = 45.0  # s for one acknowledge, retries included
Done = Callable[[str, str, str, int], None]  # (approval id, outcome, reason, term)


def outcome(status: int | None, body: Any, error: str = "") -> tuple[str, str]:
    """(outcome, one line for people) of one acknowledge (module docstring)."""
    if status is None:
        return "failed", f"no answer from ARM: {error}"[:400]
    detail = ""
    if isinstance(body, dict):
        nested = body.get("error")
        inner: dict[str, Any] = nested if isinstance(nested, dict) else body
        code, message = inner.get("code"), inner.get("message") or inner.get("value")
        said = " ".join(str(x) for x in (code, message) if x)
        detail = ": " + scrub(said)[:300] if said else ""
    if 200 <= status < 300:
        return "approved", f"ARM answered {status}{detail}"
    kind = {401: "unauthorized", 403: "forbidden", 404: "not-found"}.get(status)
    if kind is None:
        kind = "refused" if 400 <= status < 500 and status != 429 else "failed"
    return kind, f"ARM answered {status}{detail}"


class Acknowledger:
    """Posts acknowledges one after another on its own thread (module docstring)."""

    def __init__(self, settings: AzureSettings, credential: Any, done: Done,
                 reach: Reach | None = None) -> None:
        self.settings, self.credential, self.done = settings, credential, done
        self.reach = reach or Reach(ARM_PART)
        self._pipeline: Any = None
        self._queue: queue.Queue[tuple[str, str, int] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="coordinator-acknowledge", daemon=True)
        self.posted = 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, approval_id: str, path: str, term: int) -> None:
        self._queue.put((approval_id, path, term))

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(DEADLINE + 5)
        if self._pipeline is not None:
            self._pipeline.close()

    def post(self, path: str) -> tuple[str, str]:
        """One acknowledge; its outcome (module docstring). Never raises."""
        from azure.core.rest import HttpRequest

        try:
            if self._pipeline is None:
                self._pipeline = arm_pipeline(self.settings, self.credential, retry_total=2)
            request = HttpRequest("POST", self._pipeline.format_url(path))
            send = partial(self._pipeline.send_request, request, connection_timeout=10, read_timeout=TIMEOUT)
            response = arm_call(self.reach, send, "acknowledging a scheduled event", DEADLINE)
        except Exception as exc:  # noqa: BLE001 - one line, an outcome like any other
            return outcome(None, None, describe_error(exc, ERROR_LIMIT))
        try:
            body = response.json()
        except ValueError:
            body = None
        return outcome(response.status_code, body)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            approval_id, path, term = item
            code, reason = self.post(path)
            self.posted += 1
            log.log(logging.INFO if code == "approved" else logging.WARNING, "acknowledge %s: %s (%s)",
                    approval_id[:200], code, reason)
            self.done(approval_id, code, reason, term)
