"""The fleet demo's parts, all in this process: the simulator with the demo's fleet, the coordinator
(its service, control API and fleet page), and one agent per VM, over the demo's transport.

Everything but the transport is the real code, set up as a user would set it up, only with short
times (the simulator runs at ``TIME_SCALE``):

- each agent polls its VM's simulated IMDS, signs what it sends with its own identity key (and
  registers it with the simulator's attested documents), sends a heartbeat a second, approves
  nothing by itself (no rules) and takes approvals from its queue, verified with the
  coordinator's public key;
- the agent of ``application.SLOW`` also probes its application (``[health]``, an HTTP probe of
  the demo's ``SlowApp``), so it reports ``recovered`` only once that answers again;
- the coordinator has budgets of 1 per group and per zone, ``min_healthy`` of ``MIN_HEALTHY``,
  ``free_slot = "recovered"`` (a slot frees once its VM's agent reports ``recovered``),
  groups named by the ``group`` tag, and signs every decision and message with its own Ed25519 key.
  Its ``[trust]`` is the default but for the anchors: it folds only reports signed with the key
  their VM registered, and the registrations' attested documents chain to the simulator's per-run
  CA (root and intermediate given as files, so nothing is fetched from the network);
- the control API and the fleet page listen on 127.0.0.1, on a free port.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..approvals import signing
from ..approvals.queue.config import QueueConfig
from ..approvals.settings import ApprovalsSettings
from ..config import ImdsSettings, Settings, SinkSettings, StateSettings, VmSettings
from ..fleet.coordinator.config import TrustSettings, load_policy
from ..fleet.coordinator.config import service as sc
from ..health import settings as health_settings
from ..simulator import SimulatorServer
from ..simulator.topology import Topology
from ..sinks.eventhubs.config import EventHubsOptions
from .application import SLOW, SlowApp
from .summary import Verified
from .transport import NAMESPACE, DemoTransport

TIME_SCALE = 60.0  # simulated seconds per real second: 1 min = 1 s
POLL_INTERVAL = 0.25  # s: each agent's IMDS polls and queue receives
HEARTBEAT = 1.0  # s between an agent's heartbeats
MIN_HEALTHY = 3.0  # s a VM still counts as down after its maintenance completed
EVENTHUB, CONTAINER, QUEUES = "scheduled-events", "se-coordinator", "se-approvals-{vm_name}"
GROUP_TAG = "group"
FLEET = {
    "availability_sets": [{"name": "web", "vms": 6, "fault_domains": 3, "update_domains": 5,
                           "tags": {GROUP_TAG: "web"}}],
    "scale_sets": [{"name": "api", "vms": 4, "zones": ["1", "2"], "tags": {GROUP_TAG: "api"}}],
    "standalone": [{"name": "db", "tags": {GROUP_TAG: "db"}}],
}
POLICY = {
    "policy": {"manage": ["Reboot", "Redeploy"], "approve_within": "3h", "min_healthy": MIN_HEALTHY,
               "heartbeat_timeout": "15s", "echo_timeout": "10s", "group_tag": GROUP_TAG,
               "free_slot": "recovered", "recover_timeout": "2m"},
    "budgets": [{"scope": "group", "max_unavailable": 1}, {"scope": "zone", "max_unavailable": 1}],
}
ACTOR = "demo"


class FleetParts:
    """Made in ``workdir`` (keys, state directories); ``start_*`` in order, ``close`` once."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.topology = Topology.from_mapping(FLEET, "the demo's fleet")
        self.sim = SimulatorServer(topology=self.topology, time_scale=TIME_SCALE,
                                   attestation_dir=workdir / "attestation")
        self.transport = DemoTransport(EVENTHUB, CONTAINER)
        key = signing.generate_private_key()
        self.key_file = workdir / "coordinator-signing.key"
        self.key_file.write_bytes(signing.private_key_pem(key))
        self.key_file.chmod(0o600)
        self.public_key_file = workdir / "coordinator-signing.key.pub"
        self.public_key_file.write_text(signing.public_key_line(key) + "\n")
        self.token = "demo-" + signing.keyid(key)  # the page needs none to view from 127.0.0.1
        self.token_file = workdir / "api.token"
        self.token_file.write_text(f"{ACTOR} {self.token}\n")
        self.token_file.chmod(0o600)
        self.stopping = threading.Event()
        self.service: Any = None
        self.api: Any = None
        self.agents: dict[str, Agent] = {}
        self.app = SlowApp(self.sim.history.lives)
        self._threads: list[threading.Thread] = []

    @property
    def vm_names(self) -> tuple[str, ...]:
        return self.topology.vm_names

    # -- starting -------------------------------------------------------------------------------

    def start_simulator(self) -> None:
        self.sim.start()
        self.app.start()

    def start_coordinator(self) -> str:
        """The service, and its API with the page; the page's URL."""
        from ..fleet.coordinator.api import ApiServer, read_tokens
        from ..fleet.coordinator.service import Service

        self.service = Service(self.coordinator_settings(), self.stopping, self.transport.for_coordinator())
        self._thread(self.service.run, "demo-coordinator")
        self.api = ApiServer(self.service, "127.0.0.1", 0, read_tokens(str(self.token_file)))
        self.api.start()
        return f"http://127.0.0.1:{self.api.port}/"

    def start_agents(self) -> None:
        transport = self.transport.for_agent()
        for name in self.vm_names:
            agent = Agent(self.agent_settings(name), transport=transport)
            self.agents[name] = agent
            self._thread(agent.run, f"demo-agent-{name}")

    def _thread(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- settings -------------------------------------------------------------------------------

    def agent_settings(self, name: str) -> Settings:
        """What an agent's configuration file would say, but for the transport: its Event Hubs sink
        and approval queue name no namespace or account (the demo's transport stands in for them)."""
        state = self.workdir / "agents" / name
        state.mkdir(parents=True, exist_ok=True)
        hub = EventHubsOptions(name="eventhub", eventhub=EVENTHUB, fully_qualified_namespace=NAMESPACE)
        queue = QueueConfig(queue=QUEUES, verify_keys_file=str(self.public_key_file),
                            poll_interval=POLL_INTERVAL)
        return Settings(
            imds=ImdsSettings(url=self.sim.vm_url(name), poll_interval=POLL_INTERVAL),
            state=StateSettings(dir=state),
            sinks=[SinkSettings("eventhubs", "eventhub", hub, heartbeat_interval=HEARTBEAT)],
            approvals=ApprovalsSettings(rules=(), queue=queue),
            vm=VmSettings(tags=[GROUP_TAG]),
            health=health_settings.parse(self.app.probe_table()) if name == SLOW else None,
            source=f"se-forwarder demo --fleet ({name})",
        )

    def coordinator_settings(self) -> sc.ServiceSettings:
        """What ``coordinator.toml`` would say, but for the transport (no namespace or account)."""
        access = sc.Access()
        return sc.ServiceSettings(
            name="demo", instance="demo",
            eventhub=sc.EventHubSettings(NAMESPACE, EVENTHUB, "coordinator", access),
            storage=sc.StorageSettings("", CONTAINER, access),
            queues=sc.QueueSettings("", QUEUES, access),
            key_file=str(self.key_file),
            api=sc.ApiSettings("127.0.0.1", 0, str(self.token_file), ""),
            policy=dataclasses.replace(load_policy(POLICY), queue_template=QUEUES),
            log_format="text", log_level="error",
            trust=TrustSettings(require_signed_reports=True,
                                attestation_roots=(str(self.sim.attestation_ca_file),),
                                attestation_intermediates=(str(self.sim.attestation_intermediate_file),),
                                fetch_intermediates=False),
        )

    # -- state ----------------------------------------------------------------------------------

    def watched(self) -> int:
        """How many of the fleet's VMs the coordinator watches, registered (their key bound by an
        attested document) and with their group known, while it acts (0 while it does not)."""
        def count(service: Any) -> int:
            if not service.acting():
                return 0
            now, timeout = time.time(), service.policy.heartbeat_timeout
            names, registered = set(self.vm_names), service.state.identities
            return sum(1 for key, vm in service.state.vms.items()
                       if key in registered and vm.complete and vm.name in names and GROUP_TAG in vm.tags
                       and vm.last_heartbeat is not None and vm.last_heartbeat >= now - timeout)

        return int(self._ask(count, 0))

    def verified(self) -> Verified | None:
        """What the coordinator's edge did with the agents' word (None while it does not answer)."""
        from ..fleet.coordinator.schema import DECISION_PREFIX, PREFIX

        def count(service: Any) -> Verified:
            names = set(self.vm_names)
            registered = sum(1 for key in service.state.identities
                             if key in service.state.vms and service.state.vms[key].name in names)
            decisions = DECISION_PREFIX.removeprefix(PREFIX)  # folded counts types without PREFIX
            stats = service.stats()
            reports = sum(n for kind, n in stats.admission.folded.items() if not kind.startswith(decisions))
            return Verified(registered, reports, sum(stats.admission.refused.values()),
                            stats.admission.waiting)

        answer: Verified | None = self._ask(count, None)
        return answer

    def down(self) -> set[str]:
        """The names of the VMs the coordinator counts unavailable now (empty until it answers)."""
        from ..fleet.coordinator.decide.evaluate import evaluate

        def names(service: Any) -> set[str]:
            counted = evaluate(service.state, service.policy, time.time()).unavailable
            return {service.state.vms[key].name for key in counted if key in service.state.vms}

        return set(self._ask(names, set()))

    def _ask(self, question: Any, otherwise: Any) -> Any:
        """``question(service)`` on the service's own thread, as its API asks (``otherwise`` until
        it answers)."""
        service = self.service
        try:
            return service.submit(lambda: question(service)).result(5)
        except Exception:  # noqa: BLE001 - not answered (yet)
            return otherwise

    def close(self) -> None:
        """Stop the agents, then the coordinator and its API, then the simulator."""
        for agent in self.agents.values():
            agent.stop.set()
        self.stopping.set()
        deadline = time.monotonic() + 20
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        if self.api is not None:
            self.api.stop()
        self.app.close()
        self.sim.stop()
