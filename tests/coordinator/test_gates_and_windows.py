"""Gates and maintenance windows: their settings, the window math, and what the decision pass does
with a gate's verdict or a window (decide/gates.py). One behaviour per test."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rrulestr
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator import Policy
from se_forwarder.fleet.coordinator.config.gates import load_gates
from se_forwarder.fleet.coordinator.config.windows import ANCHOR, NEVER, Window, load_windows
from se_forwarder.fleet.coordinator.decide.gates import matches
from se_forwarder.fleet.coordinator.fold.gates import GateVerdict, fold_gate, unasked
from se_forwarder.fleet.coordinator.input import gate_checks
from se_forwarder.fleet.coordinator.view.alerts import derive
from se_forwarder.fleet.coordinator.view.gates import gates_and_windows

from .fleet import SET, T0, approvals, avset, kinds

BERLIN = ZoneInfo("Europe/Berlin")
NIGHTS = {"timezone": "Europe/Berlin", "rrule": "FREQ=DAILY;BYHOUR=2;BYMINUTE=0", "duration": "3h"}


def window(**item: object) -> Window:
    (found,) = load_windows([item])
    return found


def berlin(*args: int) -> float:
    return datetime(*args, tzinfo=BERLIN).timestamp()  # type: ignore[misc]


# -- bad input: one line each ------------------------------------------------------------------------

@pytest.mark.parametrize("item, said", [
    ({"rrule": "every tuesday", "duration": "1h"},
     "windows[0].rrule: 'every tuesday' cannot be parsed as an RRULE"),
    ({"rrule": "FREQ=WEEKLY;BYDAY=XX", "duration": "1h"},
     "cannot be parsed as an RRULE (invalid 'BYDAY': XX)"),
    ({"rrule": "FREQ=MINUTELY", "duration": "1h"}, "FREQ=MINUTELY is too frequent for a window"),
    ({**NIGHTS, "timezone": "Europe/Atlantis"}, "windows[0].timezone: 'Europe/Atlantis' is not a time zone"),
    ({**NIGHTS, "timezone": "../../etc/passwd"}, "is not a time zone"),
    ({**NIGHTS, "duration": "forever"}, "windows[0].duration: 'forever' is not a duration"),
    ({**NIGHTS, "scope": "rack:7"}, "windows[0].scope: 'rack:7' is not a scope"),
    ({"start": "2026-12-24T00:00:00Z", "end": "2027-01-02T00:00:00Z"}, "only a blackout may be"),
    ({"blackout": True, "start": "2026-12-24", "end": "2027-01-02T00:00:00Z"}, "give the offset"),
    ({"rrule": "FREQ=DAILY"}, "windows[0].duration: missing"),
])
def test_a_window_that_cannot_be_read_is_one_line_naming_its_key(item, said):
    with pytest.raises(ConfigError) as caught:
        load_windows([item])
    assert said in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("item, said", [
    ({"name": "g", "type": "nagios", "url": "http://x"},
     "gates[0].type: 'nagios' is not a gate type (alertmanager, azure-monitor, http)"),
    ({"name": "g", "type": "http", "url": "ftp://deploy.internal/ok"},
     "gates[0].url: 'ftp://deploy.internal/ok' is not an http(s) URL"),
    ({"name": "g", "type": "alertmanager", "url": "am:9093"}, "is not an http(s) URL"),
    ({"name": "g", "type": "alertmanager", "url": "http://am:9093", "matchers": ["severity~critical"]},
     "gates[0].matchers[0]: 'severity~critical' is not a label matcher"),
    ({"name": "g", "type": "azure-monitor"},
     "an azure-monitor gate reads Resource Graph with [azure]'s credential"),
    ({"name": "g", "type": "http", "url": "http://deploy.example/ok", "token_env": "T"},
     "a token goes over https"),
    ({"name": "g", "type": "alertmanager", "url": "https://bob:pw@am.example"},
     "gates[0].url: no credentials in the URL; give a bearer token with token_env or token_file"),
    ({"name": "g", "type": "http", "url": "http://x", "unreachable": "ignore"}, "gates[0].unreachable"),
    ({"type": "http", "url": "http://x"}, "gates[0].name: missing"),
    ({"name": "g", "type": "http", "url": "http://x", "scope": "zone"},
     "gates[0].scope: 'zone' is not a scope"),
])
def test_a_gate_that_cannot_be_read_is_one_line_naming_its_key(item, said):
    with pytest.raises(ConfigError) as caught:
        load_gates([item], azure=False)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_two_gates_may_not_share_a_name():
    with pytest.raises(ConfigError, match="gates\\[1\\].name: 'g' is another gate's name too"):
        load_gates([{"name": "g", "type": "http", "url": "http://a"}, {"name": "g", "type": "http",
                                                                        "url": "http://b"}], azure=False)


def test_a_gate_is_closed_when_unreachable_unless_told_otherwise():
    (closed, opened) = load_gates([{"name": "a", "type": "http", "url": "http://a"},
                                   {"name": "b", "type": "http", "url": "http://b", "unreachable": "open"}],
                                  azure=False)
    assert closed.closed_when_unreachable and not opened.closed_when_unreachable


# -- the window math ---------------------------------------------------------------------------------

def test_a_window_is_open_from_its_start_on_the_zones_wall_clock_for_its_duration():
    nights = window(**NIGHTS)
    assert nights.following(berlin(2026, 3, 2, 12)) == (berlin(2026, 3, 3, 2), berlin(2026, 3, 3, 5))
    assert not nights.at(berlin(2026, 3, 3, 1, 59)) and nights.at(berlin(2026, 3, 3, 2))
    assert nights.at(berlin(2026, 3, 3, 4, 59)) and not nights.at(berlin(2026, 3, 3, 5))


def test_a_window_keeps_its_wall_clock_hour_across_a_change_of_summer_time():
    nights = window(**{**NIGHTS, "rrule": "FREQ=DAILY;BYHOUR=1"})
    before = nights.following(berlin(2026, 3, 28, 12))[0]  # CET, UTC+1
    after = nights.following(berlin(2026, 3, 29, 12))[0]  # CEST, UTC+2
    assert datetime.fromtimestamp(before, UTC).hour == 0 and datetime.fromtimestamp(after, UTC).hour == 23


def test_a_window_that_starts_in_a_skipped_hour_opens_when_the_clock_resumes():
    nights = window(**{**NIGHTS, "rrule": "FREQ=DAILY;BYHOUR=2;BYMINUTE=30"})
    start, end = nights.following(berlin(2026, 3, 29, 0))  # 02:30 does not exist that night
    assert datetime.fromtimestamp(start, BERLIN).strftime("%H:%M") == "03:00"
    assert end - start == 3 * 3600


def test_a_blackout_period_is_open_between_its_start_and_end_only():
    freeze = window(blackout=True, start="2026-12-24T00:00:00+01:00", end="2027-01-02T00:00:00+01:00")
    assert freeze.at(berlin(2026, 12, 24)) and not freeze.at(berlin(2027, 1, 2))
    assert freeze.following(berlin(2027, 1, 3)) == NEVER


def test_a_rule_whose_count_ran_out_never_opens_again():
    twice = window(rrule="FREQ=DAILY;COUNT=2;BYHOUR=3", duration="1h")
    assert twice.following(ANCHOR.replace(tzinfo=UTC).timestamp() + 10 * 86400) == NEVER


RULES = st.sampled_from(["FREQ=DAILY;BYHOUR=2", "FREQ=WEEKLY;BYDAY=TU,SA;BYHOUR=22;BYMINUTE=30",
                         "FREQ=MONTHLY;BYMONTHDAY=1,15;BYHOUR=0", "FREQ=DAILY;INTERVAL=3;BYHOUR=12"])
ZONES = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"])


@settings(max_examples=60, deadline=None)
@given(rule=RULES, zone=ZONES, hours=st.integers(1, 30), offset=st.floats(0, 3 * 365 * 86400))
def test_the_occurrence_found_is_the_first_that_ends_after_now(rule, zone, hours, offset):
    now = datetime(2025, 6, 1, tzinfo=UTC).timestamp() + offset
    found = window(rrule=rule, timezone=zone, duration=f"{hours}h")
    start, end = found.following(now)
    assert end > now and end - start == hours * 3600
    assert found.at(now) == (start <= now)
    tz = ZoneInfo(zone)  # by brute force: every start within the window's length before now
    wall = rrulestr(rule, dtstart=ANCHOR)
    local = datetime.fromtimestamp(now, tz).replace(tzinfo=None)
    earlier = wall.between(local - timedelta(hours=hours + 3), local, inc=True)
    ends = [s.replace(tzinfo=tz).timestamp() + hours * 3600 for s in earlier]
    assert not [e for e in ends if now < e < end - 1]  # none ends after now and before the found one


@settings(max_examples=30, deadline=None)
@given(steps=st.lists(st.floats(0, 5 * 86400), min_size=2, max_size=12))
def test_a_window_answers_the_same_whether_asked_in_order_or_afresh(steps):
    kept = window(**NIGHTS)
    now = T0
    for step in steps:
        now += step
        assert kept.following(now) == window(**NIGHTS).following(now)


# -- scopes a setting names --------------------------------------------------------------------------

@pytest.mark.parametrize("configured, scope, expected", [
    ("fleet", "fleet", True),
    ("group:web", "group:avset/sub/rg/web", True),
    ("group:web", "group:avset/sub/rg/api", False),
    ("fault_domain:web/1", "fault_domain:avset/sub/rg/web/1", True),
    ("fault_domain:web/1", "fault_domain:avset/sub/rg/web/2", False),
    ("zone:1", "zone:westeurope/1", True),
    ("zone:westeurope/1", "zone:westeurope/1", True),
    ("zone:1", "zone:westeurope/2", False),
    ("tag:role=db", "tag:role=db", True),
    ("tag:role=db", "tag:role=web", False),
])
def test_a_configured_scope_names_scopes_as_people_say_them(configured, scope, expected):
    assert matches(configured, scope) is expected


# -- the decision pass -------------------------------------------------------------------------------

def closed(name: str = "web-alerts", scope: str = "fleet", **more: object) -> GateVerdict:
    return GateVerdict(name, "alertmanager", scope, False,
                       "1 alert fires in Alertmanager: HighCpu (service=web)", ("HighCpu (service=web)",),
                       **{"checked": T0, **more})  # type: ignore[arg-type]


def test_no_early_approval_while_a_gate_of_its_scope_is_closed_and_the_defer_names_gate_and_alert():
    fleet = avset()
    fleet.state.gates["web-alerts"] = closed(scope="group:web-0")
    fleet.announce("E1", [SET[1]], SET)
    result = fleet.decide(T0 + 1)
    assert kinds(result) == [("defer", "E1", "gate-closed")]
    (defer,) = result.decisions
    assert "gate 'web-alerts' (group:web-0) is closed" in defer.reason
    assert "HighCpu (service=web)" in defer.reason
    assert defer.scope == "group:web-0"


def test_a_closed_gate_of_another_scope_holds_nothing_back():
    fleet = avset()
    fleet.state.gates["db-alerts"] = closed("db-alerts", scope="group:db")
    fleet.announce("E1", [SET[1]], SET)
    assert approvals(fleet.decide(T0 + 1)) == ["E1"]


def test_once_the_gate_opens_the_event_is_approved():
    fleet = avset()
    fleet.state.gates["web-alerts"] = closed()
    fleet.announce("E1", [SET[1]], SET)
    assert approvals(fleet.decide(T0 + 1)) == []
    fleet.state.gates["web-alerts"] = replace(closed(), open=True, reason="no alert fires", alerts=())
    assert approvals(fleet.decide(T0 + 2)) == ["E1"]


def test_a_gate_not_yet_asked_counts_as_closed():
    fleet = avset()
    fleet.state.gates["g"] = unasked("g", "http", "fleet")
    fleet.announce("E1", [SET[1]], SET)
    assert kinds(fleet.decide(T0 + 1)) == [("defer", "E1", "gate-closed")]


def test_an_approval_not_yet_sent_is_not_sent_while_its_gate_is_closed():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    first = fleet.decide(T0 + 1, send=False)
    assert approvals(first) == ["E1"] and first.sends
    fleet.state.gates["web-alerts"] = closed()
    assert fleet.decide(T0 + 2, send=False).sends == []


def test_outside_every_window_of_its_scope_nothing_is_approved_early_and_the_reason_says_when_next():
    monday_noon = T0  # 2026-03-02 12:00 UTC, 13:00 in Berlin
    fleet = avset(Policy(windows=(window(**NIGHTS, scope="group:web-0", name="nights"),)))
    fleet.announce("E1", [SET[1]], SET, not_before=monday_noon + 1800)
    result = fleet.decide(monday_noon + 1)
    assert kinds(result) == [("defer", "E1", "outside-window")]
    assert result.decisions[0].reason == ("outside every maintenance window of group:web-0: the next, "
                                          "'nights', opens 2026-03-03 02:00 Europe/Berlin (01:00 UTC)")


def test_inside_a_window_the_rollout_runs():
    inside = berlin(2026, 3, 3, 2, 30)
    fleet = avset(Policy(windows=(window(**NIGHTS),)), t=inside - 60)
    fleet.announce("E1", [SET[1]], SET, t=inside - 60, not_before=inside + 3600)
    assert approvals(fleet.decide(inside)) == ["E1"]


def test_a_blackout_of_its_scope_holds_an_event_back_even_inside_a_window():
    inside = berlin(2026, 3, 3, 2, 30)
    fleet = avset(Policy(windows=(window(**NIGHTS), window(**NIGHTS, blackout=True, name="release night"))),
                  t=inside - 60)
    fleet.announce("E1", [SET[1]], SET, t=inside - 60, not_before=inside + 3600)
    result = fleet.decide(inside)
    assert kinds(result) == [("defer", "E1", "blackout")]
    assert "inside the blackout 'release night' of fleet until 2026-03-03 05:00 Europe/Berlin" in \
        result.decisions[0].reason


def test_windows_of_another_scope_hold_nothing_back():
    fleet = avset(Policy(windows=(window(**NIGHTS, scope="zone:3"),)))
    fleet.announce("E1", [SET[1]], SET)
    assert approvals(fleet.decide(T0 + 1)) == ["E1"]


# -- what the gates' checks say ----------------------------------------------------------------------

GATE = load_gates([{"name": "am", "type": "alertmanager", "url": "http://127.0.0.1:9", "scope": "fleet"}],
                  azure=False)[0]


def test_an_unreachable_gate_is_closed_and_says_so():
    def refused() -> tuple[bool, str, tuple[str, ...]]:
        raise gate_checks.Unanswered("http://127.0.0.1:9: Connection refused")
    said = gate_checks.verdict(GATE, refused, now=lambda: T0)
    assert not said.open and said.unreachable
    assert said.reason == "cannot be asked (http://127.0.0.1:9: Connection refused): counted as closed"


def test_an_unreachable_gate_set_to_open_is_open_and_says_so():
    def refused() -> tuple[bool, str, tuple[str, ...]]:
        raise OSError(111, "Connection refused")
    said = gate_checks.verdict(replace(GATE, closed_when_unreachable=False), refused, now=lambda: T0)
    assert said.open and said.unreachable and said.reason.endswith('counted as open (unreachable = "open")')


def test_fired_azure_monitor_alerts_close_the_gate_naming_rule_severity_and_target():
    rows = [{"name": "a1", "properties": {"essentials": {
        "alertRule": "/subscriptions/s/resourceGroups/rg/providers/microsoft.insights/metricalerts/HighCpu",
        "severity": "Sev1", "targetResourceName": "web-1"}}}]
    assert gate_checks.ask_azure_monitor(rows) == (
        False, "1 alert fires in Azure Monitor: HighCpu (Sev1, web-1)", ("HighCpu (Sev1, web-1)",))
    assert gate_checks.ask_azure_monitor([]) == (True, "no fired Azure Monitor alert", ())


def test_a_gate_keeps_when_it_closed_while_it_stays_closed():
    gates: dict[str, GateVerdict] = {}
    assert fold_gate(gates, closed(checked=T0))
    assert not fold_gate(gates, closed(checked=T0 + 30))
    assert gates["web-alerts"].since == T0 and gates["web-alerts"].checked == T0 + 30
    assert fold_gate(gates, replace(closed(), open=True, checked=T0 + 60))
    assert gates["web-alerts"].since == T0 + 60


# -- what people see ---------------------------------------------------------------------------------

def test_a_closed_gate_is_an_alert_that_resolves_when_it_opens():
    fleet = avset()
    fleet.state.gates["web-alerts"] = closed()
    derived = derive(fleet.state, fleet.decide(T0, apply=False))
    alert = derived.open["gate-closed/web-alerts"]
    assert alert.kind == "gate-closed" and "HighCpu" in alert.summary and alert.severity == "info"
    fleet.state.gates["web-alerts"] = replace(closed(), open=True)
    assert "gate-closed/web-alerts" in derive(fleet.state, fleet.decide(T0, apply=False)).resolved


def test_status_shows_each_gate_and_each_scopes_next_window():
    fleet = avset(Policy(windows=(window(**NIGHTS, name="nights"),)))
    fleet.state.gates["web-alerts"] = closed()
    shown = gates_and_windows(fleet.state, fleet.policy, T0)
    (gate,) = shown["gates"]
    assert (gate["name"], gate["open"], gate["alerts"]) == ("web-alerts", False, ["HighCpu (service=web)"])
    (scope,) = shown["windows"]
    assert scope["scope"] == "fleet" and scope["open"] is False
    assert scope["window"]["startUtc"] == "2026-03-03T01:00:00Z" and scope["window"]["name"] == "nights"


def test_the_examples_of_the_docs_load_as_written():
    import re
    import tomllib

    from tests.support.paths import ROOT

    text = (ROOT / "docs" / "coordinator.md").read_text()
    section = text[text.index("## Health and gates"):text.index("## Commands")]
    blocks = [tomllib.loads(b) for b in re.findall(r"^```\n(.*?)^```", section, re.S | re.M)]
    gates = [g for b in blocks for g in load_gates(b.get("gates"), azure=True)]
    windows = [w for b in blocks for w in load_windows(b.get("windows"))]
    assert [g.type for g in gates] == ["alertmanager", "azure-monitor", "http"]
    assert [(w.name, w.blackout) for w in windows] == [("web nights", False), ("release night", True),
                                                        ("year-end freeze", True)]
    assert all(w.following(T0)[0] > T0 for w in windows)


MINIMAL = """[coordinator]
name = "prod"
[eventhub]
fully_qualified_namespace = "myns.servicebus.windows.net"
[storage]
account_url = "https://myaccount.blob.core.windows.net"
[queues]
account_url = "https://myaccount.queue.core.windows.net"
[signing]
key_file = "/nonexistent/signing.key"
[api]
token_file = "/nonexistent/api.token"
"""


@pytest.mark.parametrize("extra, said", [
    ('[[gates]]\nname = "g"\ntype = "nagios"\nurl = "http://x"\n',
     "gates[0].type: 'nagios' is not a gate type (alertmanager, azure-monitor, http)"),
    ('[[gates]]\nname = "g"\ntype = "http"\nurl = "file:///etc/passwd"\n',
     "gates[0].url: 'file:///etc/passwd' is not an http(s) URL"),
    ('[[windows]]\nrrule = "every night"\nduration = "1h"\n',
     "windows[0].rrule: 'every night' cannot be parsed as an RRULE"),
    ('[[windows]]\ntimezone = "Mars/Olympus_Mons"\nrrule = "FREQ=DAILY"\nduration = "1h"\n',
     "windows[0].timezone: 'Mars/Olympus_Mons' is not a time zone"),
])
def test_coordinator_run_refuses_a_bad_gate_or_window_in_one_line_exit_2(tmp_path, extra, said):
    from tests.support.cli import cli

    config = tmp_path / "coordinator.toml"
    config.write_text(MINIMAL + extra)
    done = cli("coordinator", "run", "--config", str(config), timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
