"""The simulator imitates the other Scheduled Events servers a user may point a handler at:
NotBefore in ISO 8601 and a new EventId for each state, as Microsoft's scheduled-events mock
server serves them, and an IMDS that hangs for a while, whoever connects meanwhile."""

from __future__ import annotations

import concurrent.futures
import email.utils
import re
from datetime import datetime

import pytest
import requests

from tests.simulator.conftest import HEADERS, events_url, scenario_done

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _document(server, http):
    return http.get(events_url(server.url), headers=HEADERS, timeout=5).json()


def test_not_before_in_iso_8601_names_the_same_second_as_in_rfc_1123(start_sim, http):
    server = start_sim(not_before_format="iso8601")
    server.sim.add_event({"EventType": "Reboot"})
    iso = _document(server, http)["Events"][0]["NotBefore"]
    assert ISO.match(iso), iso
    http.post(server.url + "/control/settings", json={"not_before_format": "rfc1123"}, timeout=5)
    rfc = _document(server, http)["Events"][0]["NotBefore"]
    assert datetime.fromisoformat(iso) == email.utils.parsedate_to_datetime(rfc)


def test_not_before_format_is_a_setting_and_a_bad_one_is_refused(sim, http):
    settings = http.get(sim.url + "/control/settings", timeout=5).json()
    assert settings["not_before_format"] == "rfc1123"  # as IMDS
    bad = http.post(sim.url + "/control/settings", json={"not_before_format": "unix"}, timeout=5)
    assert bad.status_code == 400 and "not_before_format" in bad.json()["error"]


def test_a_not_before_in_iso_8601_is_accepted_from_the_control_api(sim):
    event = sim.sim.add_event({"EventType": "Reboot", "NotBefore": "2030-01-02T03:04:05Z"})
    assert event["NotBefore"] == "Wed, 02 Jan 2030 03:04:05 GMT"


def test_started_events_show_a_new_event_id_when_the_scenario_asks_for_it(start_sim, http,
                                                                          sample_client):
    server = start_sim(time_scale=60)
    server.sim.start_scenario("live-migration", new_event_id_per_state=True)
    client = sample_client(server.url)  # approves the 5 s Freeze at once
    client.run_until(scenario_done(http, server.url), timeout=30)
    scheduled, started = client.seen.items()
    assert scheduled[1] == ["Scheduled", "gone"] and started[1] == ["Started", "gone"]
    assert client.approved == [scheduled[0]]
    assert scheduled[0] != started[0]


def test_an_event_is_found_by_the_event_id_it_shows_now(sim, http):
    sim.sim.start_scenario({"new_event_id_per_state": True, "events": [{"EventType": "Reboot"}]},
                           start="immediately")
    (first,) = sim.sim.events()
    http.post(events_url(sim.url), headers=HEADERS, timeout=5,
              json={"StartRequests": [{"EventId": first["EventId"]}]})
    (now,) = _document(sim, http)["Events"]
    assert now["EventStatus"] == "Started" and now["EventId"] != first["EventId"]
    assert sim.sim.event(now["EventId"])["EventStatus"] == "Started"
    sim.sim.delete_event(now["EventId"])
    assert _document(sim, http)["Events"] == []


def test_a_bad_new_event_id_per_state_is_refused(sim, http):
    reply = http.post(sim.url + "/control/scenario", timeout=5,
                      json={"name": "live-migration", "new_event_id_per_state": "yes"})
    assert reply.status_code == 400 and "new_event_id_per_state" in reply.json()["error"]


def test_a_hang_for_some_seconds_holds_every_request_meanwhile_on_any_connection(sim):
    sim.sim.add_fault({"hang": True, "seconds": 1.5})

    def poll():  # a new connection each time, as a restarted client has
        with requests.Session() as fresh:
            fresh.trust_env = False
            return fresh.get(events_url(sim.url), headers=HEADERS, timeout=0.4)

    for _ in range(2):
        with pytest.raises(requests.Timeout):
            poll()
    sim.sim.wait_until(lambda: not sim.sim.faults(), timeout=5)
    assert poll().status_code == 200
    assert [r["fault"] for r in sim.sim.requests()] == ["hang", "hang", None]


def test_requests_held_by_a_hang_stay_unanswered_after_it_ends(sim):
    sim.sim.add_fault({"hang": True, "seconds": 0.5})
    with concurrent.futures.ThreadPoolExecutor(1) as pool, requests.Session() as http:
        http.trust_env = False
        held = pool.submit(http.get, events_url(sim.url), headers=HEADERS, timeout=3)
        sim.sim.wait_until(lambda: sim.holding() == 1, timeout=5)
        sim.sim.wait_until(lambda: not sim.sim.faults(), timeout=5)
        with requests.Session() as other:
            other.trust_env = False
            assert other.get(events_url(sim.url), headers=HEADERS, timeout=5).status_code == 200
        assert sim.holding() == 1  # the request made during the hang is still held
        with pytest.raises(requests.Timeout):
            held.result(timeout=10)
