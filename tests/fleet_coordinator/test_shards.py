"""Coordinators sharded by subscription, on one hub and on two (issue 34), with real parts only.

The simulator holds three availability sets, each in a subscription of its own: ``web`` (EU),
``db`` (US) and ``batch`` (AP), two VMs each, one agent subprocess per VM signing its reports.
The web and db agents send to one Event Hub (broker A), the batch agents to another (broker B).
Three ``coordinator run`` subprocesses share the coordinator name ``prod`` and one storage
container: shard ``eu`` and shard ``us`` both read hub A (each in its own consumer group, the only
ones broker A knows), shard ``ap`` reads hub B. One Reboot per set is scheduled at once; each shard
approves its own, and no shard ever approves, or even counts, another shard's VM.

The attacker of the last test is root on db-1 (a US VM): the hub's send right, db-1's identity key
and its attested documents. It registers on the EU shard by claiming EU's subscription.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.approvals import signing
from se_forwarder.identity.attested import nonce_for
from se_forwarder.simulator.topology import Topology
from tests.azurite import needs_blob_and_queue
from tests.eventhubs.broker import EventHubsBroker
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.waiting import wait_for

from .fleet import DECISION, Coordinator, Fleet, shut_down

pytestmark = [
    pytest.mark.slow,
    needs_blob_and_queue,
]

EU, US, AP = ("e0000000-0000-4000-8000-00000000000e", "a0000000-0000-4000-8000-00000000000a",
              "c0000000-0000-4000-8000-00000000000c")
SETS = {"eu": ("web", EU), "us": ("db", US), "ap": ("batch", AP)}
VMS = {shard: [f"{name}-0", f"{name}-1"] for shard, (name, _) in SETS.items()}
TOPOLOGY = Topology.build(availability_sets=[{"name": name, "vms": 2, "subscription": sub}
                                             for name, sub in SETS.values()])
PREFIX = "com.azure.scheduledevents."


class ShardedFleet(Fleet):
    """The fleet of fleet.py on two hubs: the batch VMs' agents send to a second broker."""

    def __init__(self, base: Path) -> None:
        super().__init__(base, topology=TOPOLOGY)
        self.broker.consumer_groups = ("coordinator-eu", "coordinator-us")  # nothing else reads A
        self.second = EventHubsBroker(consumer_groups=("coordinator-ap",))

    def hub_of(self, name: str) -> EventHubsBroker:
        return self.second if name in VMS["ap"] else self.broker

    def start(self, vms: list[str] | None = None) -> Fleet:
        self.second.start()
        return super().start(vms)

    def stop(self) -> None:
        super().stop()
        self.second.stop()

    def decisions_of(self, shard: str) -> list[dict[str, Any]]:
        broker = self.second if shard == "ap" else self.broker
        events = [json.loads(m.message().body) for m in broker.all_messages()]
        return [e for e in events if str(e.get("type", "")).startswith(DECISION)
                and e.get("source") == f"urn:se-forwarder:coordinator:prod/{shard}"]


def shard_section(shard: str, ports: dict[str, int], peers: tuple[str, ...]) -> str:
    listed = ", ".join(f'{p} = "http://127.0.0.1:{ports[p]}"' for p in peers)
    return f'\n[shard]\nname = "{shard}"\nsubscriptions = ["{SETS[shard][1]}"]\npeers = {{ {listed} }}\n'


def known(status: dict[str, Any]) -> bool:
    return bool(status["identities"]["registered"] == 2 and status["fleet"]["watched"] == 2)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("shards")
    fleet = ShardedFleet(base)
    running: dict[str, Coordinator] = {}
    try:
        fleet.start()
        made = {shard: fleet.coordinator("prod", shard, consumer_group=None,
                                         broker=fleet.second if shard == "ap" else None)
                for shard in SETS}
        ports = {shard: c.port for shard, c in made.items()}
        for shard, c in made.items():
            peers = tuple(p for p in SETS if p != shard)
            c.config.write_text(c.config.read_text() + shard_section(shard, ports, peers))
            running[shard] = c.start()
        for shard, c in running.items():
            wait_for(c.ready, 60, f"shard {shard} to lead")
            wait_for(lambda c=c: known(c.get("/v1/status")), 90, f"shard {shard}'s VMs registered, watched")
        events = {shard: fleet.add(VMS[shard][0]) for shard in SETS}
        wait_for(lambda: set(events.values()) <= set(fleet.starts()), 90, "each shard's event approved")
        yield {"fleet": fleet, "coordinators": running, "events": events}
    finally:
        shut_down(fleet, *running.values())


