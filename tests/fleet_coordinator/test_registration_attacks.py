"""Attacks on the coordinator's trust edge by one compromised VM (issue 31), run against real parts.

The fleet of test_azure_feed.py (the simulator playing IMDS and Azure's side with its Event Grid feed
on a second broker, agents as subprocesses signing their reports, the agents' Event Hubs broker,
Azurite blob and queue) and one live ``coordinator run`` with ``[azure]``, its verifier's worker
processes on (the default), intermediates fetched only under a local stand-in for Azure's PKI path
(no test may reach the internet), and smaller ``[limits]`` for the held pool. The attacker is this
test process holding what root on a VM holds: the agents' Event Hubs send connection string. Each
test runs one attack and checks that it was contained (the rollout kept its budgets, the API and
the Azure feed went on) and counted.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.approvals import signing
from tests.azurite import needs_blob_and_queue
from tests.support.forged_registrations import forged, identity_event
from tests.support.waiting import wait_for

from .azure_fleet import AGENTLESS, API, DB, AzureFleet
from .fleet import MIN_HEALTHY, Timeline, shut_down

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    needs_blob_and_queue,
]

PREFIX = "com.azure.scheduledevents."
SEND_RIGHT = 150  # registrations a second: about 1 MB/s of 6 KB documents, one throughput unit's ingress
HELD_BYTES, HELD_PER_VM = 65536, 8192


class Pki(http.server.ThreadingHTTPServer):
    """A stand-in for Azure's PKI host: 404 for everything, every request path counted."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                outer.paths.append(self.path)
                self.send_response(404)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class AttackedFleet(AzureFleet):
    def __init__(self, base: Path, pki: Pki) -> None:
        super().__init__(base)
        self.pki = pki

    def trust_section(self) -> list[str]:
        return ["[trust]", f'attestation_roots = ["{self.server.attestation_ca_file}"]',
                f'attestation_intermediates = ["{self.server.attestation_intermediate_file}"]',
                "fetch_intermediates = true", f'intermediate_paths = ["{self.pki.url("/pkiops/certs/")}"]']


