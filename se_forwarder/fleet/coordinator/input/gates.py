"""The gates (``[[gates]]``), each asked on a thread of its own; their verdicts handed to the loop.

``GateWatch`` belongs to the service (service.py). Each gate is asked at start and every
``interval`` (input/gate_checks.py: one request, bounded by ``timeout``), never on the service's
loop, so a gate that hangs delays neither the fold nor another gate. Its verdicts are kept here
(fold/gates.fold_gate: ``since`` carried while it stays open or closed) and the loop copies them
into the fold (``pump``) before the next decision pass, where decide/gates.py reads them. Until a
gate has answered once it counts as closed (fold/gates.unasked).

A gate that closes is said in the log (a warning, again when its reason changes), and once when it
opens again. The ``gate-closed`` alert of a closed gate is derived from the fold (view/alerts.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ....errors import ConfigError
from ....fleet.health_queries import fired_alerts
from ..azure.reach import Reach
from ..config.azure import AzureSettings
from ..config.gates import GateSettings
from ..fold.gates import GateVerdict, fold_gate, unasked
from ..fold.state import FleetState
from . import gate_checks

log = logging.getLogger("se_forwarder.coordinator.gates")

def read_token(settings: GateSettings) -> str:
    """The gate's bearer token from its variable or file ("" without one); ConfigError naming where
    it should come from, never the value."""
    if settings.token_env:
        value = os.environ.get(settings.token_env, "").strip()
        if not value:
            raise ConfigError(f"{settings.where}.token_env: the variable {settings.token_env} is not set")
        return value
    if settings.token_file:
        try:
            value = Path(settings.token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{settings.where}.token_file: {settings.token_file} cannot be read "
                              f"({getattr(exc, 'strerror', None) or exc})") from None
        if not value or "\n" in value:
            raise ConfigError(f"{settings.where}.token_file: {settings.token_file} must hold one line, "
                              "the token")
        return value
    return ""


class GateWatch:
    """Every gate's thread and its last verdict (module docstring)."""

    def __init__(self, gates: tuple[GateSettings, ...], azure: AzureSettings | None,
                 arm: Reach | None = None) -> None:
        self.gates, self.azure, self.arm = gates, azure, arm
        self.tokens = {g.name: read_token(g) for g in gates}  # at start: a missing one stops it
        self._lock = threading.Lock()
        self._verdicts: dict[str, GateVerdict] = {g.name: unasked(g.name, g.type, g.scope) for g in gates}
        self._version = 1
        self._pumped = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(g,), name=f"gate-{g.name}", daemon=True)
                         for g in gates]
        self._credential: Any = None
        self._graphs: dict[str, Any] = {}  # gate name -> its azure/graph.Graph

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(timeout / max(1, len(self._threads)))
        for graph in list(self._graphs.values()):
            graph.close()

    def verdicts(self) -> dict[str, GateVerdict]:
        with self._lock:
            return dict(self._verdicts)

    def pump(self, state: FleetState) -> bool:
        """The verdicts into the fold when they changed since the last pump, or when ``state`` is a
        new one (a snapshot loaded); True when the fold changed."""
        with self._lock:
            if self._version == self._pumped and state.gates.keys() == self._verdicts.keys():
                return False
            state.gates = dict(self._verdicts)
            self._pumped = self._version
            return True

    # -- each gate's thread -------------------------------------------------------------------------

    def _run(self, settings: GateSettings) -> None:
        ask = self._asker(settings)
        while not self._stop.is_set():
            self._take(settings, gate_checks.verdict(settings, ask))
            self._stop.wait(settings.interval)

    def _asker(self, settings: GateSettings) -> Callable[[], tuple[bool, str, tuple[str, ...]]]:
        token = self.tokens[settings.name]
        if settings.type == "azure-monitor":
            query = fired_alerts(settings.severities, settings.rules, settings.target or None)
            return lambda: gate_checks.ask_azure_monitor(self._fired(settings, query))
        origin, target = gate_checks.origin_for(settings)
        if settings.type == "alertmanager":
            return lambda: gate_checks.ask_alertmanager(origin, target, settings, token)
        return lambda: gate_checks.ask_http(origin, target, settings, token)

    def _fired(self, settings: GateSettings, query: str) -> list[dict[str, Any]]:
        """Resource Graph's fired alerts for the gate: every page, within three timeouts."""
        from ..azure.clients import azure_credential
        from ..azure.graph import Graph

        assert self.azure is not None  # config/gates.py refuses an azure-monitor gate without [azure]
        graph = self._graphs.get(settings.name)
        if graph is None:
            if self._credential is None:
                self._credential = azure_credential(self.azure)
            graph = self._graphs[settings.name] = Graph(self.azure, self._credential,
                                                        deadline=settings.timeout * 3, reach=self.arm)
        rows, _ = graph.rows(query, self.azure.subscriptions, time.monotonic() + settings.timeout * 3)
        return rows

    def _take(self, settings: GateSettings, verdict: GateVerdict) -> None:
        with self._lock:
            before = self._verdicts.get(settings.name)
            if fold_gate(self._verdicts, verdict):
                self._version += 1
        if verdict.open:
            if before is not None and not before.open:
                log.info("gate %s (%s) is open: %s", settings.name, settings.scope, verdict.reason)
        elif before is None or before.open or before.checked is None or before.reason != verdict.reason:
            log.warning("gate %s (%s) is closed: %s", settings.name, settings.scope, verdict.reason)


def ask_once(settings: GateSettings, azure: AzureSettings | None) -> GateVerdict:
    """The gate asked once, as its thread asks it (``coordinator check``)."""
    watch = GateWatch((settings,), azure)
    try:
        return gate_checks.verdict(settings, watch._asker(settings))
    finally:
        watch.close()
