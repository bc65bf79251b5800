"""The readable output (`--sink stdout:pretty`, the demo): columns under a header, lines of at most
100 columns, each kind of CloudEvent explained once when asked, and robust to every type."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from se_forwarder import config as cfg
from se_forwarder.errors import ConfigError
from se_forwarder.sinks.pretty import WIDTH, PrettyFormatter
from tests.support.paths import ROOT

EVENT_ID = "C7061BAC-AF0E-4B0C-B7F3-1E3FCFB1B6A1"


def cloudevent(state: str, **data: object) -> dict:
    return {
        "specversion": "1.0", "type": f"com.azure.scheduledevents.{state}", "id": f"{EVENT_ID}/{state}",
        "subject": EVENT_ID, "time": "2026-11-23T13:02:11.123Z", "eventtype": "Freeze",
        "eventstatus": "Scheduled", "incarnation": 3,
        "data": {"EventId": EVENT_ID, "EventType": "Freeze", "EventSource": "Platform",
                 "DurationInSeconds": 5, "NotBeforeUtc": "2026-11-23T13:17:11Z",
                 "AffectsThisVm": True, **data},
    }


def test_columns_under_a_header_shown_once():
    fmt = PrettyFormatter()
    first = fmt.lines(cloudevent("scheduled"))
    assert first[0].split() == ["TIME", "CLOUDEVENT", "EVENT", "EVENT", "ID", "SOURCE", "INC", "DETAILS"]
    assert first[1].split()[:6] == ["13:02:11", "scheduled", "Freeze", "C7061BAC", "Platform", "3"]
    assert "pause 5 s; NotBefore 13:17:11 (in 900 s)" in first[1]
    assert first[0].index("DETAILS") == first[1].index("pause")
    assert len(fmt.lines(cloudevent("started"))) == 1


def test_each_kind_is_explained_the_first_time_only():
    fmt = PrettyFormatter(explain=True)
    out = fmt.lines(cloudevent("scheduled"))
    assert out[0].startswith("Columns: TIME when the agent saw it (UTC)")
    assert out[-1].strip() == ("^ scheduled: Azure announced maintenance; it starts at NotBefore, or "
                               "sooner if approved")
    approved = fmt.lines(cloudevent("approved", ApprovedBy="policy:sample-freeze"))
    assert approved[0].endswith("by policy sample-freeze")
    assert approved[1].strip() == ("^ approved by policy sample-freeze: Freezes under 9 s are approved "
                                   "at once")
    assert fmt.lines({**cloudevent("scheduled"), "subject": "OTHER-ID"})[1:] == []


def test_an_event_first_seen_started_is_a_hardware_failure_only_when_explaining():
    fmt = PrettyFormatter(explain=True)
    fmt.lines(cloudevent("scheduled"))
    assert "no notice" not in fmt.lines(cloudevent("started"))[0]
    failure = fmt.lines({**cloudevent("started", EventType="Reboot"), "subject": "B0B0B0B0-1"})
    assert failure[0].endswith("no notice")
    assert failure[1].strip() == "^ hardware failure: Azure starts it without notice"
    assert "no notice" not in PrettyFormatter().lines(cloudevent("started"))[1]


def test_canceled_says_azure_withdrew_it():
    out = PrettyFormatter(explain=True).lines(cloudevent("canceled"))
    assert out[-1].strip() == "^ canceled: Azure withdrew it before it started"


@pytest.mark.parametrize(("inferred_from", "words"),
                         [("approved", "its approval"), ("not-before-passed", "its NotBefore passed")])
def test_inferred_transitions_say_so(inferred_from, words):
    fmt = PrettyFormatter(explain=True)
    fmt.lines(cloudevent("scheduled"))
    out = fmt.lines(cloudevent("completed", Inferred=True, InferredFrom=inferred_from))
    assert f"inferred ({words})" in out[0]
    assert any(line.strip().startswith("^ inferred: the agent never saw it Started") for line in out)
    assert any(line.strip().startswith("^ completed:") for line in out)


def test_every_type_fits_in_100_columns_and_long_details_wrap_under_details():
    fmt = PrettyFormatter(explain=True)
    events = [
        cloudevent("approvalrejected", Reason="the signature does not verify with any configured key "
                   "(keyid 0123456789abcdef); the message was moved to the poison queue " * 2),
        cloudevent("prepared", Hook="prepare", DurationSeconds=12.5),
        cloudevent("preparefailed", Reason="exit status 3"),
        cloudevent("recoverfailed", Reason="timed out after 300 s"),
        cloudevent("recovered", RecoveredAfterSeconds=41.2, RecoverHook="none"),
        {"type": "com.azure.scheduledevents.heartbeat", "subject": "8f1c6a2e-vm", "time": "not a time",
         "data": {"Events": [{"EventId": "x"}], "HeartbeatInterval": 60}},
        cloudevent("approved", ApprovedBy="coordinator:coord-1"),
        cloudevent("approved", ApprovedBy="cli"),
        cloudevent("approved", ApprovedBy="hook"),
        cloudevent("scheduled", AffectsThisVm=False, Resources=["vm1", "vm2"]),
        {"type": "com.example.unknown", "data": None},
        {},
    ]
    lines = [line for event in events for line in fmt.lines(event)]
    assert max(len(line) for line in lines) <= WIDTH
    text = "\n".join(lines)
    assert "poison queue" in text and "hook took 12.5 s" in text and "1 event(s) pending" in text
    assert "back 41 s after it ended" in text and "^ recovered: this VM is back after the event" in text
    assert "by the fleet coordinator (coord-1)" in text
    assert "by hand (se-forwarder approve)" in text and "for vm1,vm2, not this VM" in text
    reason_lines = [line for line in lines if "signature" in line or "poison" in line]
    assert len(reason_lines) >= 2
    detail_column = lines[[i for i, line in enumerate(lines) if "DETAILS" in line][0]].index("DETAILS")
    assert all(line[:detail_column].strip() == "" for line in reason_lines[1:])


@pytest.mark.parametrize(("spec", "expected"), [
    ("stdout", {"type": "stdout"}),
    ("stdout:pretty", {"type": "stdout", "format": "pretty"}),
    ("stdout:json", {"type": "stdout", "format": "json"}),
])
def test_stdout_sink_specs(spec, expected):
    assert cfg.parse_sink_spec(spec) == expected


def test_an_unknown_stdout_format_is_one_line_listing_the_specs():
    with pytest.raises(ConfigError, match="stdout:pretty, stdout:json"):
        cfg.parse_sink_spec("stdout:yaml")


def test_explain_needs_the_pretty_format():
    with pytest.raises(ConfigError, match="explain"):
        cfg.from_dict({"sinks": [{"type": "stdout", "explain": True}]})


@pytest.mark.parametrize("fmt", ["pretty", "json"])
def test_run_with_sink_stdout_format(fmt, simulator, control, tmp_path):
    event_id = control.add(EventType="Freeze", DurationInSeconds=20)["EventId"]
    result = subprocess.run(
        [sys.executable, "-m", "se_forwarder", "run", "--once", "--imds-url", simulator.url,
         "--state-dir", str(tmp_path), "--sink", f"stdout:{fmt}"],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    if fmt == "json":
        assert [json.loads(line)["id"] for line in lines] == [f"{event_id}/scheduled"]
    else:
        assert lines[0].startswith("TIME      CLOUDEVENT  EVENT")
        assert lines[1].split()[1:4] == ["scheduled", "Freeze", event_id[:8]]
        assert len(lines) == 2
