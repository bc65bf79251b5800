"""The coordinator's chat notifications: one Teams or Slack message per fleet event, not per VM.

Configured by ``[[notify]]`` (config/notify.py).

What is sent, once per fleet event and never once per VM: every ``approve`` (its first attempt; a
retry to another VM of the same event is not a new message), the first ``defer`` of an event (not
each change of its reason), every ``breach``, ``pause``, ``resume``, ``hold`` and ``release``, each
gate that closes and opens again (``gate``, output/chat_gates.py), and what Azure answered each
approval through ``acknowledge`` (``acknowledge``, with ``[azure]``); and per maintenance event
(EventId), however many VMs report it, one message when it is first Scheduled, one when it first
Started and one when it completed (``completed`` also selects the message of a canceled event),
naming the VMs it affects (output/chat_stages.py); and the alerts the fold derives or a running part
raised (view/alerts.py: ``recovery-timeout``, ...) named in ``alerts``, one message when each opens
and one when it is resolved (``NewAlerts``; after a start, or a takeover, those open are said once
more). The lists may not all be empty. Only what happens while this instance acts is sent (a
standby sends nothing; decisions and events folded from the hub from before this process started
are not sent). The text is se_forwarder.notify's.

Never blocking decisions: ``NewDecisions`` and ``EventStages`` take what is new from the fold on the
service thread (a look once a second, through ``Service.submit``); each hook has its own
queue (at most ``QUEUE_MAX`` messages; when full the oldest is dropped with a warning) and thread.
A message is retried after 408, 429, 5xx and connection errors, with backoff (a ``Retry-After`` is
honoured) for up to ``GIVE_UP_AFTER`` seconds; any other answer drops it with one log line
(401/403/404/410: the hook is deleted, disabled or revoked). Slack takes about one message a
second per hook, so a Slack hook's messages are spaced by a second. TLS is always verified; the URL
is logged only as se_forwarder.validation.public_url shows it.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .... import notify
from ....backoff import Backoff
from ....notify.describe import ATTENTION, GOOD
from ....validation import public_url
from ..config.notify import NotifySettings, hook_url
from ..config.policy import Policy
from ..fold.state import DecisionRecord, FleetState
from ..schema import DECISION_PREFIX
from ..view.alerts import Alert, Derived, as_data, derive, merged
from .chat_gates import GateChanges
from .chat_stages import EventStages

log = logging.getLogger("se_forwarder.coordinator.notify")

QUEUE_MAX = 1000
GIVE_UP_AFTER = 600.0  # s a message is retried before it is dropped
TIMEOUT = 10.0  # s per POST
SLACK_INTERVAL = 1.0
LOOK_EVERY = 1.0  # s between looks at the fold
RETRIED = frozenset({408, 425, 429})


def wanted(event: Mapping[str, Any], kinds: Iterable[str]) -> bool:
    """One message per fleet event: approve's first attempt, an event's first defer, every other kind."""
    kind = str(event.get("type", ""))[len(DECISION_PREFIX):]
    if kind not in kinds:
        return False
    data: dict[str, Any] = event["data"] if isinstance(event.get("data"), dict) else {}
    if kind == "approve":
        return data.get("Attempt") in (None, 1)
    if kind == "defer":
        return str(event.get("id", "")).rsplit("/", 1)[-1].split("-", 1)[0] == "1"
    return True


def wants(settings: NotifySettings, event: Mapping[str, Any]) -> bool:
    """Whether a hook with ``settings`` takes ``event``: a decision as ``wanted`` says, a fleet
    event's stage when ``events`` names it (``completed`` also takes ``canceled``), an alert when
    ``alerts`` names its kind."""
    kind = str(event.get("type", ""))
    if kind == ALERT_TYPE:
        data = event.get("data")
        return isinstance(data, dict) and data.get("Kind") in settings.alerts
    if kind.startswith(DECISION_PREFIX):
        return wanted(event, settings.decisions)
    stage = kind.rsplit(".", 1)[-1]
    return ("completed" if stage == "canceled" else stage) in settings.events


def as_event(record: DecisionRecord) -> dict[str, Any]:
    """A folded decision as the structured CloudEvent it came from (what notify.describe reads)."""
    return {"specversion": "1.0", "type": DECISION_PREFIX + record.kind, "id": record.id,
            "subject": record.data.get("EventId") or record.data.get("Scope") or "",
            "time": datetime.fromtimestamp(record.time, UTC).isoformat().replace("+00:00", "Z"),
            "datacontenttype": "application/json", "data": record.data}


class NewDecisions:
    """The decisions of the fold not seen before; those made since ``since`` while acting come out."""

    def __init__(self, since: float) -> None:
        self.since = since
        self.seen: set[str] = set()

    def take(self, state: FleetState, acting: bool) -> list[dict[str, Any]]:
        """Run on the service thread (the fold is its own)."""
        current = state.decisions
        fresh = [r for key, r in current.items() if key not in self.seen]
        self.seen.update(r.id for r in fresh)
        if len(self.seen) > 2 * len(current) + 1000:  # forget what prune dropped
            self.seen.intersection_update(current.keys())
        if not acting:
            return []
        return [as_event(r) for r in sorted(fresh, key=lambda r: (r.time, r.id)) if r.time >= self.since]


ALERT_TYPE = DECISION_PREFIX + "alert"  # chat only: never published, never folded (schema.DECISION_KINDS)


class NewAlerts:
    """The fold's alerts that opened or were resolved since the last look, as chat events."""

    def __init__(self) -> None:
        self.open: dict[str, Alert] = {}
        self.acted = False

    def take(self, derived: Derived, acting: bool, now: float) -> list[dict[str, Any]]:
        if not acting:
            self.open, self.acted = {}, False
            return []
        before = self.open if self.acted else {}
        self.open, self.acted = dict(derived.open), True
        out = [_alert_event(a, "open", now) for ident, a in sorted(self.open.items()) if ident not in before]
        out += [_alert_event(a, "resolved", now) for ident, a in sorted(before.items())
                if ident not in self.open]
        return out