def names_in(decision: dict[str, Any]) -> set[str]:
    data = decision.get("data") or {}
    target = data.get("Target") or {}
    return {a["name"] for a in data.get("Affected") or []} | ({target["name"]} if target else set())


def test_two_shards_never_approve_each_others_vms(shards):
    fleet = shards["fleet"]
    for shard in SETS:
        approvals = [d for d in fleet.decisions_of(shard) if d["type"] == DECISION + "approve"]
        assert [d["data"]["EventId"] for d in approvals] == [shards["events"][shard]]
        for decision in fleet.decisions_of(shard):
            assert names_in(decision) <= set(VMS[shard]), f"{shard} decided for {names_in(decision)}"
    for shard, event_id in shards["events"].items():
        assert {a["vm"] for a in fleet.requests_for(event_id)} <= set(VMS[shard])


def test_shards_on_one_hub_each_keep_only_their_subscription_dropping_the_others_unverified(shards):
    for shard, other in (("eu", "us"), ("us", "eu")):
        status = shards["coordinators"][shard].get("/v1/status", all="1")
        assert status["fleet"]["vms"] == 2 and status["identities"]["registered"] == 2
        refused = status["service"]["refused"]
        assert refused["other-shard"] > 0  # the other set's registrations and heartbeats
        assert refused["identity-subscription"] == refused["unregistered"] == refused["bad-signature"] == 0
        assert status["service"]["shard"]["subscriptions"] == [SETS[shard][1]]
        groups = shards["coordinators"][shard].get("/v1/groups")
        assert not any(vm["name"].startswith(SETS[other][0]) for g in groups for vm in g["vms"])


def test_a_shard_on_a_hub_of_its_own_sees_no_other_shards_events(shards):
    status = shards["coordinators"]["ap"].get("/v1/status")
    assert status["fleet"]["vms"] == 2 and status["service"]["refused"]["other-shard"] == 0


def test_each_shard_keeps_its_own_lease_and_snapshot_in_the_shared_container(shards):
    from azure.storage.blob import ContainerClient

    container = ContainerClient.from_connection_string(shards["fleet"].blob.connection_string, "coordinator")
    wait_for(lambda: {b.name for b in container.list_blobs()} >= {
        f"prod/{s}/{blob}" for s in SETS for blob in ("leader", "snapshot.json.gz")}, 30,
        "a lease and a snapshot per shard")
    leaders = {s: shards["coordinators"][s].get("/v1/state")["role"] for s in SETS}
    assert leaders == dict.fromkeys(SETS, "leader")  # three leaders at once: one per shard


