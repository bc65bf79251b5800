"""Asking one gate once (``[[gates]]``, config/gates.py): its verdict, open or closed and why.

- ``alertmanager``: ``GET <url>/api/v2/alerts?active=true&silenced=false&inhibited=false`` with one
  ``filter`` parameter per matcher, as Alertmanager's API v2 documents them; Alertmanager itself
  applies the matchers and leaves out silenced, inhibited and resolved alerts. Any alert in the
  answer closes the gate, and the verdict names them (``alertname`` and up to ``LABELS_SHOWN`` other
  labels). No maintained Python client of API v2 exists (the OpenAPI-generated ones are years
  stale), and the query is one GET, so it goes through the project's keep-alive client
  (se_forwarder.http_client: a deadline per request, TLS verified, no redirects, a bounded body).
- ``http``: ``GET <url>``; 2xx is open, any other status closed, naming the status and the start
  of the body.
- ``azure-monitor``: Resource Graph's ``alertsmanagementresources`` through azure/graph.py (the
  ``[azure]`` credential and subscriptions; fleet/health_queries.fired_alerts narrows it to the
  gate's severities, rules and target); any fired, not closed alert closes the gate.

A gate that cannot be asked (no answer, a refused connection, an answer that is not what the API
documents, a 5xx) counts as closed unless ``unreachable = "open"``, and its verdict says so.
Text from the outside is made inert (se_forwarder.printable) and bounded before it reaches a reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

from ....http_client import HttpError, Origin, environ_proxy, tls_context
from ....http_client import describe_error as http_error
from ....printable import strip_controls as inert
from ....validation import public_url
from ..config.gates import GateSettings
from ..fold.gates import ALERTS_KEPT, GateVerdict

MAX_BODY = 4 * 1024 * 1024  # an Alertmanager with many alerts answers a few MB at most
LABELS_SHOWN = 3
NAMED = 5  # alerts named in a reason (the verdict keeps ALERTS_KEPT)


class Unanswered(Exception):
    """The gate could not be asked, or its answer could not be read (one line)."""


def origin_for(settings: GateSettings) -> tuple[Origin, str]:
    """A keep-alive client for the gate's host, and the path (with its query) to ask."""
    parts = urlsplit(settings.url)
    base = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    context = tls_context(settings.ca_file or None) if parts.scheme == "https" else None
    origin = Origin(base, connect_timeout=min(settings.timeout, 10.0), ssl_context=context,
                    proxy=environ_proxy(settings.url))
    target = (parts.path.rstrip("/") if settings.type == "alertmanager" else parts.path or "/")
    return origin, target + (f"?{parts.query}" if parts.query and settings.type == "http" else "")


def verdict(settings: GateSettings, ask: Callable[[], tuple[bool, str, tuple[str, ...]]],
            now: Callable[[], float] = time.time) -> GateVerdict:
    """The gate's verdict from ``ask()`` (open, reason, alerts), or, when it raises, from the gate's
    ``unreachable`` setting."""
    try:
        is_open, reason, alerts = ask()
    except Exception as exc:  # noqa: BLE001 - every failure to ask is "unreachable", said in one line
        said = exc.args[0] if isinstance(exc, Unanswered) and exc.args else http_error(exc)
        counted = "closed" if settings.closed_when_unreachable else "open (unreachable = \"open\")"
        return GateVerdict(settings.name, settings.type, settings.scope, not settings.closed_when_unreachable,
                           f"cannot be asked ({inert(str(said))[:300]}): counted as {counted}",
                           unreachable=True, checked=now())
    return GateVerdict(settings.name, settings.type, settings.scope, is_open, reason,
                       alerts[:ALERTS_KEPT], checked=now())


def _get(origin: Origin, target: str, settings: GateSettings, token: str) -> tuple[int, bytes]:
    headers = {"Accept": "application/json", "User-Agent": "se-forwarder-coordinator"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        reply = origin.request("GET", target, timeout=settings.timeout, max_bytes=MAX_BODY, headers=headers)
    except HttpError as exc:
        raise Unanswered(f"{public_url(settings.url)}: {exc}") from None
    return reply.status, reply.body


def ask_alertmanager(origin: Origin, base: str, settings: GateSettings, token: str = "",
                     ) -> tuple[bool, str, tuple[str, ...]]:
    """One look at Alertmanager (module docstring)."""
    query = "active=true&silenced=false&inhibited=false" + "".join(
        f"&filter={quote(m, safe='')}" for m in settings.matchers)
    status, body = _get(origin, f"{base}/api/v2/alerts?{query}", settings, token)
    if status != 200:
        raise Unanswered(f"Alertmanager answered {status}: {_start(body)}")
    try:
        alerts = json.loads(body)
    except ValueError:
        raise Unanswered("Alertmanager's answer is not JSON") from None
    if not isinstance(alerts, list) or not all(isinstance(a, dict) for a in alerts):
        raise Unanswered("Alertmanager's answer is not a list of alerts")
    firing = sorted({_alert_name(a) for a in alerts})
    if not firing:
        return True, "no matching alert fires in Alertmanager", ()
    return False, f"{_count(len(firing))} in Alertmanager: {_named(firing)}", tuple(firing)


def _alert_name(alert: dict[str, Any]) -> str:
    labels = alert.get("labels") if isinstance(alert.get("labels"), dict) else {}
    assert isinstance(labels, dict)
    name = str(labels.get("alertname", "unnamed alert"))
    rest = [f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname"][:LABELS_SHOWN]
    text = name + (f" ({', '.join(rest)})" if rest else "")
    return inert(text)[:200]


def ask_http(origin: Origin, target: str, settings: GateSettings, token: str = "",
             ) -> tuple[bool, str, tuple[str, ...]]:
    """One GET: 2xx is open (module docstring)."""
    status, body = _get(origin, target, settings, token)
    if 200 <= status < 300:
        return True, f"{public_url(settings.url)} answered {status}", ()
    if status >= 500:
        raise Unanswered(f"{public_url(settings.url)} answered {status}: {_start(body)}")
    return False, f"{public_url(settings.url)} answered {status}: {_start(body)}", ()


def ask_azure_monitor(rows: list[dict[str, Any]]) -> tuple[bool, str, tuple[str, ...]]:
    """Resource Graph's fired alerts (fleet/health_queries.fired_alerts rows) as a verdict."""
    firing = sorted({_azure_alert(row) for row in rows})
    if not firing:
        return True, "no fired Azure Monitor alert", ()
    return False, f"{_count(len(firing))} in Azure Monitor: {_named(firing)}", tuple(firing)


def _azure_alert(row: dict[str, Any]) -> str:
    props = row.get("properties") if isinstance(row.get("properties"), dict) else {}
    assert isinstance(props, dict)
    essentials = props.get("essentials") if isinstance(props.get("essentials"), dict) else {}
    assert isinstance(essentials, dict)
    rule = str(essentials.get("alertRule") or row.get("name") or "unnamed alert").rstrip("/")
    target = str(essentials.get("targetResourceName") or essentials.get("targetResource") or "")
    severity = str(essentials.get("severity") or "")
    said = ", ".join(x for x in (severity, target.rsplit("/", 1)[-1]) if x)
    return inert(rule.rsplit("/", 1)[-1] + (f" ({said})" if said else ""))[:200]


def _count(n: int) -> str:
    return f"{n} alert{'s' if n != 1 else ''} fire{'' if n != 1 else 's'}"


def _named(names: list[str]) -> str:
    return ", ".join(names[:NAMED]) + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def _start(body: bytes) -> str:
    return inert(body[:200].decode("utf-8", "replace").strip().replace("\n", " ")) or "(no body)"
