"""fleet.py's fleet with Azure's side played too: the simulator serves ARM over HTTPS (its test CA)
and publishes Event Grid's feed to a second Event Hubs broker, the *Azure feed hub*, whose key no
agent has; ``coordinator run`` is given ``[azure]`` and gets its ARM token from the simulator's
IMDS as on a VM (``ManagedIdentityCredential`` with ``AZURE_POD_IDENTITY_AUTHORITY_HOST``).

Azure itself cannot run here, so the simulator plays it; what talks to it is the coordinator's real
``azure-mgmt-resourcegraph``, ``azure-mgmt-core`` and ``azure-eventhub`` clients.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests

from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology
from se_forwarder.simulator.wire import DEFAULT_RESOURCE_GROUP, DEFAULT_SUBSCRIPTION_ID
from tests.eventhubs.broker import EventHubsBroker
from tests.support.azure_side import IDENTITY_VARIABLES, identity_env
from tests.support.config import toml_value

from .fleet import Coordinator, Fleet

AGENTLESS = ["db-4", "db-5"]
LIAR = "db-3"  # its agent says FD 2 and scale set "fake"; Azure: FD 0, availability set db
DB = [f"db-{i}" for i in range(6)]
API = ["api_0", "api_1"]
TOPOLOGY = Topology.build(
    availability_sets=[{"name": "db", "vms": 6, "fault_domains": 3, "agentless": AGENTLESS}],
    scale_sets=[{"name": "api", "vms": 2}],
)
PREFIX = f"{DEFAULT_SUBSCRIPTION_ID}/{DEFAULT_RESOURCE_GROUP}".lower()
DB_GROUP = f"group:avset/{PREFIX}/db"
FEED_ENV = "COORD_FEED_CONN"
FEED_HUB = "azure-feed"


class AzureFleet(Fleet):
    def __init__(self, base: Path, topology: Topology = TOPOLOGY) -> None:
        self.feed = EventHubsBroker(eventhub=FEED_HUB, partition_count=2).start()  # its port goes into
        self.ca = base / "arm-ca.pem"                                                # the simulator's options
        super().__init__(base, topology=topology, azure=AzureOptions(
            arm_port=0, ca_path=self.ca, feed_connection_string=self.feed.connection_string()))

    def start(self, vms: list[str] | None = None) -> AzureFleet:
        super().start([vm for vm in self.topology.vm_names if vm not in AGENTLESS] if vms is None else vms)
        return self

    def stop(self) -> None:
        super().stop()
        self.feed.stop()

    @property
    def azure(self) -> Any:
        assert self.server.azure is not None
        return self.server.azure

    def azure_coordinator(self, name: str, *, acknowledge: bool = True, arg_interval: str = "5s",
                          subscription: str = DEFAULT_SUBSCRIPTION_ID, extra: str = "", **policy: Any
                          ) -> Coordinator:
        """``coordinator run`` with ``[azure]`` for ``subscription`` and ``[azure.feed]``; ``extra``
        as for ``coordinator`` (after those sections)."""
        extra = "\n".join([
            "[azure]", f"subscriptions = [{toml_value(subscription)}]",
            f"arm_endpoint = {toml_value(self.azure.arm_url)}", f"ca_file = {toml_value(str(self.ca))}",
            f"arg_interval = {toml_value(arg_interval)}", f"acknowledge = {toml_value(acknowledge)}",
            "[azure.feed]", f"eventhub = {toml_value(FEED_HUB)}", 'consumer_group = "coordinator"',
            'credential = "connection-string"', f"connection_string_env = {toml_value(FEED_ENV)}",
        ]) + "\n" + extra
        coordinator = self.coordinator(name, extra=extra, **policy)
        for variable in IDENTITY_VARIABLES:
            coordinator.env.pop(variable, None)
        coordinator.env.update(identity_env(self.server))
        coordinator.env[FEED_ENV] = self.feed.connection_string()
        return coordinator

    def lie(self, vm: str, **claims: Any) -> None:
        """From now on ``vm``'s IMDS gives its agent this compute metadata (what a compromised VM's
        agent would report); Azure's side keeps the truth."""
        url = f"{self.server.vm_url(vm)}/metadata/instance/compute?api-version=2021-02-01"
        compute = requests.get(url, headers={"Metadata": "true"}, timeout=5, proxies={"http": ""}).json()
        self.server.sim.add_fault({"body": json.dumps({**compute, **claims}), "route": "compute", "vm": vm,
                                   "seconds": 3600})

    def feed_events(self, event_id: str) -> list[dict[str, Any]]:
        """The CloudEvents on the Azure feed hub about ``event_id`` (Event Grid's ``[event]`` bodies)."""
        out = []
        for stored in self.feed.all_messages():
            body = json.loads(stored.message().body)
            event = body[0] if isinstance(body, list) else body
            if event["data"]["resourceInfo"]["name"].lower() == event_id.lower():
                out.append(event)
        return out