def test_status_shows_every_shard_and_names_one_that_does_not_answer(shards):
    eu = shards["coordinators"]["eu"]
    text = eu.cli_ok("status", "--shards")
    lines = text.splitlines()
    assert lines[0] == "3 shard(s):"
    for shard in ("eu", "us", "ap"):
        assert any(f"prod/{shard}: leader, 2 VMs" in line and SETS[shard][1] in line for line in lines[1:4])
        assert f"coordinator prod/{shard}: this instance {shard} is leader" in text

    gone = eu.config.with_name("with-a-gone-peer.toml")
    silent = f"http://127.0.0.1:{free_port()}"
    gone.write_text(eu.config.read_text().replace("peers = { ", f'peers = {{ gone = "{silent}", '))
    command = ["coordinator", "status", "--shards", "--json", "--config", str(gone)]
    done = subprocess.run([sys.executable, "-m", "se_forwarder", *command], env=eu.env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().endswith(f"1 of 4 shard(s) did not answer: {silent}")
    answers = {r["url"]: r for r in json.loads(done.stdout)["shards"]}  # the others all shown
    assert "cannot reach the coordinator" in answers.pop(silent)["error"]
    assert sorted(r["status"]["service"]["name"] for r in answers.values()) == [f"prod/{s}" for s in
                                                                                 ("ap", "eu", "us")]


def test_the_page_names_its_shard_and_links_to_the_others(shards):
    from tests.fleet_page.browser import chrome, console_errors

    eu, us = shards["coordinators"]["eu"], shards["coordinators"]["us"]
    driver = chrome()
    try:
        driver.get(f"{eu.url}/")
        wait_for(lambda: driver.find_elements("css selector", "#shards a[data-shard='us']"), 30,
                 "the page's links to the other shards")
        assert driver.find_element("css selector", "#shards .shard-self").text == "shard eu"
        assert sorted(a.text for a in driver.find_elements("css selector", "#shards a")) == ["shard ap",
                                                                                              "shard us"]
        driver.find_element("css selector", "#shards a[data-shard='us']").click()
        wait_for(lambda: driver.current_url.rstrip("/") == us.url and "prod/us" in driver.find_element(
            "id", "service").text, 30, "the US shard's page")
        assert console_errors(driver) == []
    finally:
        driver.quit()


def test_a_vm_that_claims_another_shards_subscription_is_refused_by_its_attested_document(shards):
    from azure.eventhub import EventData, EventHubProducerClient

    fleet, eu = shards["fleet"], shards["coordinators"]["eu"]
    key_file = fleet.base / "agents" / "db-1" / "state" / "identity.key"
    key = signing.load_private_key(key_file.read_bytes(), str(key_file))
    url = fleet.server.vm_url("db-1")
    compute = requests.get(f"{url}/metadata/instance?api-version=2021-02-01", headers={"Metadata": "true"},
                           timeout=10, proxies={"http": ""}).json()["compute"]
    nonce = nonce_for(signing.raw_public(key))
    document = requests.get(f"{url}/metadata/attested/document?api-version=2021-02-01&nonce={nonce}",
                            headers={"Metadata": "true"}, timeout=10, proxies={"http": ""}).json()
    claimed = {k: compute.get(k, "") for k in ("vmId", "name", "resourceId", "resourceGroupName", "location")}
    claimed |= {"subscriptionId": EU, "complete": True, "tags": {}}  # the lie: EU's subscription
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    identity = {"specversion": "1.0", "type": PREFIX + "identity", "source": compute["resourceId"],
                "id": f"identity/{compute['vmId']}/{signing.keyid(key)}/{int(now)}",
                "subject": compute["vmId"], "time": stamp, "datacontenttype": "application/json",
                "vmid": compute["vmId"],
                "data": {"PublicKey": signing.public_key_line(key), "Nonce": nonce,
                         "AttestedDocument": document, "AgentVersion": "0.1.0", "Vm": claimed}}
    before = eu.get("/v1/status")["service"]["refused"]["identity-subscription"]
    producer = EventHubProducerClient.from_connection_string(fleet.agent_env("db-1")["EH_CONN"])
    try:
        batch = producer.create_batch()
        data = EventData(json.dumps(signing.sign(identity, key), separators=(",", ":")))
        data.content_type = "application/cloudevents+json"
        batch.add(data)
        producer.send_batch(batch)
    finally:
        producer.close()
    wait_for(lambda: eu.get("/v1/status")["service"]["refused"]["identity-subscription"] > before, 30,
             "the lying registration refused by its attested subscription")
    status = eu.get("/v1/status")
    assert status["identities"]["registered"] == 2 and status["fleet"]["vms"] == 2


def test_check_reads_the_hub_in_the_shards_own_consumer_group(shards):
    eu = shards["coordinators"]["eu"]
    done = eu.cli("check", "--imds-url", shards["fleet"].server.vm_url("web-0"))
    first = done.stdout.splitlines()[0]
    assert "(shard prod/eu of 1 subscription(s), consumer group coordinator-eu)" in first
    hub = next(line for line in done.stdout.splitlines() if " event hub: " in line)
    assert hub.startswith("ok") and "coordinator-eu" in hub, done.stdout  # broker A knows no other group
