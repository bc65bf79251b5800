"""A whole fleet on loopback, real parts only: the simulator with an availability set and a scale
set, one agent subprocess per VM (Event Hubs sink with heartbeats, approvals from its queue), the
Event Hubs broker, Azurite blob and queue, and coordinators as subprocesses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator.api import read_tokens
from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology
from se_forwarder.simulator.wire import DEFAULT_RESOURCE_GROUP, DEFAULT_SUBSCRIPTION_ID
from tests.azurite import Azurite
from tests.eventhubs.broker import EventHubsBroker
from tests.support.agent import AgentProcess
from tests.support.config import toml_value
from tests.support.paths import ROOT
from tests.support.ports import free_port

TIME_SCALE = 10.0  # simulated seconds per real second
STARTED_REAL = 2.0  # real seconds an event stays Started
STARTED = STARTED_REAL * TIME_SCALE
NOTICE = 1800 * TIME_SCALE  # 30 min of real time ahead: long notice, inside approve_within
MIN_HEALTHY = 3.0
HEARTBEAT_TIMEOUT = 6.0
ECHO_TIMEOUT = 8.0
TOPOLOGY = Topology.build(
    availability_sets=[{"name": "web", "vms": 6, "fault_domains": 3}],
    scale_sets=[{"name": "api", "vms": 4, "zones": ["1", "2"]}],
)
WEB = [f"web-{i}" for i in range(6)]
API = [f"api_{i}" for i in range(4)]
WEB_ROLL = ["web-0", "web-1", "web-2"]  # the web VMs a rolling test reboots
API_ROLL = ["api_0", "api_1", "api_2"]
API_GROUP = f"group:vmss/{DEFAULT_SUBSCRIPTION_ID}/{DEFAULT_RESOURCE_GROUP}/api".lower()
DECISION = "com.azure.scheduledevents.coordinator."
COORDINATOR_ENV = "COORD_EH_CONN"
BUDGETS = (("group", 1), ("zone", 1))  # [[budgets]] of the coordinators, unless a test says otherwise


def utc(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Coordinator:
    """``se-forwarder coordinator run`` as a subprocess."""

    name: str
    instance: str
    config: Path
    log: Path
    port: int
    token_file: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    _log: Any = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        """The control API's token: the token file's first entry, as the commands send it."""
        return read_tokens(str(self.token_file)).first

    def start(self) -> Coordinator:
        self._log = open(self.log, "ab")  # noqa: SIM115 - closed in stop/kill
        self.proc = subprocess.Popen([sys.executable, "-m", "se_forwarder", "coordinator", "run",
                                      "--config", str(self.config)], env=self.env, cwd=ROOT,
                                     stdout=self._log, stderr=self._log)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()

    def stop(self, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._log.close()
        return code

    def get(self, path: str, **params: Any) -> Any:
        r = requests.get(f"{self.url}{path}", params=params, timeout=10,
                         headers={"Authorization": f"Bearer {self.token}"}, proxies={"http": ""})
        r.raise_for_status()
        return r.json()

    def ready(self) -> bool:
        try:
            return bool(self.get("/v1/state")["acting"])
        except requests.RequestException:
            return False

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "se_forwarder", "coordinator", *args, "--config",
                               str(self.config)], env=self.env, cwd=ROOT, capture_output=True,
                              text=True, timeout=60)

    def cli_ok(self, *args: str) -> str:
        """``coordinator <args>``'s output; the test fails when it does not exit 0."""
        done = self.cli(*args)
        assert done.returncode == 0, f"coordinator {' '.join(args)}: {done.stderr or done.stdout}"
        return done.stdout

    def logged(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out


class Fleet:
    """Everything but the coordinators, started once for a test module."""

    def __init__(self, base: Path, token_name: str | None = None, topology: Topology = TOPOLOGY,
                 azure: AzureOptions | None = None) -> None:
        """``token_name``: the name of the control API's one token in its table (the actor its
        requests are recorded under); without one the token stands alone and is named token-<8 hex>."""
        self.base = base
        self.topology = topology
        self.broker = EventHubsBroker()
        self.blob = Azurite("blob", workdir=base)
        self.queue = Azurite("queue", workdir=base)
        self.server = SimulatorServer(topology=topology, time_scale=TIME_SCALE, azure=azure)
        self.agents: dict[str, AgentProcess] = {}
        self.agent_extra: dict[str, str] = {}  # VM name -> TOML appended to its agent's config
        self.key_file = base / "signing.key"  # the coordinator's Ed25519 private key
        key = signing.generate_private_key()
        self.key_file.write_bytes(signing.private_key_pem(key))
        self.key_file.chmod(0o600)
        self.public_key_file = base / "signing.pub"  # what the agents verify with
        self.public_key_file.write_text(signing.public_key_line(key) + "\n")
        self.token_file = base / "api.token"
        token = "test-token-" + os.urandom(12).hex()
        self.token_file.write_text(f"{token_name} {token}\n" if token_name else token + "\n")
        self.token_file.chmod(0o600)

    def start(self, vms: list[str] | None = None) -> Fleet:
        """Everything, with an agent on each VM of ``vms`` (default: every VM of the topology)."""
        self.broker.start()
        self.blob.start()
        self.queue.start()
        self.server.start()
        for name in self.topology.vm_names if vms is None else vms:
            self.start_agent(name)
        return self

    def agent_env(self, name: str = "") -> dict[str, str]:
        return {"EH_CONN": self.hub_of(name).connection_string(),
                "APPROVALS_CONN": self.queue.connection_string}

    def hub_of(self, name: str) -> EventHubsBroker:
        """The hub VM ``name``'s agent sends to (one for the whole fleet here)."""
        return self.broker

    def start_agent(self, name: str) -> AgentProcess:
        folder = self.base / "agents" / name
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "agent.toml"
        config.write_text("\n".join([
            "[imds]", f"url = {toml_value(self.server.vm_url(name))}", "poll_interval = 0.3",
            "[state]", f"dir = {toml_value(str(folder / 'state'))}",
            "[approvals]", "rules = []",
            "[approvals.queue]", 'queue = "se-approvals-{vm_name}"',
            'connection_string_env = "APPROVALS_CONN"',
            f"verify_keys_file = {toml_value(str(self.public_key_file))}", "poll_interval = 0.6",
            "[[sinks]]", 'type = "eventhubs"', 'eventhub = "scheduled-events"',
            'credential = "connection-string"', 'connection_string_env = "EH_CONN"', "heartbeat_interval = 1",
            "[telemetry]", 'log_format = "json"',
        ]) + "\n" + self.agent_extra.get(name, ""))
        agent = AgentProcess(["--config", str(config)], env=self.agent_env(name),
                             log_path=folder / "agent.log")
        self.agents[name] = agent.start()
        return agent

    def stop(self) -> None:
        for agent in self.agents.values():
            if agent.alive():
                agent.kill()
        self.server.stop()
        self.queue.stop()
        self.blob.stop()
        self.broker.stop()

    def coordinator(self, name: str, instance: str = "a", *, extra: str = "", blob_port: int | None = None,
                    unsigned_reports: bool = False, budgets: tuple[tuple[str, Any], ...] = BUDGETS,
                    broker: EventHubsBroker | None = None, consumer_group: str | None = "coordinator",
                    **policy: Any) -> Coordinator:
        """``coordinator run`` with this fleet's hub (or ``broker``'s, read in ``consumer_group``; None:
        the default one), storage, key and ``[policy]``; ``extra``: more
        TOML appended (``[web]``, ``[[notify]]``, ``[shard]``), with ``{env}`` for the variables given to it;
        ``blob_port``: reach the blob service through this port (a relay) instead of directly;
        ``unsigned_reports``: ``[trust] require_signed_reports = false`` (a fleet mid-upgrade);
        ``budgets``: (scope, max_unavailable) of each ``[[budgets]]``."""
        folder = self.base / "coordinators" / f"{name}-{instance}"
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        config = folder / "coordinator.toml"
        settings = {"min_healthy": MIN_HEALTHY, "heartbeat_timeout": HEARTBEAT_TIMEOUT,
                    "echo_timeout": ECHO_TIMEOUT, "approve_within": "1h", **policy}
        config.write_text("\n".join([
            "[coordinator]", f"name = {toml_value(name)}", f"instance = {toml_value(instance)}",
            "[eventhub]", 'eventhub = "scheduled-events"',
            *([f"consumer_group = {toml_value(consumer_group)}"] if consumer_group else []),
            'credential = "connection-string"', f'connection_string_env = "{COORDINATOR_ENV}"',
            "[storage]", 'credential = "connection-string"', 'connection_string_env = "COORD_BLOB_CONN"',
            'container = "coordinator"', 'lease_duration = "15s"', 'snapshot_interval = "5s"',
            "[queues]", 'credential = "connection-string"', 'connection_string_env = "COORD_QUEUE_CONN"',
            'queue = "se-approvals-{vm_name}"',
            "[signing]", f"key_file = {toml_value(str(self.key_file))}",
            "[api]", f'listen = "127.0.0.1:{port}"', f"token_file = {toml_value(str(self.token_file))}",
            "[telemetry]", 'log_format = "json"',
            *self.trust_section(), *(["require_signed_reports = false"] if unsigned_reports else []),
            "[policy]", *[f"{k} = {toml_value(v)}" for k, v in settings.items()],
            *[line for scope, most in budgets for line in
              ("[[budgets]]", f"scope = {toml_value(scope)}", f"max_unavailable = {toml_value(most)}")],
        ]) + "\n" + extra)
        hub = (broker or self.broker).connection_string()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", COORDINATOR_ENV: hub,
               "COORD_BLOB_CONN": self.blob.connection_string.replace(f":{self.blob.port}/", f":{blob_port}/")
               if blob_port else self.blob.connection_string,
               "COORD_QUEUE_CONN": self.queue.connection_string}
        return Coordinator(name, instance, config, folder / "coordinator.log", port, self.token_file, env)

    def trust_section(self) -> list[str]:
        """``[trust]``: the agents' attested documents chain to the simulator's per-run CA (its
        intermediate given, as Azure's documents leave it out); reports must be signed (default)."""
        return ["[trust]", f"attestation_roots = [{toml_value(str(self.server.attestation_ca_file))}]",
                f"attestation_intermediates = [{toml_value(str(self.server.attestation_intermediate_file))}]",
                "fetch_intermediates = false"]

    # -- what the tests read --------------------------------------------------------------------

    def hub(self, prefix: str = "") -> list[dict[str, Any]]:
        """Every structured CloudEvent on the hub (of types starting with ``prefix``)."""
        out = []
        for stored in self.broker.all_messages():
            body = stored.message().body
            try:
                event = json.loads(body)
            except (TypeError, ValueError):
                continue
            if isinstance(event, dict) and str(event.get("type", "")).startswith(prefix):
                out.append(event)
        return out

    def decisions(self, source_name: str) -> list[dict[str, Any]]:
        source = f"urn:se-forwarder:coordinator:{source_name}"
        return [e for e in self.hub(DECISION) if e["source"] == source]

    def instance(self, name: str) -> dict[str, Any]:
        """What the VM's own agent sends as ``data.Vm`` (its instance metadata, from the simulator's IMDS)."""
        url = self.server.vm_url(name) + "/metadata/instance?api-version=2021-02-01"
        answer = requests.get(url, headers={"Metadata": "true"}, timeout=10, proxies={"http": ""})
        compute = answer.json()["compute"]
        keys = ("vmId", "name", "resourceId", "subscriptionId", "resourceGroupName", "location", "zone",
                "vmScaleSetName", "platformFaultDomain", "platformUpdateDomain", "placementGroupId")
        return {**{k: compute.get(k, "") for k in keys}, "tags": {}, "complete": True}

    def add(self, vm: str, event_type: str = "Reboot", **fields: Any) -> str:
        body = {"EventType": event_type, "Resources": [vm], "NotBeforeInSeconds": NOTICE,
                "StartedSeconds": STARTED, **fields}
        return str(self.server.sim.add_event(body)["EventId"])

    def starts(self) -> dict[str, float]:
        """EventId -> when an approval started it, from the simulator's own record."""
        return {a["EventId"]: utc(a["time"]) for a in self.server.sim.approvals() if a["started"]}

    def requests_for(self, event_id: str) -> list[dict[str, Any]]:
        return [a for a in self.server.sim.approvals() if a["EventId"] == event_id]

    def pending(self) -> set[str]:
        return {e["EventId"] for e in self.server.sim.events()}