def alert_body(fmt: str, event: Mapping[str, Any]) -> dict[str, Any]:
    """The webhook body of an alert's chat event: ``Alert (<kind>): <summary>`` or ``Resolved ...``."""
    data = event["data"]
    done = data["State"] == "resolved"
    facts = [(str(k)[:60], str(v)[:500]) for k, v in list(data["details"].items())[:6]]
    title = f"{'Resolved' if done else 'Alert'} ({data['Kind']}): {data['summary']}"[:300]
    notice = notify.Notice(title=title, facts=facts, footer=f"se-forwarder · {str(event['id'])[:200]}",
                           tone=GOOD if done else ATTENTION)
    return notify.teams.payload(notice) if fmt == "teams" else notify.slack.payload(notice)


def _alert_event(alert: Alert, state: str, now: float) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z")
    return {"specversion": "1.0", "type": ALERT_TYPE, "id": f"{alert.id}/{state}/{stamp}",
            "subject": alert.id, "time": stamp, "datacontenttype": "application/json",
            "data": {**as_data(alert), "Kind": alert.kind, "State": state}}


class ChatHook:
    """One hook: a bounded queue and a thread that posts its messages in order, with retries."""

    def __init__(self, settings: NotifySettings, url: str) -> None:
        import requests

        self.settings, self.url = settings, url
        self.label = f"{settings.format} hook {public_url(url)}"
        self.session = requests.Session()
        self.queue: queue.Queue[tuple[dict[str, Any], datetime | None]] = queue.Queue(QUEUE_MAX)
        self.stopping = threading.Event()
        self.sent = self.dropped = 0
        self._last_post = 0.0
        self.thread = threading.Thread(target=self._run, name=f"notify-{settings.format}", daemon=True)

    def start(self) -> ChatHook:
        self.thread.start()
        return self

    def offer(self, event: dict[str, Any], started_at: datetime | None = None) -> None:
        """Queue ``event`` if this hook wants it; never blocks (the oldest message makes room).
        ``started_at``: when a completed event started (its message says how long it took)."""
        if not wants(self.settings, event):
            return
        while True:
            try:
                self.queue.put_nowait((event, started_at))
                return
            except queue.Full:
                try:
                    lost, _ = self.queue.get_nowait()
                except queue.Empty:
                    continue
                self.dropped += 1
                log.warning("%s: %d messages waiting; dropped the oldest (%s)", self.label, QUEUE_MAX,
                            lost.get("id"))

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued for up to ``timeout`` seconds, then stop."""
        self.stopping.set()
        if self.thread.ident is not None:
            self.thread.join(timeout)
        self.session.close()

    def _run(self) -> None:
        while True:
            try:
                event, started_at = self.queue.get(timeout=0.2)
            except queue.Empty:
                if self.stopping.is_set():
                    return
                continue
            self._deliver(event, started_at)

    def _deliver(self, event: dict[str, Any], started_at: datetime | None = None) -> None:
        import requests

        backoff = Backoff(base=1.0, cap=60.0)
        first = time.monotonic()
        while True:
            if self.settings.format == "slack":
                wait = self._last_post + SLACK_INTERVAL - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            body = alert_body(self.settings.format, event) if event.get("type") == ALERT_TYPE else \
                notify.render(self.settings.format, event, datetime.now(UTC), started_at)
            if body is None:
                return
            self._last_post = time.monotonic()
            retry_after: float | None = None
            try:
                reply = self.session.post(self.url, data=json.dumps(body, separators=(",", ":")).encode(),
                                          headers={"Content-Type": "application/json"}, timeout=TIMEOUT)
            except requests.RequestException as exc:
                why = f"{type(exc).__name__}"
            else:
                if 200 <= reply.status_code < 300:
                    self.sent += 1
                    log.debug("%s: sent %s", self.label, event.get("id"))
                    return
                text = " ".join(reply.text.split())[:200]
                why = f"HTTP {reply.status_code}" + (f" {text}" if text else "")
                if reply.status_code not in RETRIED and reply.status_code < 500:
                    self.dropped += 1
                    gone = " (deleted, disabled or revoked? put a working URL in the configuration)" \
                        if reply.status_code in (401, 403, 404, 410) else ""
                    log.error("%s refused the message for %s: %s%s", self.label, event.get("id"), why, gone)
                    return
                retry_after = _seconds(reply.headers.get("Retry-After"))
            delay = backoff.next_delay(retry_after)
            if time.monotonic() - first + delay > GIVE_UP_AFTER or self.stopping.is_set():
                self.dropped += 1
                log.error("%s: gave up the message for %s after %d attempts: %s", self.label,
                          event.get("id"), backoff.attempt, why)
                return
            log.warning("%s: %s; retrying in %.1f s", self.label, why, delay)
            time.sleep(delay)


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class Notifier:
    """The hooks, fed from the fold by a thread that looks once a second (``submit`` runs a function
    on the service thread and returns its future; ``acting`` says whether this instance decides)."""

    def __init__(self, hooks: list[ChatHook], submit: Callable[[Callable[[], Any]], Any],
                 state: Callable[[], FleetState], acting: Callable[[], bool],
                 since: float | None = None, policy: Policy | None = None) -> None:
        self.hooks = hooks
        since = time.time() if since is None else since
        self.decisions = NewDecisions(since)
        self.events = EventStages(since, policy)
        self.alerts = NewAlerts()
        self.gates = GateChanges(since)
        self._submit, self._state, self._acting = submit, state, acting
        self._derived: Callable[[], Derived] = lambda: Derived({}, frozenset())
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="notify-feed", daemon=True)

    @classmethod
    def from_settings(cls, settings: Iterable[NotifySettings], service: Any) -> Notifier:
        hooks = [ChatHook(s, hook_url(s)) for s in settings]
        notifier = cls(hooks, service.submit, lambda: service.state, service.acting, policy=service.policy)

        def derived() -> Derived:  # on the service thread: the fold and its last pass are its own
            evaluation = service.evaluation
            fold = Derived({}, frozenset()) if evaluation is None else derive(service.state, evaluation)
            return merged(fold, service.alerts.open(), ())  # and those a running part raised (a gate's)

        notifier._derived = derived
        return notifier

    def start(self) -> Notifier:
        for hook in self.hooks:
            hook.start()
        self.thread.start()
        for hook in self.hooks:
            log.info("chat notifications to %s (decisions: %s; events: %s)", hook.label,
                     ", ".join(hook.settings.decisions) or "none", ", ".join(hook.settings.events) or "none")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        if self.thread.ident is not None:
            self.thread.join(LOOK_EVERY + 1)
        deadline = time.monotonic() + timeout
        for hook in self.hooks:
            hook.close(max(0.1, deadline - time.monotonic()))

    def look(self) -> int:
        """Take the new decisions and fleet events once and hand them to the hooks; how many were new."""
        def take() -> list[tuple[dict[str, Any], datetime | None]]:
            state, acting = self._state(), self._acting()
            out: list[tuple[dict[str, Any], datetime | None]] = []
            if any(hook.settings.decisions for hook in self.hooks):
                out += [(event, None) for event in self.decisions.take(state, acting)]
            if any(hook.settings.events for hook in self.hooks):
                out += self.events.take(state, acting)
            if any(hook.settings.alerts for hook in self.hooks):
                out += [(event, None) for event in self.alerts.take(self._derived(), acting, time.time())]
            if any("gate" in hook.settings.decisions for hook in self.hooks):
                out += [(event, None) for event in self.gates.take(state, acting)]
            return out

        messages = self._submit(take).result(timeout=30)
        for event, started_at in messages:
            for hook in self.hooks:
                hook.offer(event, started_at)
        return len(messages)

    def _run(self) -> None:
        while not self.stopping.wait(LOOK_EVERY):
            try:
                self.look()
            except Exception as exc:  # noqa: BLE001 - a busy service thread: look again next second
                log.debug("the fold not read for notifications this time: %s", exc)
