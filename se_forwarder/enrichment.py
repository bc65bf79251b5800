"""This VM's identity for enriching events: known at once, completed in the background.

Forwarding never waits for the instance metadata. At start the agent uses:

- the identity an earlier run stored in the state directory, when that run was on this same
  machine (same host name and ``/etc/machine-id``): a state directory copied into an image or
  onto another VM is never trusted;
- otherwise the host name alone (``VmIdentity.from_hostname``: ``complete`` false, source
  ``/virtualMachines/<hostname>``, AffectsThisVm compared with the host name).

Before the first poll the agent asks ``/metadata/instance/compute`` once, waiting at most
``FIRST_ATTEMPT_TIMEOUT`` (real IMDS answers in milliseconds, so the first events are enriched in
the common case; a missing route answers 404 at once). If that fails, a background thread asks
again 1, 2, 5, 10, 30 s later, then every minute, until it answers; from then on every event
recorded carries the real identity. Only the tags named in ``[vm] tags`` are kept, in memory and in
the state directory.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import metrics
from .errors import StateError
from .imds import ClientThread, ImdsClient, ImdsError
from .model import MalformedDocument, VmIdentity
from .outbox import Outbox

log = logging.getLogger("se_forwarder.enrichment")

FIRST_ATTEMPT_TIMEOUT = 1.0  # seconds: the one wait before the first poll, only if IMDS hangs
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
STORED_KEY = "vm_compute"  # meta: {"host", "machine_id", "compute"} of the last successful read
COMPUTE_KEYS = (
    "vmId", "name", "resourceId", "subscriptionId", "resourceGroupName", "location", "zone",
    "vmScaleSetName", "platformFaultDomain", "platformUpdateDomain", "placementGroupId",
)
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def hostname() -> str:
    return socket.gethostname() or "localhost"


def machine_id() -> str:
    for path in MACHINE_ID_FILES:
        try:
            text = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            return text
    return ""


def _fingerprint() -> dict[str, str]:
    return {"host": hostname(), "machine_id": machine_id()}


def stored_identity(box: Outbox, tag_names: Sequence[str]) -> VmIdentity | None:
    """The identity an earlier run on this machine read, or None (none, or another machine's)."""
    raw = box.get_meta(STORED_KEY)
    if not raw:
        return None
    try:
        value = json.loads(raw)
        if {k: value.get(k) for k in ("host", "machine_id")} != _fingerprint():
            return None
        return VmIdentity.from_compute(value["compute"], tag_names)
    except (ValueError, TypeError, KeyError, AttributeError, MalformedDocument):
        return None


def initial_identity(box: Outbox, tag_names: Sequence[str]) -> VmIdentity:
    """What the agent forwards with from its first poll (see the module docstring)."""
    stored = stored_identity(box, tag_names)
    if stored is not None:
        log.info("this VM is %s (vmId %s), as read by an earlier run; refreshing it from the "
                 "instance metadata", stored.name, stored.vm_id)
        return stored
    return VmIdentity.from_hostname(hostname())


def kept_compute(compute: Mapping[str, Any], tag_names: Sequence[str]) -> dict[str, Any]:
    """The part of the compute metadata worth storing: identity, topology, the named tags."""
    kept = {k: compute[k] for k in COMPUTE_KEYS if k in compute}
    wanted = {n.casefold() for n in tag_names}
    tags = compute.get("tagsList")
    if isinstance(tags, list):
        kept["tagsList"] = [t for t in tags if isinstance(t, dict)
                            and str(t.get("name", "")).casefold() in wanted]
    elif isinstance(compute.get("tags"), str):
        kept["tags"] = ";".join(p for p in compute["tags"].split(";")
                                if p.partition(":")[0].casefold() in wanted)
    return kept


class Enricher:
    """Holds the identity in use; ``start`` reads the instance metadata until it answers."""

    def __init__(
        self,
        make_client: Callable[[], ImdsClient],
        state_dir: Path,
        tag_names: Sequence[str],
        identity: VmIdentity,
        *,
        on_change: Callable[[VmIdentity], None] = lambda vm: None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.tag_names = list(tag_names)
        self._identity = identity
        self._on_change = on_change
        self.answered = threading.Event()  # the instance metadata answered in this run
        self.last_error: str | None = None
        # The background thread's own client, made when it starts.
        self._thread = ClientThread("enrichment", make_client, self._retry)
        metrics.enrichment(identity.complete)

    def current(self) -> VmIdentity:
        """The identity to put on an event recorded now."""
        return self._identity

    @property
    def complete(self) -> bool:
        return self._identity.complete

    def attempt(self, client: ImdsClient, box: Outbox | None = None,
                timeout: float | None = None) -> bool:
        """One read of the instance metadata; True when it answered (and the identity is set)."""
        try:
            compute = client.get_compute(timeout)
            vm = VmIdentity.from_compute(compute, self.tag_names)
        except (ImdsError, MalformedDocument) as exc:
            self.last_error = str(exc)
            return False
        previous, self._identity = self._identity, vm
        self.last_error = None
        self.answered.set()
        metrics.enrichment(True)
        if previous != vm:
            log.info("this VM is %s (vmId %s); events recorded from now on carry its identity",
                     vm.name, vm.vm_id)
            self._on_change(vm)
        self._store(box, compute, vm)
        return True

    def _store(self, box: Outbox | None, compute: Mapping[str, Any], vm: VmIdentity) -> None:
        own = box is None
        try:
            box = box or Outbox(self.state_dir)
            box.set_meta({"vm": vm.as_data(), STORED_KEY: {
                **_fingerprint(), "compute": kept_compute(compute, self.tag_names)}})
        except StateError as exc:
            log.warning("cannot store the VM identity (used anyway): %s", exc)
        finally:
            if own and box is not None:
                box.close()

    # -- the background thread -------------------------------------------------------------
    def start(self, stop: threading.Event) -> None:
        self._thread.start(stop)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _retry(self, client: ImdsClient, stop: threading.Event) -> None:
        failures = 1  # the attempt before the first poll (logged by the agent)
        last_logged = self.last_error
        while not stop.wait(RETRY_SECONDS[min(failures - 1, len(RETRY_SECONDS) - 1)]):
            if self.attempt(client):
                log.info("instance metadata answers after %d failed attempt(s)", failures)
                return
            failures += 1
            delay = RETRY_SECONDS[min(failures - 1, len(RETRY_SECONDS) - 1)]
            reason = self.last_error or "no answer"
            # One line per change of reason, then one every 30 attempts (about half an hour).
            loud = reason != last_logged or failures % 30 == 0
            log.log(logging.WARNING if loud else logging.DEBUG,
                    "instance metadata unavailable (retry in %.0f s): %s; %s until it answers",
                    delay, reason, self.describe_failure())
            last_logged = reason

    def describe_failure(self) -> str:
        """The first failure's log line: what the events carry until the instance metadata answers."""
        if self._identity.complete:
            return "events carry the identity read by an earlier run"
        return f"events are forwarded with the host name {self._identity.name!r} as the VM name"
