"""Throttling per client and VM (IMDS allows 5 requests/s), and the first-call delay."""

from __future__ import annotations

import time

from tests.support.waiting import wait_for

EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
HEADERS = {"Metadata": "true"}


def _burst(http, url, n):
    return [http.get(url + EVENTS, headers=HEADERS, timeout=5).status_code for _ in range(n)]


def test_requests_above_the_rate_get_429_with_retry_after(start_sim, http):
    server = start_sim(throttle_rps=5)
    statuses = _burst(http, server.url, 7)
    assert statuses[:5] == [200] * 5
    assert statuses[5:] == [429, 429]
    reply = http.get(server.url + EVENTS, headers=HEADERS, timeout=5)
    assert reply.headers["Retry-After"] == "1"


def test_throttled_client_is_served_again_after_a_second(start_sim, http):
    server = start_sim(throttle_rps=3)
    assert 429 in _burst(http, server.url, 4)
    time.sleep(1.05)
    assert _burst(http, server.url, 1) == [200]


def test_throttling_counts_each_vm_separately(start_sim, http):
    server = start_sim(vm_names=("vm0", "vm1"), throttle_rps=3)
    assert _burst(http, server.vm_url("vm0"), 4)[-1] == 429
    assert _burst(http, server.vm_url("vm1"), 3) == [200, 200, 200]


def test_throttling_is_off_by_default_in_the_python_api(sim, http):
    assert set(_burst(http, sim.url, 20)) == {200}


def test_throttling_can_be_switched_off_at_run_time(start_sim, http):
    server = start_sim(throttle_rps=2)
    server.throttle_rps = None
    assert set(_burst(http, server.url, 10)) == {200}


def test_throttled_requests_are_in_the_request_log(start_sim, http):
    server = start_sim(throttle_rps=1)
    _burst(http, server.url, 2)
    # An entry is logged once its answer is sent: the client may have it a moment earlier.
    wait_for(lambda: len(server.sim.requests()) == 2, 5, "both requests in the log")
    assert [r["status"] for r in server.sim.requests()] == [200, 429]
    assert server.sim.requests()[-1]["fault"] == "throttled"


def test_first_call_is_delayed_and_later_calls_are_not(start_sim, http):
    server = start_sim(first_call_delay=0.6)
    began = time.monotonic()
    assert http.get(server.url + EVENTS, headers=HEADERS, timeout=5).status_code == 200
    first = time.monotonic() - began
    began = time.monotonic()
    http.get(server.url + EVENTS, headers=HEADERS, timeout=5)
    assert first >= 0.55
    assert time.monotonic() - began < 0.3


def test_first_call_delay_is_per_vm(start_sim, http):
    server = start_sim(vm_names=("vm0", "vm1"), first_call_delay=0.4)
    http.get(server.vm_url("vm0") + EVENTS, headers=HEADERS, timeout=5)
    began = time.monotonic()
    http.get(server.vm_url("vm1") + EVENTS, headers=HEADERS, timeout=5)
    assert time.monotonic() - began >= 0.35


def test_first_call_that_times_out_is_followed_by_a_served_one(start_sim, http):
    import requests

    server = start_sim(first_call_delay=0.8)
    began = time.monotonic()
    try:
        http.get(server.url + EVENTS, headers=HEADERS, timeout=0.2)
        raise AssertionError("the first call should have timed out")
    except requests.Timeout:
        pass
    reply = http.get(server.url + EVENTS, headers=HEADERS, timeout=5)
    assert reply.status_code == 200
    assert time.monotonic() - began >= 0.75
