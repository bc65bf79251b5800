"""Calls with deadlines, and what the coordinator says about the parts it depends on (reach.py)."""

from __future__ import annotations

import logging
import threading

import pytest

from se_forwarder.fleet.coordinator.api import render_status
from se_forwarder.fleet.coordinator.azure import Overdue, Reach, begin, parts


class Refused(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


def test_a_call_that_returns_in_time_gives_its_result_and_counts_as_an_answer() -> None:
    reach = Reach("storage")
    assert reach.call(lambda: 42, 5, "asking") == 42
    assert reach.reachable and reach.last_success is not None and reach.failures == 0


def test_a_call_without_an_answer_by_its_deadline_fails_and_the_caller_goes_on() -> None:
    reach, release = Reach("storage"), threading.Event()
    with pytest.raises(Overdue, match="renewing: no answer within 0 s"):
        reach.call(lambda: release.wait(30), 0.05, "renewing")
    assert not reach.reachable and (reach.failures, reach.overdue) == (1, 1)
    assert reach.last_error == "renewing: no answer within 0 s"
    release.set()


def test_a_call_begun_apart_keeps_running_after_its_deadline() -> None:
    release = threading.Event()
    future = begin(lambda: release.wait(30) and "landed", "test")
    with pytest.raises(Overdue):
        Reach("queues").wait(future, 0.05, "sending")
    release.set()
    assert future.result(5) == "landed"


def test_an_error_is_a_failure_named_in_one_line() -> None:
    reach = Reach("hub-publish")

    def fail() -> None:
        raise ConnectionError("Connection refused\nmore detail")

    with pytest.raises(ConnectionError):
        reach.call(fail, 5, "publishing")
    assert reach.last_error == "publishing: ConnectionError: Connection refused more detail"


@pytest.mark.parametrize("status", [404, 409, 412])
def test_an_expected_refusal_is_an_answer_not_an_outage(status: int) -> None:
    reach = Reach("storage")

    def refuse() -> None:
        raise Refused(status)

    with pytest.raises(Refused):
        reach.call(refuse, 5, "taking the lease")
    assert reach.reachable and reach.failures == 0


def test_a_server_error_is_an_outage() -> None:
    reach = Reach("storage")

    def refuse() -> None:
        raise Refused(503)

    with pytest.raises(Refused):
        reach.call(refuse, 5, "taking the lease")
    assert not reach.reachable


def test_an_outage_is_said_once_when_it_begins_and_once_when_it_ends(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "se_forwarder.coordinator.reach")
    reach = Reach("queues")
    for _ in range(5):
        reach.failed("sending: refused")
    reach.succeeded()
    reach.succeeded()
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [("WARNING", "cannot reach the approval queues: sending: refused"),
                    ("INFO", "reached the approval queues again after 0 s")]


def test_what_status_and_healthz_show_of_a_part() -> None:
    reach = Reach("storage")
    reach.succeeded()
    reach.failed("renewing: no answer within 5 s", overdue=True)
    data = reach.as_data()
    assert data["reachable"] is False and data["lastSuccess"] and data["failingSince"]
    assert (data["lastError"], data["failures"], data["timeouts"]) == ("renewing: no answer within 5 s", 1, 1)
    assert reach.line().startswith("the storage account (leader lease, snapshots) unreachable for 0 s "
                                   "(last success 20")


def test_the_status_text_lists_every_part_with_its_last_success_and_why_this_instance_waits() -> None:
    reach = parts()
    for part in reach.values():
        part.succeeded()
    reach["queues"].failed("sending approval E1/coordinator/approve/1: no answer within 5 s", overdue=True)
    service = {"name": "prod", "instance": "a", "role": "leader (not acting)", "pendingSends": 2,
               "notActing": "its leader lease was last renewed 9 s ago and could not be renewed since",
               "reachability": {name: r.as_data() for name, r in reach.items()}}
    lines = render_status({"service": service}).splitlines()
    assert lines[1] == f"not acting: {service['notActing']}"
    assert lines[2] == "reachability:" and lines[3].startswith("  storage      ok           last success 20")
    assert lines[4].startswith("  queues       UNREACHABLE  since 20")
    assert lines[4].endswith(": sending approval E1/coordinator/approve/1: no answer within 5 s")
    assert lines[7] == "  2 approval message(s) waiting to be sent"
