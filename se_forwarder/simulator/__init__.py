"""The IMDS Scheduled Events simulator: test maintenance handling without waiting for Azure.

``SimulatorServer`` serves the IMDS routes and the ``/control`` API over real HTTP; its ``.sim``
(a ``Simulator``) is the same engine for in-process control. ``command.simulate_command`` is the
``se-forwarder simulate`` CLI; ``python -m se_forwarder.simulator`` runs it too.
"""

from se_forwarder.simulator.engine import Simulator
from se_forwarder.simulator.faults import FaultError
from se_forwarder.simulator.scenarios import (
    Scenario,
    ScenarioError,
    builtin_names,
    load_scenario,
)
from se_forwarder.simulator.server import SimulatorServer
from se_forwarder.simulator.wire import (
    INSTANCE_VERSIONS,
    LATEST_VERSION,
    SCHEDULED_EVENTS_VERSIONS,
    ApprovalError,
    vm_id_for,
)

__all__ = [
    "INSTANCE_VERSIONS",
    "LATEST_VERSION",
    "SCHEDULED_EVENTS_VERSIONS",
    "ApprovalError",
    "FaultError",
    "Scenario",
    "ScenarioError",
    "Simulator",
    "SimulatorServer",
    "builtin_names",
    "load_scenario",
    "vm_id_for",
]
