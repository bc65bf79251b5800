"""The coordinator's alerts to PagerDuty (Events API v2) or Opsgenie (Alert API): one ``PagerHook`` per
``[[notify]]`` pager (config/notify.py).

An alert (view/alerts.py) is triggered (created) when it opens and resolved (closed) when it
clears, under the dedup key (alias) ``se-forwarder/<coordinator name>/<alert id>``, so two
coordinators sharing a service stay apart, and a trigger or resolve sent twice changes nothing on
the service's side. The bodies are se_forwarder.notify's pure builders (pagerduty.py, opsgenie.py):
PagerDuty's severity is the alert's, Opsgenie's priority follows it (``PRIORITY``).

Durable without an outbox: the hook keeps, per alert id, the actions not yet accepted (a trigger,
a resolve, or both in that order: an alert that opened and cleared before either was sent is
still triggered and resolved; a change undone before it was sent is dropped) and what the service
last accepted; it sends them one at a time, in the order they arose. A request that fails (no answer,
408, 429, 5xx; 401, 403 and 404 too, which a fixed key or integration cures) is retried with
backoff (``Backoff`` 1 s doubling to 60 s, with jitter; a ``Retry-After`` is the floor), for as
long as it takes: nothing is dropped but a request the service says is invalid (400, 422), which
no retry could change. What a restart loses (the hook's memory) comes back from where the alerts
come from: the fold's are derived again and the service's parts raise theirs again, and every
alert is sent in its current state once after a start (view/alerts.py). TLS is always verified
(``ca_file`` adds a CA); the key is never logged.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from ....backoff import Backoff
from ....notify import opsgenie, pagerduty
from ....validation import public_url
from ..config.notify import NotifySettings
from ..view.alerts import Alert, Derived

log = logging.getLogger("se_forwarder.coordinator.notify")

PRIORITY = {"critical": "P1", "error": "P2", "warning": "P3", "info": "P5"}
TIMEOUT = 10.0  # s per request
RETRIED = frozenset({401, 403, 404, 408, 425, 429})  # besides 5xx: a cure may come (module docstring)
SAY_EVERY = 300.0  # s between two warnings of a pager that keeps failing
TAG = "se-forwarder-coordinator"


def kind_of(ident: str) -> str:
    """An alert id is its kind, or ``<kind>/<what>`` (view/alerts.py)."""
    return ident.split("/", 1)[0]


class PagerHook:
    """One pager (module docstring): ``offer`` the alerts' state, a thread tells the service."""

    def __init__(self, settings: NotifySettings, key: str, coordinator: str) -> None:
        import requests

        self.settings, self.coordinator, self._key = settings, coordinator, key
        self.label = f"{settings.format} {public_url(settings.url)}"
        self.session = requests.Session()
        self.session.verify = settings.ca_file or True
        self._pending: dict[str, list[str]] = {}  # alert id -> actions not yet accepted, oldest first
        self._words: dict[str, Alert] = {}  # alert id -> its latest words
        self._told: dict[str, str] = {}  # alert id -> the last action the service accepted
        self._lock, self._wake, self.stopping = threading.Lock(), threading.Event(), threading.Event()
        self.sent = self.dropped = self.failures = 0
        self._said = 0.0
        self.thread = threading.Thread(target=self._run, name=f"notify-{settings.format}", daemon=True)

    def start(self) -> PagerHook:
        self.thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Send what waits for up to ``timeout`` seconds, then stop."""
        deadline = time.monotonic() + timeout
        while self.waiting() and time.monotonic() < deadline and self.thread.is_alive():
            time.sleep(0.05)
        self.stopping.set()
        self._wake.set()
        if self.thread.ident is not None:
            self.thread.join(max(0.1, deadline - time.monotonic()) + TIMEOUT)
        self.session.close()

    def waiting(self) -> int:
        with self._lock:
            return sum(len(actions) for actions in self._pending.values())

    def forget(self) -> None:
        """Forget what the service accepted: every alert offered next is sent in its state once."""
        with self._lock:
            self._told.clear()

    def dedup_key(self, ident: str) -> str:
        return f"se-forwarder/{self.coordinator}/{ident}"

    # -- what to tell ---------------------------------------------------------------------------

    def offer(self, alerts: Derived) -> None:
        """The alerts' state now: each open one triggered, each resolved one resolved, once."""
        with self._lock:
            for ident, alert in alerts.open.items():
                if alert.kind in self.settings.alerts:
                    self._words[ident] = alert
                    self._want(ident, "trigger")
            for ident in alerts.resolved:
                if kind_of(ident) in self.settings.alerts:
                    self._want(ident, "resolve")
            known = set(alerts.open) | set(alerts.resolved) | set(self._pending)
            for ident in [i for i in self._told if i not in known]:  # gone from the fold: forgotten
                del self._told[ident]
                self._words.pop(ident, None)
        self._wake.set()

    def _want(self, ident: str, action: str) -> None:
        pending = self._pending.get(ident, [])
        told = self._told.get(ident)
        if (pending[-1] if pending else told) == action:
            return
        before = pending[-2] if len(pending) > 1 else told  # the state the last unsent change left
        if pending and before == action:
            pending.pop()  # that change is undone before it was sent
        else:
            pending.append(action)
        if pending:
            self._pending[ident] = pending
        else:
            self._pending.pop(ident, None)

    def _next(self) -> tuple[str, str, Alert | None] | None:
        with self._lock:
            for ident, actions in self._pending.items():
                return ident, actions[0], self._words.get(ident)
        return None

    def _done(self, ident: str, action: str, accepted: bool) -> None:
        with self._lock:
            actions = self._pending.get(ident)
            if actions and actions[0] == action:
                actions.pop(0)
                if not actions:
                    del self._pending[ident]
            if accepted:
                self._told[ident] = action

    # -- telling it -----------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = Backoff(base=1.0, cap=60.0)
        while not self.stopping.is_set():
            item = self._next()
            if item is None:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            ident, action, alert = item
            status, why, after = self._send(ident, action, alert)
            if status is not None and (200 <= status < 300 or self._nothing_to_close(status, why, action)):
                self.sent += 1
                backoff.reset()
                self._done(ident, action, True)
                log.info("%s: %s %s", self.label, action, ident)
            elif status in (400, 422):
                self.dropped += 1
                self._done(ident, action, False)
                log.error("%s refused the %s of alert %s as invalid: %s", self.label, action, ident, why)
            else:
                self.failures += 1
                delay = backoff.next_delay(after)
                if time.monotonic() - self._said >= SAY_EVERY or backoff.attempt == 1:
                    self._said = time.monotonic()
                    log.warning("%s: %s; the %s of alert %s is retried in %.0f s (and so on until it is "
                                "accepted)", self.label, why, action, ident, delay)
                self.stopping.wait(delay)

    def _send(self, ident: str, action: str, alert: Alert | None) -> tuple[int | None, str, float | None]:
        """(HTTP status or None, why in one line, Retry-After) of one request."""
        import requests

        url, headers, body = self.request(ident, action, alert)
        try:
            reply = self.session.post(url, data=json.dumps(body, separators=(",", ":")).encode(),
                                      headers={"Content-Type": "application/json", **headers},
                                      timeout=TIMEOUT)
        except requests.RequestException as exc:
            return None, type(exc).__name__, None
        text = " ".join(reply.text.split())[:200].replace(self._key, "***")
        return reply.status_code, f"HTTP {reply.status_code}" + (f" {text}" if text else ""), \
            _seconds(reply.headers.get("Retry-After"))

    def _nothing_to_close(self, status: int, why: str, action: str) -> bool:
        """Opsgenie's answer to closing an alert it does not have: nothing is left open."""
        return (self.settings.format == "opsgenie" and action == "resolve" and status == 404
                and "not exist" in why.lower())

    def request(self, ident: str, action: str, alert: Alert | None
                ) -> tuple[str, dict[str, str], dict[str, Any]]:
        """(URL, headers, body) of one trigger or resolve of alert ``ident``."""
        key = self.dedup_key(ident)
        if self.settings.format == "pagerduty":
            if action == "resolve" or alert is None:
                return self.settings.url, {}, pagerduty.resolve(self._key, key)
            now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            return self.settings.url, {}, pagerduty.trigger(
                self._key, key, alert.summary, f"se-forwarder coordinator {self.coordinator}",
                alert.severity, timestamp=now, component=alert.kind, group=self.coordinator,
                event_class=alert.kind, custom_details={**alert.details, "Alert": ident})
        auth = {"Authorization": opsgenie.authorization(self._key)}
        if action == "resolve" or alert is None:
            return self.settings.url + opsgenie.close_path(key), auth, opsgenie.close(note="cleared")
        tags = [TAG, alert.kind, *self.settings.tags]
        return self.settings.url + opsgenie.CREATE_PATH, auth, opsgenie.create(
            key, alert.summary, priority=PRIORITY[alert.severity], description=alert.summary,
            entity=f"coordinator {self.coordinator}", tags=tags, details={**alert.details, "Alert": ident})


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
