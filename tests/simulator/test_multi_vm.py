"""Several VMs on one simulator, sharing one event list as an availability set does."""

from __future__ import annotations

import pytest

from tests.support.waiting import wait_for

EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
COMPUTE = "/metadata/instance/compute?api-version=2021-02-01"
HEADERS = {"Metadata": "true"}
VMS = ("vm0", "vm1", "vm2")


def _doc(http, base):
    return http.get(base + EVENTS, headers=HEADERS, timeout=5).json()


def _approve(http, base, event_id):
    body = {"StartRequests": [{"EventId": event_id}]}
    return http.post(base + EVENTS, json=body, headers=HEADERS, timeout=5)


@pytest.fixture
def avset(start_sim):
    return start_sim(vm_names=VMS)


def test_each_vm_has_its_own_url_prefix_and_the_first_is_also_at_the_root(avset):
    assert avset.vm_url("vm1") == f"http://127.0.0.1:{avset.port}/vm/vm1"
    assert avset.url == f"http://127.0.0.1:{avset.port}"


def test_every_vm_sees_every_event(avset, http):
    avset.sim.add_event({"Resources": ["vm2"]})
    documents = [_doc(http, avset.vm_url(name)) for name in VMS] + [_doc(http, avset.url)]
    assert all(d == documents[0] for d in documents)
    assert len(documents[0]["Events"]) == 1


def test_each_vm_has_its_own_identity(avset, http):
    computes = [http.get(avset.vm_url(n) + COMPUTE, headers=HEADERS, timeout=5).json() for n in VMS]
    assert [c["name"] for c in computes] == list(VMS)
    assert len({c["vmId"] for c in computes}) == 3
    assert [c["platformFaultDomain"] for c in computes] == ["0", "1", "2"]


def test_an_approval_by_one_vm_starts_the_event_for_all(avset, http):
    event_id = avset.sim.add_event({"Resources": list(VMS)})["EventId"]
    assert _approve(http, avset.vm_url("vm1"), event_id).status_code == 200
    statuses = {_doc(http, avset.vm_url(n))["Events"][0]["EventStatus"] for n in VMS}
    assert statuses == {"Started"}
    assert [(a["vm"], a["started"]) for a in avset.sim.approvals()] == [("vm1", True)]


def test_a_vm_outside_resources_may_approve_too(avset, http):
    event_id = avset.sim.add_event({"Resources": ["vm0"]})["EventId"]
    assert _approve(http, avset.vm_url("vm2"), event_id).status_code == 200
    assert avset.sim.event(event_id)["EventStatus"] == "Started"


def test_multi_tenant_event_starts_only_when_every_listed_vm_approved(start_sim, http):
    server = start_sim(vm_names=VMS, multi_tenant=True)
    event_id = server.sim.add_event({"Resources": ["vm0", "vm1"]})["EventId"]
    assert _approve(http, server.vm_url("vm0"), event_id).status_code == 200
    assert server.sim.event(event_id)["EventStatus"] == "Scheduled"
    assert _approve(http, server.vm_url("vm1"), event_id).status_code == 200
    assert server.sim.event(event_id)["EventStatus"] == "Started"


def test_multi_tenant_event_still_starts_at_not_before(start_sim):
    server = start_sim(vm_names=VMS, multi_tenant=True, time_scale=100)
    event_id = server.sim.add_event({"Resources": list(VMS), "NotBeforeInSeconds": 20})["EventId"]
    server.sim.approve([event_id], vm="vm0")
    assert server.sim.wait_until(lambda: server.sim.event(event_id)["EventStatus"] == "Started", 3)


def test_unknown_vm_prefix_is_404(avset, http):
    assert http.get(avset.url + "/vm/vm9" + EVENTS, headers=HEADERS, timeout=5).status_code == 404
    with pytest.raises(KeyError):
        avset.vm_url("vm9")


def test_the_request_log_tells_vms_apart(avset, http):
    # Only this test's requests count: an agent of another test may still poll a port this
    # simulator now has (agents ask for the newest api-version; this test for an older one).
    events = "/metadata/scheduledevents?api-version=2019-08-01"
    before = len(avset.sim.requests())
    for base in (avset.vm_url("vm2"), avset.url):
        assert http.get(base + events, headers=HEADERS, timeout=5).status_code == 200
    ours = ("/vm/vm2" + events, events)
    # An entry is logged once its answer is sent: the client may have it a moment earlier.
    wait_for(lambda: len([r for r in avset.sim.requests()[before:] if r["path"] in ours]) == 2, 5,
             "both requests in the log")
    mine = avset.sim.requests()[before:]
    assert [r["vm"] for r in mine if r["path"] == "/vm/vm2" + events] == ["vm2"]
    assert [r["vm"] for r in mine if r["path"] == events] == ["vm0"]
    assert all(r["vm"] == "vm2" for r in avset.sim.requests(vm="vm2"))


def test_cli_serves_the_vms_given_by_vms(cli_simulator, http):
    cli = cli_simulator("--vms", "web0,web1", "--throttle-rps", "0")
    compute = http.get(f"{cli.url}/vm/web1{COMPUTE}", headers=HEADERS, timeout=5).json()
    assert compute["name"] == "web1"
    assert http.get(cli.url + COMPUTE, headers=HEADERS, timeout=5).json()["name"] == "web0"
