"""A local stand-in for a Teams Workflows webhook or a Slack incoming webhook, over real HTTP.

It checks every POST against the documented payload shape (``shapes.py``) and answers as the
service does: Teams Workflows ``202 Accepted`` with an empty body; Slack ``200`` with the body
``ok``; a body of the wrong shape gets Slack's ``400 invalid_payload`` or a Teams-style 400 with a
JSON error, and the problems are kept in ``errors``. Scripted replies (``script(429, ...)``) come
first, as with the CloudEvents receiver.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.notify.shapes import slack_problems, teams_problems
from tests.support.receiver import Receiver, Reply, Request

SLACK_PATH = "/services/T0AB1CD2E/B0AB12CDE3F/Xq7sK2pL9vR4tY8wZ1mN6bC3"
SLACK_TOKEN = "Xq7sK2pL9vR4tY8wZ1mN6bC3"
TEAMS_PATH = "/workflows/4f1c0d9a3b2e4c5d8e7f6a5b4c3d2e1f/triggers/manual/paths/invoke"
TEAMS_SIG = "q1W2e3R4t5Y6u7I8o9P0a1S2d3F4g5H6j7K8l9Z0x1C"
TEAMS_QUERY = f"?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={TEAMS_SIG}"


class ChatReceiver(Receiver):
    def __init__(self, fmt: str, **kwargs: Any) -> None:
        super().__init__(path=SLACK_PATH if fmt == "slack" else TEAMS_PATH, **kwargs)
        self.format = fmt
        self.respond_with(self._answer)

    @property
    def url(self) -> str:
        base = super().url
        return base + TEAMS_QUERY if self.format == "teams" else base

    def messages(self) -> list[dict]:
        """The bodies the service accepted, in arrival order."""
        return [json.loads(r.body) for r in self.accepted()]

    def _parse(self, request: Request) -> None:
        request.mode = self.format
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type != "application/json":
            self.errors.append(f"content-type {content_type!r}, not application/json")
        if any(k.startswith(("webhook-", "ce-")) for k in request.headers):
            self.errors.append(f"CloudEvents or Standard Webhooks headers sent: {sorted(request.headers)}")
        try:
            body = json.loads(request.body)
        except ValueError as exc:
            self.errors.append(f"not JSON: {exc}")
            body = None
        check = slack_problems if self.format == "slack" else teams_problems
        problems = check(body)
        self.errors += problems
        request.verified_with = [] if problems else [0]  # 0: the shape check passed

    def _answer(self, request: Request) -> Reply | None:
        if not request.verified_with:
            if self.format == "slack":
                return Reply(400, {"Content-Type": "text/html"}, b"invalid_payload")
            error = {"error": {"code": "InvalidRequestContent", "message": "card does not parse"}}
            return Reply(400, {"Content-Type": "application/json"}, json.dumps(error).encode())
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.format == "slack":
            return Reply(200, {"Content-Type": "text/html"}, b"ok")
        return Reply(202)


def titles(receiver: ChatReceiver) -> list[str]:
    out = []
    for body in receiver.messages():
        out.append(body["text"] if receiver.format == "slack"
                   else body["attachments"][0]["content"]["body"][0]["text"])
    return out


def wait_messages(receiver: ChatReceiver, count: int, timeout: float = 15) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(receiver.accepted()) < count:
        time.sleep(0.05)
    return titles(receiver)
