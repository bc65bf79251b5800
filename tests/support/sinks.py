"""A sink run the way the agent runs it: events recorded in a real outbox, the webhook sink built
from validated options, and the real delivery worker until a condition holds."""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from se_forwarder.cloudevents import transition_rows
from se_forwarder.delivery import DeliveryWorker
from se_forwarder.model import Document, Transition, VmIdentity, parse_event
from se_forwarder.outbox import Outbox
from se_forwarder.sinks import webhook
from se_forwarder.sinks.base import StoredEvent

VM = VmIdentity(vm_id="0b1c2d3e-0000-4000-8000-000000000001", name="vm-web-1",
                resource_id="/subscriptions/s/resourceGroups/rg/providers/"
                            "Microsoft.Compute/virtualMachines/vm-web-1")


def new_secret() -> str:
    """A Standard Webhooks signing secret: whsec_ + base64 of random bytes."""
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def record_events(state_dir: Path, count: int, sink: str = "hook", prefix: str = "ev") -> list[StoredEvent]:
    """``count`` scheduled transitions, normalised and stored exactly as the agent does it."""
    transitions = []
    for i in range(count):
        raw = {
            "EventId": f"{prefix}-{i:04d}", "EventType": "Freeze", "ResourceType": "VirtualMachine",
            "Resources": [VM.name], "EventStatus": "Scheduled",
            "NotBefore": "Mon, 19 Sep 2033 18:29:47 GMT", "Description": "Host maintenance",
            "EventSource": "Platform", "DurationInSeconds": 9,
        }
        transitions.append(Transition("scheduled", parse_event(raw), i + 1))
    with Outbox(state_dir) as box:
        box.register_sinks([sink])
        return box.record(Document(count), transition_rows(transitions, VM, datetime.now(UTC)))


def make_sink(name: str = "hook", **options: Any) -> webhook.WebhookSink:
    """A webhook sink built the way the agent builds one: validate, then create."""
    checked = webhook.validate(dict(options), "sinks[0]")
    return webhook.create(name, checked, None)


def run_worker(sink: Any, state_dir: Path, until: Callable[[Outbox], bool], timeout: float) -> bool:
    """Run the real delivery worker for ``sink`` until ``until(outbox)`` holds; whether it did."""
    stop = threading.Event()
    worker = DeliveryWorker(sink, state_dir, stop)
    worker.start()
    deadline = time.monotonic() + timeout
    with Outbox(state_dir) as box:
        try:
            while time.monotonic() < deadline:
                if until(box):
                    return True
                time.sleep(0.05)
            return until(box)
        finally:
            stop.set()
            worker.wakeup.set()
            worker.join(10)


def backlog(box: Outbox, sink: str = "hook") -> int:
    return box.sink_status(sink).backlog
