"""The webhook sink: renders stored CloudEvents for the wire, POSTs them, maps answers to outcomes.

Wire forms come from the ``cloudevents`` SDK (HTTP binding, JSON format): ``structured`` (one event
per POST, ``application/cloudevents+json``, no ``ce-*`` headers), ``binary`` (``ce-*`` headers, body =
data) and ``batch`` (``application/cloudevents-batch+json``, a JSON array). Status codes map to
outcomes exactly as design.md says: 2xx only is success; 3xx is a failure and never followed; 410
parks the sink; 408/429/502/503/504, timeouts and connection errors are retried honouring
``Retry-After``; any other 4xx dead-letters the event; any other 5xx is retried. The delivery worker
owns backoff, parking and the cursor.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudevents.core.bindings import http as ce_http
from cloudevents.core.formats.json import JSONFormat

from ...cloudevents import from_json
from ...http_client import HttpError, Reply
from ...validation import public_url
from .. import chat
from ..base import DeadLetter, Delivered, DeliveryReport, Outcome, Park, Retry, StoredEvent
from .auth import EntraToken, Signer, TokenError
from .config import WebhookOptions
from .handshake import Pacer, handshake
from .transport import Endpoint, retry_after, settled, snippet

BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
_FORMAT = JSONFormat()


@dataclass
class _Item:
    """One stored event, rendered for the wire (or the reason it cannot be)."""

    event: StoredEvent
    cloud: Any = None  # the parsed CloudEvent (cloudevents.core.v1.event.CloudEvent)
    structured: bytes = b""  # its structured-mode JSON, for batches and their size
    refused: DeadLetter | None = None
    settled: Delivered | None = None  # nothing to send for it (chat formats: heartbeats, filtered)


class WebhookSink:
    """POSTs CloudEvents to one URL; one outcome per event, in outbox order."""

    def __init__(self, name: str, options: WebhookOptions, *, secrets: Sequence[str] = (),
                 headers: dict[str, str] | None = None, token: EntraToken | None = None,
                 state_dir: str | Path | None = None) -> None:
        self.name = name
        self.mode = options.mode
        self.max_batch = (min(5000, max(100, 4 * options.batch_max_events))
                          if options.mode == "batch" else 50)
        self._options = options
        self._endpoint = Endpoint(options.url, headers=headers, token=token, ca_file=options.ca_file,
                                  connect_timeout=options.connect_timeout,
                                  read_timeout=options.read_timeout)
        self._where = self._endpoint.where
        self._signer = Signer(secrets) if secrets else None
        self._handshake_done = not options.handshake
        self._chat = (chat.ChatFormat(options.format, options.events)
                      if options.format in chat.FORMATS else None)
        # from WebHook-Allowed-Rate, or the chat service's pace
        self._pacer = Pacer(self._chat.min_interval if self._chat is not None else 0.0)
        self._unacked: tuple[str, ...] = ()  # ids of the batch that failed last: resent as is
        # Kept on disk too, so a restarted agent resends the same batch (same webhook-id).
        self._unacked_file: Path | None = None
        if options.mode == "batch" and state_dir is not None:
            digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
            self._unacked_file = Path(state_dir) / f"webhook-batch-{digest}.json"
            self._unacked = self._load_unacked()

    @property
    def min_interval(self) -> float:
        """Seconds between POSTs: from the receiver's WebHook-Allowed-Rate, or a chat service's pace."""
        return self._pacer.interval

    # -- Sink interface ------------------------------------------------------------------------
    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport:
        if not batch:
            return DeliveryReport([])
        ready = self._ready()
        if ready is not None:
            return DeliveryReport([ready])
        outcomes: list[Outcome] = []
        for group in self._groups([self._render(e) for e in batch]):
            result = self._send_group(group)
            outcomes += result
            if not isinstance(result[-1], Delivered | DeadLetter):
                break
        return DeliveryReport(outcomes)

    def check(self) -> str | None:
        """One OPTIONS request (the handshake when enabled): reachable, TLS verified, not gone."""
        if self._options.handshake:
            agreed = handshake(self._endpoint)
            if isinstance(agreed, Retry | Park):
                return agreed.reason
            self._pacer.interval = agreed
            return None
        try:
            response = self._endpoint.request("OPTIONS", self._endpoint.headers())
        except TokenError as exc:
            return str(exc)
        except HttpError as exc:
            return self._endpoint.failure(exc).reason
        status = response.status
        if status == 410:
            return f"{self._where} answers 410 Gone: the endpoint was removed"
        if 300 <= status < 400:
            return (f"{self._where} answers {status} (redirect to "
                    f"{public_url(response.header('Location') or '?')}); redirects are never "
                    "followed: put the final URL in the configuration")
        return None

    def close(self) -> None:
        self._pacer.close()
        self._endpoint.close()

    # -- rendering -----------------------------------------------------------------------------
    def _render(self, event: StoredEvent) -> _Item:
        if self._chat is not None:
            body = self._chat.body(event)
            if isinstance(body, Delivered):
                return _Item(event, settled=body)
            if isinstance(body, DeadLetter):
                return _Item(event, refused=body)
            return _Item(event, structured=body)
        try:
            cloud = from_json(event.payload)
            return _Item(event, cloud, _FORMAT.write(cloud))
        except Exception as exc:  # noqa: BLE001 - a corrupt stored event must not stop the sink
            return _Item(event, refused=DeadLetter(f"stored event is not a valid CloudEvent: {exc}"))

    def _groups(self, items: list[_Item]) -> list[list[_Item]]:
        """One POST each: single events, or batches cut by count and bytes (a refused item alone).

        A batch that failed last time is cut the same way again, so its webhook-id stays the same
        across retries even when more events arrived meanwhile.
        """
        if self.mode != "batch":
            return [[item] for item in items]
        groups: list[list[_Item]] = []
        start = 0
        ids = tuple(i.event.ce_id for i in items[: len(self._unacked)])
        if self._unacked and ids == self._unacked:
            groups.append(items[: len(self._unacked)])
            start = len(self._unacked)
        current: list[_Item] = []
        size = 2
        for item in items[start:]:
            if item.refused is not None:
                if current:
                    groups.append(current)
                groups.append([item])
                current, size = [], 2
                continue
            grown = size + len(item.structured) + (1 if current else 0)
            if current and (len(current) >= self._options.batch_max_events
                            or grown > self._options.batch_max_bytes):
                groups.append(current)
                current, grown = [], 2 + len(item.structured)
            current.append(item)
            size = grown
        if current:
            groups.append(current)
        return groups

    def _request(self, group: list[_Item]) -> tuple[str, dict[str, str], bytes]:
        """(webhook-id, headers, body) for one POST, rendered with the cloudevents SDK."""
        if self._chat is not None:
            return group[0].event.ce_id, {"Content-Type": chat.CONTENT_TYPE}, group[0].structured
        if self.mode == "batch":
            body = b"[" + b",".join(i.structured for i in group) + b"]"
            return batch_id([i.event.ce_id for i in group]), {"Content-Type": BATCH_CONTENT_TYPE}, body
        cloud = group[0].cloud
        if self.mode == "binary":
            message = ce_http.to_binary(cloud, _FORMAT)
        else:
            message = ce_http.to_structured(cloud, _FORMAT)
        return group[0].event.ce_id, dict(message.headers), message.body

    # -- sending -------------------------------------------------------------------------------
    def _send_group(self, group: list[_Item]) -> list[Outcome]:
        """Outcomes for the group's events; a refused batch is split to find the bad event."""
        if group[0].refused is not None:
            return [group[0].refused]
        if group[0].settled is not None:
            return [group[0].settled]
        if self.mode == "batch":
            self._remember(tuple(i.event.ce_id for i in group))
        outcome = self._post(group)
        if isinstance(outcome, Delivered):
            self._unacked = ()
            return [outcome] * len(group)
        if isinstance(outcome, DeadLetter):
            self._unacked = ()
            if len(group) == 1:
                return [outcome]
            # A batch refused for good may hold one bad event: halve until it is found alone.
            half = len(group) // 2
            first = self._send_group(group[:half])
            if not isinstance(first[-1], Delivered | DeadLetter):
                return first
            return first + self._send_group(group[half:])
        return [outcome]  # Retry or Park: the worker stops at this event

    def _remember(self, ids: tuple[str, ...]) -> None:
        """The batch about to be sent, in memory and (before the POST) on disk; best effort."""
        self._unacked = ids
        if self._unacked_file is None:
            return
        try:
            tmp = self._unacked_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(list(ids)), encoding="utf-8")
            os.replace(tmp, self._unacked_file)
        except OSError:
            pass  # then only this process keeps the batch composition, as without a state dir

    def _load_unacked(self) -> tuple[str, ...]:
        assert self._unacked_file is not None
        try:
            ids = json.loads(self._unacked_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return ()
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return ()
        return tuple(ids)

    def _post(self, group: list[_Item]) -> Outcome:
        msg_id, headers, body = self._request(group)
        if not self._pacer.wait_for_slot():
            return Retry("sink is closing")
        try:
            all_headers = {**self._endpoint.headers(), **headers}
            if self._signer is not None:
                all_headers.update(self._signer.headers(msg_id, body))
            response = self._endpoint.request("POST", all_headers, body)
        except TokenError as exc:
            return Retry(str(exc))
        except HttpError as exc:
            return self._endpoint.failure(exc)
        finally:
            self._pacer.done()
        return self._classify(response, response.body)

    def _classify(self, response: Reply, reply: bytes) -> Outcome:
        status = response.status
        label, outcome = settled(response, self._where)
        if outcome is not None:
            return outcome
        refusal = self._chat.refusal(status, reply, label) if self._chat is not None else None
        if refusal is not None:
            return refusal
        if status == 410:
            return Park(f"{label}: the endpoint is gone")
        after = retry_after(response.header("Retry-After"))
        if status in RETRY_STATUSES or status >= 500:
            return Retry(label + snippet(reply), after)
        if 400 <= status < 500:
            return DeadLetter(label + snippet(reply))
        return Retry(f"{label}: unexpected status")

    # -- abuse protection ----------------------------------------------------------------------
    def _ready(self) -> Retry | Park | None:
        """Run the handshake once before the first delivery; a failure is retried later."""
        if self._handshake_done:
            return None
        agreed = handshake(self._endpoint)
        if isinstance(agreed, Retry | Park):
            return agreed
        self._pacer.interval = agreed
        self._handshake_done = True
        return None


def batch_id(ce_ids: Sequence[str]) -> str:
    """A stable webhook-id for a batch: the same events in the same order give the same id."""
    digest = hashlib.sha256("\n".join(ce_ids).encode("utf-8")).hexdigest()[:32]
    return f"batch_{digest}"
