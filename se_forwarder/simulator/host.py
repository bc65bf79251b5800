"""What the simulator's routes need of the server that carries them.

The IMDS routes (``imds_routes.py``) and the control API (``control_routes.py``) are written against
``SimulatorHost``, and ``server.SimulatorServer`` is one: the server imports its routes, never the
other way round, so a new set of routes needs only this interface.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from se_forwarder.simulator.engine import Simulator

if TYPE_CHECKING:
    from se_forwarder.simulator.attestation import AttestationAuthority
    from se_forwarder.simulator.azure_side import AzureSide
    from se_forwarder.simulator.history import EventHistory


class SimulatorHost(Protocol):
    """The engine, the addresses and the IMDS behaviour knobs of a running simulator."""

    @property
    def sim(self) -> Simulator:
        """The engine: events, approvals, faults, scenarios, the request log."""
        ...

    @property
    def url(self) -> str:
        """Base URL of the first VM."""
        ...

    def vm_url(self, name: str) -> str:
        """Base URL of VM ``name``."""
        ...

    # The knobs ``/control/settings`` reads and changes.
    throttle_rps: float | None
    first_call_delay: float
    instance_endpoint: str
    etag: bool
    azure: AzureSide | None  # Azure's side (ARM, the feed, tokens), when turned on
    attestation: AttestationAuthority  # signs the attested documents
    history: EventHistory  # every event's life, from the engine's changes

    @property
    def instance_overrides(self) -> Mapping[str, Any]:
        """Fields that replace the generated instance metadata of every VM."""
        ...

    def admit(self, client: str, vm: str) -> bool:
        """Whether a request of ``client`` to ``vm`` is within the throttling limit (else 429)."""
        ...

    def wait_first_call(self, vm: str) -> bool:
        """Hold a request until the service is "enabled" for ``vm``; False if stopping."""
        ...

    def pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the server stops first; True if it slept in full."""
        ...

    def hang(self, conn: socket.socket, seconds: float | None,
             released: Callable[[], bool] | None = None) -> bool:
        """Hold ``conn`` without answering until the client leaves, the server stops, time's up
        or ``released()`` holds; True only in the last case (the request may then be answered)."""
        ...