def pagerduty_notify(url: str) -> str:
    """``[[notify]]`` to the PagerDuty stand-in at ``url`` (tests/support/pager_receiver.py), its
    routing key in ``PD_ROUTING_KEY``."""
    return "\n".join(["[[notify]]", 'format = "pagerduty"', 'routing_key_env = "PD_ROUTING_KEY"',
                      f"url = {toml_value(url)}"]) + "\n"


def shut_down(fleet: Fleet, *coordinators: Coordinator | None, closing: Any = None) -> None:
    """The end of a module's fleet: ``closing`` closed (an attacker's client), every coordinator
    still running stopped, the fleet stopped, and the end of each coordinator's log printed."""
    if closing is not None:
        closing.close()
    for c in coordinators:
        if c is not None and c.alive():
            c.stop()
    fleet.stop()
    for c in coordinators:
        if c is not None and c.log.exists():
            print(f"--- {c.name}-{c.instance} log (end) ---\n" + c.log.read_text()[-4000:])


class Timeline:
    """When each event Started and completed, from the simulator's own change notices."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.completed: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, _incarnation: int, changes: list[str]) -> None:
        now = time.time()
        with self._lock:
            for line in changes:
                parts = line.split()
                if len(parts) < 3:
                    continue
                event_id = parts[1]
                if parts[2] == "Started":
                    self.started.setdefault(event_id, now)
                elif parts[2:4] == ["removed", "(completed)"]:
                    self.completed.setdefault(event_id, now)
