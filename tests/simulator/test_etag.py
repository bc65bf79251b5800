"""ETag and If-None-Match: an unchanged document costs a 304 and no body."""

from __future__ import annotations

EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
HEADERS = {"Metadata": "true"}


def test_document_carries_an_etag(sim, http):
    reply = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5)
    assert reply.headers["ETag"].startswith('"')


def test_if_none_match_with_the_current_etag_is_304_without_body(sim, http):
    etag = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5).headers["ETag"]
    reply = http.get(sim.url + EVENTS, headers={**HEADERS, "If-None-Match": etag}, timeout=5)
    assert reply.status_code == 304
    assert reply.content == b""
    assert reply.headers["ETag"] == etag


def test_changed_document_answers_200_with_a_new_etag(sim, http):
    etag = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5).headers["ETag"]
    sim.sim.add_event({})
    reply = http.get(sim.url + EVENTS, headers={**HEADERS, "If-None-Match": etag}, timeout=5)
    assert reply.status_code == 200
    assert reply.headers["ETag"] != etag
    assert len(reply.json()["Events"]) == 1


def test_weak_and_listed_etags_match_too(sim, http):
    etag = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5).headers["ETag"]
    header = f'"other", W/{etag}'
    reply = http.get(sim.url + EVENTS, headers={**HEADERS, "If-None-Match": header}, timeout=5)
    assert reply.status_code == 304


def test_etag_differs_between_api_versions_showing_different_fields(sim, http):
    sim.sim.add_event({})
    old = http.get(sim.url + EVENTS.replace("2020-07-01", "2017-08-01"), headers=HEADERS, timeout=5)
    new = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5)
    assert old.headers["ETag"] != new.headers["ETag"]


def test_304_is_still_subject_to_the_metadata_header_check(sim, http):
    etag = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5).headers["ETag"]
    assert http.get(sim.url + EVENTS, headers={"If-None-Match": etag}, timeout=5).status_code == 400


def test_without_etag_every_poll_is_200_with_the_full_document_and_no_etag(start_sim, http):
    sim = start_sim(etag=False)
    sim.sim.add_event({})
    first = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5)
    again = http.get(sim.url + EVENTS, headers={**HEADERS, "If-None-Match": "*"}, timeout=5)
    assert "ETag" not in first.headers
    assert (again.status_code, again.content) == (200, first.content)


def test_etag_can_be_switched_off_through_the_control_api(sim, http):
    reply = http.post(sim.url + "/control/settings", json={"etag": False}, timeout=5)
    assert reply.json()["etag"] is False
    assert "ETag" not in http.get(sim.url + EVENTS, headers=HEADERS, timeout=5).headers


def test_etag_setting_must_be_a_boolean(sim, http):
    reply = http.post(sim.url + "/control/settings", json={"etag": "no"}, timeout=5)
    assert reply.status_code == 400
    assert "etag must be true or false" in reply.json()["error"]


def test_no_etag_flag_serves_the_documented_imds(cli_simulator, http):
    cli = cli_simulator("--no-etag")
    reply = http.get(cli.url + EVENTS, headers=HEADERS, timeout=5)
    assert reply.status_code == 200 and "ETag" not in reply.headers
