"""Text from VMs is inert on a terminal: tables and status lines strip control characters, text
logs escape them. The attack: a VM named with escape sequences that clear the screen, forge an
OSC 8 hyperlink, rewrite a line with a carriage return and add a fake line."""

from __future__ import annotations

import logging
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.api import render_status as coordinator_status
from se_forwarder.fleet.tail import FleetTable
from se_forwarder.printable import CONTROLS, escape_controls, has_controls, strip_controls, strip_tree
from se_forwarder.status import render_status as agent_status
from se_forwarder.telemetry.logs import TextFormatter

EVIL = ("web-0\x1b[2J\x1b[H\x1b]8;;https://evil.example\x1b\\Re-approve\x1b]8;;\x1b\\\r"
        "\nFAKE LINE\u202etxt.exe\x9b31m")


def no_escapes(text: str) -> bool:
    return "\x1b" not in text and "\r" not in text and "\x9b" not in text and "\u202e" not in text


@given(st.text())
def test_stripped_text_holds_no_control_character(text: str) -> None:
    assert not has_controls(strip_controls(text))


@given(st.text())
def test_escaped_text_holds_no_control_character_and_keeps_the_rest(text: str) -> None:
    escaped = escape_controls(text)
    assert not has_controls(escaped)
    assert [part for part in CONTROLS.split(text)] == [part for part in CONTROLS.split(text)
                                                      if part in escaped or not part]


def test_strip_tree_reaches_every_string_of_a_document() -> None:
    assert strip_tree({"a\x1b": ["b\r\n", {"c": "d\x07"}], "n": 3}) == {"a ": ["b ", {"c": "d "}], "n": 3}


def test_coordinator_status_shows_vm_text_without_control_characters() -> None:
    status: dict[str, Any] = {
        "service": {"name": "prod", "instance": "a", "role": "leader"},
        "fleet": {"vms": 2}, "paused": [{"scope": EVIL, "since": "t", "actor": EVIL, "reason": EVIL}],
        "held": [{"eventId": EVIL, "since": "t", "actor": "x", "reason": EVIL}],
        "scopes": [{"scope": f"group:{EVIL}", "used": 1, "max": 1, "size": 2, "paused": False}],
        "pending": [{"eventId": EVIL, "eventType": EVIL, "notBeforeUtc": "t", "affected": [EVIL],
                     "reasonCode": "budget", "reason": EVIL}],
        "started": [{"eventId": EVIL, "eventType": "Reboot", "startedUtc": "t", "affected": [EVIL]}],
        "unwatched": [{"name": EVIL, "group": EVIL, "heartbeatAgeSeconds": 5.0}],
    }
    text = coordinator_status(status)
    assert no_escapes(text) and "FAKE LINE" in text
    assert not any(line.startswith("FAKE LINE") for line in text.splitlines())


def test_fleet_tail_table_shows_hub_text_without_control_characters() -> None:
    table = FleetTable()
    row = table.add({"subject": EVIL, "type": "com.azure.scheduledevents.scheduled", "source": EVIL,
                     "time": "2024-05-01T10:00:00Z", "eventtype": EVIL, "data": {"NotBeforeUtc": EVIL}})
    assert row is not None
    assert no_escapes(table.render()) and len(table.render().splitlines()) == 3
    assert all(no_escapes(str(v)) for v in row.as_json().values())


def test_agent_status_shows_imds_text_without_control_characters() -> None:
    info = {
        "state_dir": "/var/lib/se-forwarder", "vm": {"name": EVIL, "vmId": "id", "complete": True},
        "last_poll": {"at": 1.0, "ok": True, "age_seconds": 1.0, "last_ok_age_seconds": 1.0, "result": "ok"},
        "incarnation": 1,
        "pending_events": [{"EventId": EVIL, "EventType": EVIL, "EventStatus": "Scheduled",
                            "approved": False, "NotBeforeInSeconds": None, "NotBefore": ""}],
        "sinks": [], "last_approvals": [],
    }
    assert no_escapes(agent_status(info))


def test_a_text_log_line_escapes_control_characters_and_stays_one_line() -> None:
    record = logging.LogRecord("se_forwarder.coordinator", logging.INFO, __file__, 1, "approve %s: %s",
                               (EVIL, "fits"), None)
    record.event_id = EVIL
    line = TextFormatter().format(record)
    assert no_escapes(line) and "\n" not in line
    assert "\\x1b[2J" in line and "\\r\\n" in line and "\\u202e" in line