class Attacker:
    """The agents' send right on the hub, used as fast as one throughput unit lets a sender."""

    def __init__(self, fleet: AzureFleet) -> None:
        from azure.eventhub import EventHubProducerClient

        self.fleet = fleet
        self.producer = EventHubProducerClient.from_connection_string(fleet.agent_env()["EH_CONN"])
        self.key = signing.generate_private_key()
        self.sent = 0

    def publish(self, *events: dict[str, Any]) -> None:
        from azure.eventhub import EventData

        batch = self.producer.create_batch()
        for event in events:
            data = EventData(json.dumps(event, separators=(",", ":")))
            data.content_type = "application/cloudevents+json"
            try:
                batch.add(data)
            except ValueError:
                self.producer.send_batch(batch)
                batch = self.producer.create_batch()
                batch.add(data)
        self.producer.send_batch(batch)
        self.sent += len(events)

    def flood(self, stop: threading.Event, kind: str = "chain_bomb") -> None:
        """Forged registrations at SEND_RIGHT a second until ``stop``, each a new vmId and key."""
        authority = self.fleet.server.attestation
        while not stop.is_set():
            began = time.monotonic()
            self.publish(*(forged(kind, authority) for _ in range(SEND_RIGHT // 10)))
            stop.wait(max(0.0, 0.1 - (time.monotonic() - began)))

    def close(self) -> None:
        self.producer.close()


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("registration-attacks")
    pki = Pki()
    threading.Thread(target=pki.serve_forever, daemon=True).start()
    fleet = AttackedFleet(base, pki)
    timeline = Timeline()
    fleet.server.sim.subscribe(timeline)
    coordinator = attacker = None
    try:
        fleet.start([vm for vm in DB + API if vm not in AGENTLESS])
        coordinator = fleet.azure_coordinator("edge")
        with open(coordinator.config, "a", encoding="utf-8") as config:
            config.write(f"\n[limits]\nheld_bytes = {HELD_BYTES}\nheld_bytes_per_vm = {HELD_PER_VM}\n")
        coordinator.start()
        wait_for(coordinator.ready, 90, "the coordinator to lead")
        wait_for(lambda: coordinator.get("/v1/status")["fleet"]["watched"] == 8, 90, "every VM watched")
        attacker = Attacker(fleet)
        yield {"fleet": fleet, "coordinator": coordinator, "attacker": attacker, "timeline": timeline,
               "pki": pki}
    finally:
        shut_down(fleet, coordinator, closing=attacker)
        pki.shutdown()


def metric(coordinator: Any, name: str, **labels: str) -> float:
    text = requests.get(f"{coordinator.url}/metrics", timeout=10, proxies={"http": ""}).text
    wanted = "se_forwarder_coordinator_" + name + (
        "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def refused(coordinator: Any) -> dict[str, int]:
    return dict(coordinator.get("/v1/status", decisions="0")["service"]["refused"])


class Poller:
    """Asks /v1/status every 0.25 s with a generous client timeout; records every answer."""

    def __init__(self, coordinator: Any) -> None:
        self.coordinator, self.answers, self.failures = coordinator, 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        http_ = requests.Session()
        http_.trust_env = False
        headers = {"Authorization": f"Bearer {self.coordinator.token}"}
        while not self.stop.wait(0.25):
            try:
                answer = http_.get(f"{self.coordinator.url}/v1/status", headers=headers, timeout=10)
                if answer.status_code == 200:
                    self.answers += 1
                else:
                    self.failures.append(f"HTTP {answer.status_code}")
            except requests.RequestException as exc:
                self.failures.append(type(exc).__name__)


def test_a_chain_bomb_flood_during_a_rollout_leaves_the_budgets_the_api_and_the_feed_untouched(scene):
    fleet, coordinator, attacker, timeline = scene["fleet"], scene["coordinator"], scene["attacker"], \
        scene["timeline"]
    before = refused(coordinator)
    feed_before = metric(coordinator, "azure_total", what="feed-folded")
    stop, poller = threading.Event(), Poller(coordinator)
    flood = threading.Thread(target=attacker.flood, args=(stop,), daemon=True)
    flood.start()
    poller.thread.start()
    try:
        # the flood is under way before the rollout starts: five seconds of it at full rate (longer
        # where a loaded machine forges them more slowly)
        wait_for(lambda: attacker.sent >= 5 * SEND_RIGHT, 120, "the flood to be under way")
        ids = {vm: fleet.add(vm, "Reboot", NotBeforeInSeconds=18000 + 10 * i)
               for i, vm in enumerate(["db-0", "db-1", "db-4"])}  # db-4 is agentless: Azure's feed and ARM
        wait_for(lambda: all(ids[vm] in timeline.completed for vm in ids), 300, "the rollout to finish")
    finally:
        stop.set()
        flood.join(30)
        poller.stop.set()
        poller.thread.join(30)
    sent = attacker.sent
    assert sent >= 1000, f"the attacker sent only {sent} forged registrations"
    assert poller.failures == [] and poller.answers > 20, poller.failures
    spans = sorted((timeline.started[ids[vm]], timeline.completed[ids[vm]], vm) for vm in ids)
    for (_s1, end1, vm1), (start2, _e2, vm2) in zip(spans, spans[1:], strict=False):
        assert start2 - end1 >= MIN_HEALTHY - 0.2, f"{vm2} started {start2 - end1:.1f} s after {vm1} ended"
    assert metric(coordinator, "azure_total", what="feed-folded") > feed_before, "the Azure feed stalled"
    wait_for(lambda: sum(refused(coordinator).values()) - sum(before.values()) >= sent, 120,
             "every forged registration to be refused and counted")
    counts = refused(coordinator)
    assert counts["identity-certificates"] - before.get("identity-certificates", 0) \
        + counts["identity-rate"] - before.get("identity-rate", 0) == sent
    assert coordinator.get("/v1/status")["identities"]["registered"] == 6  # only the agents


def test_reports_held_for_unregistered_vms_stay_within_their_bytes_and_every_drop_is_counted(scene):
    coordinator, attacker = scene["coordinator"], scene["attacker"]
    before = refused(coordinator).get("unregistered", 0)

    def report(vm_id: str, padding: int) -> dict[str, Any]:
        return signing.sign({"specversion": "1.0", "type": PREFIX + "heartbeat", "id": str(uuid.uuid4()),
                             "source": "/subscriptions/x", "subject": vm_id, "vmid": vm_id,
                             "time": "2026-01-01T00:00:00Z",
                             "data": {"Events": [], "Padding": "x" * padding}}, attacker.key)

    fakes = [str(uuid.uuid4()) for _ in range(40)]
    small = [report(vm, 2000) for vm in fakes for _ in range(6)]  # 12 KB a vmId, 480 KB in all
    attacker.publish(*small, *(report(f"not-a-guid-{i}", 100) for i in range(20)),
                     *(report(str(uuid.uuid4()), 20000) for _ in range(5)))
    total = len(small) + 25
    wait_for(lambda: refused(coordinator).get("unregistered", 0) - before
             + metric(coordinator, "waiting") >= total, 60, "every report held or dropped")
    assert metric(coordinator, "held_bytes") <= HELD_BYTES
    held = metric(coordinator, "waiting")
    assert 0 < held <= HELD_BYTES // 2000 and refused(coordinator)["unregistered"] - before == total - held


@functools.cache
def _unknown_issuer_key() -> Any:
    """The key of the issuing CA the forged certificates name: one no trust store knows, made once."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _forged_with_issuer(fleet: AzureFleet, url: str) -> dict[str, Any]:
    """A registration whose self-signed signing certificate names ``url`` as its CA Issuers."""
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    from se_forwarder.identity.attested import nonce_for
    from tests.support import forged_registrations as kit

    key, agent, vm_id = kit._rsa(), signing.generate_private_key(), str(uuid.uuid4())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "metadata.azure.com")])
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Microsoft Azure RSA TLS Issuing CA 99")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.AuthorityInformationAccess([x509.AccessDescription(
                x509.AuthorityInformationAccessOID.CA_ISSUERS, x509.UniformResourceIdentifier(url))]), False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("westeurope.metadata.azure.com")]),
                           False)
            .sign(_unknown_issuer_key(), hashes.SHA256()))
    import base64

    der = kit._signed_data(kit._claims(vm_id, nonce_for(signing.raw_public(agent))), cert, key, [])
    return identity_event(vm_id, agent, {"encoding": "pkcs7", "signature": base64.b64encode(der).decode()})


def test_forged_intermediate_urls_fetch_nothing_off_azures_paths_and_stay_bounded_on_them(scene):
    fleet, coordinator, attacker, pki = scene["fleet"], scene["coordinator"], scene["attacker"], scene["pki"]
    before = refused(coordinator).get("identity-untrusted", 0)
    elsewhere = [_forged_with_issuer(fleet, pki.url(f"/anything/{i}.crt")) for i in range(30)]
    on_path = [_forged_with_issuer(fleet, pki.url(f"/pkiops/certs/forged-{i}.crt")) for i in range(80)]
    attacker.publish(*elsewhere, *on_path)
    wait_for(lambda: refused(coordinator).get("identity-untrusted", 0) - before
             >= len(elsewhere) + len(on_path), 120, "every forged registration refused as untrusted")
    assert not [p for p in pki.paths if not p.startswith("/pkiops/certs/")], "fetched off Azure's PKI paths"
    assert 0 < len(pki.paths) <= len(on_path)  # one request a URL at most, each only after the cheap checks
    assert metric(coordinator, "intermediates_missing") <= 64  # failures remembered: bounded
    warnings = [line for line in coordinator.log.read_text(errors="replace").splitlines()
                if "no intermediate certificate from" in line]
    assert 1 <= len(warnings) <= 3, "the failures are said once a minute, not once each"


def test_a_report_whose_data_is_a_string_is_refused_and_makes_no_record(scene):
    coordinator, attacker = scene["coordinator"], scene["attacker"]
    before = refused(coordinator).get("bad-data", 0)
    vms_before = coordinator.get("/v1/status")["fleet"]
    claimed = str(uuid.uuid4())
    attacker.publish(signing.sign({
        "specversion": "1.0", "type": PREFIX + "heartbeat", "id": str(uuid.uuid4()),
        "source": "/subscriptions/x", "subject": claimed, "vmid": claimed, "time": "2026-01-01T00:00:00Z",
        "data": "a string skips the vmId check"}, attacker.key))
    wait_for(lambda: refused(coordinator).get("bad-data", 0) == before + 1, 30,
             "the report refused as bad-data")
    assert claimed not in json.dumps(coordinator.get("/v1/status", all="1"))
    # the fleet's size: who is unavailable meanwhile moves with the agents' heartbeats, not the attack
    assert coordinator.get("/v1/status")["fleet"]["vms"] == vms_before["vms"]
