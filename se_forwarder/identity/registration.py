"""Keeping this agent registered: attested documents fetched in the background, identity events.

The registration thread asks IMDS for an attested document with this agent's nonce: the
32-character one (``attested.long_nonce_for``), or the 10 digits (``attested.nonce_for``) once
IMDS refused the 32 characters with a 400 (said once in the log; asked again with 32 after a
restart). It checks that the answer is for that nonce (IMDS may serve a cached
document), and builds the ``identity`` CloudEvent (``cloudevents.identity``). ``current()`` is the
latest one: each Event Hubs delivery worker announces it before its next batch and again whenever
it changes (``delivery.py``), so it reaches the hub ahead of any backlog, and again after every
restart (each start registers anew). It is never stored in the outbox: an old document is worth
nothing once expired.

A new document is fetched when half of the current one's remaining lifetime has passed (at the
latest ``REFRESH_SECONDS`` after the last), so the coordinator always has an unexpired one.
Failures are retried after 1, 2, 5, 10, 30 s, then every minute; the last good event stays
current meanwhile. Nothing else waits for this thread: events are forwarded (and signed) from the
first poll, whether IMDS answers attested-data requests or not.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from .. import cloudevents as ce
from ..imds import ClientThread, ImdsClient, ImdsError, NonceRefused
from ..model import VmIdentity
from ..sinks.base import StoredEvent
from .attested import AttestedFormatError, long_nonce_for, nonce_for, unpack
from .key import AgentKey

log = logging.getLogger("se_forwarder.identity")

RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
REFRESH_SECONDS = 3600.0  # at the latest; Azure's documents live 6 hours
MIN_REFRESH_SECONDS = 1.0


class RegistrationFailed(Exception):
    """One attempt failed; the message says why (logged, then retried)."""


class Registration:
    """Holds the current identity event; ``start`` keeps it fresh (module docstring)."""

    def __init__(self, key: AgentKey, make_client: Callable[[], ImdsClient],
                 identity: Callable[[], VmIdentity], *,
                 on_new: Callable[[], None] = lambda: None) -> None:
        self.key = key
        self.nonce = long_nonce_for(key.public_raw)
        self.short_nonce = nonce_for(key.public_raw)
        self.identity = identity
        self.on_new = on_new
        self._current: StoredEvent | None = None
        self._lock = threading.Lock()
        self._thread = ClientThread("registration", make_client, self._keep_registered)

    def current(self) -> StoredEvent | None:
        """The identity event to announce now (None until a document was fetched)."""
        with self._lock:
            return self._current

    def attempt(self, client: ImdsClient) -> float:
        """One registration; the seconds until the next. Raises RegistrationFailed."""
        try:
            try:
                document = client.get_attested(self.nonce)
            except NonceRefused as exc:
                if self.nonce == self.short_nonce:
                    raise
                log.info("IMDS refuses the 32-character nonce (%s); asking with 10 digits from now on", exc)
                self.nonce = self.short_nonce
                document = client.get_attested(self.nonce)
            unpacked = unpack(document)
        except (ImdsError, AttestedFormatError) as exc:
            raise RegistrationFailed(str(exc)) from None
        if unpacked.nonce != self.nonce:
            raise RegistrationFailed(f"IMDS answered with a document for nonce {unpacked.nonce!r}, "
                                     f"not this agent's {self.nonce} (a cached one)")
        vm_id = unpacked.vm_id
        if vm_id is None:
            raise RegistrationFailed("the attested document names no vmId")
        created, expires = unpacked.times()
        now = datetime.now(UTC)
        cloud = ce.identity(self.identity(), now, vm_id=vm_id, public_key=self.key.public_line,
                            key_id=self.key.keyid, nonce=self.nonce, document=document,
                            created=created)
        event = StoredEvent.never_stored(ce.for_outbox(cloud))
        with self._lock:
            first, self._current = self._current is None, event
        log.log(logging.INFO if first else logging.DEBUG,
                "registered as vmId %s with identity key %s (attested document valid until %s)",
                vm_id, self.key.keyid, expires.isoformat() if expires else "unknown")
        self.on_new()
        if expires is None:
            return REFRESH_SECONDS
        remaining = (expires - now).total_seconds()
        return min(REFRESH_SECONDS, max(MIN_REFRESH_SECONDS, remaining / 2))

    # -- the background thread -------------------------------------------------------------
    def start(self, stop: threading.Event) -> None:
        """Keep this agent registered on a thread of its own until ``stop`` is set."""
        self._thread.start(stop)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _keep_registered(self, client: ImdsClient, stop: threading.Event) -> None:
        failures = 0
        last_reason: str | None = None
        delay = 0.0
        while not stop.wait(delay):
            try:
                delay = self.attempt(client)
                failures, last_reason = 0, None
            except RegistrationFailed as exc:
                delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                failures += 1
                reason = str(exc)
                loud = reason != last_reason or failures % 30 == 0
                log.log(logging.WARNING if loud else logging.DEBUG,
                        "attested document unavailable (retry in %.0f s): %s; events are "
                        "forwarded and signed meanwhile", delay, reason)
                last_reason = reason
