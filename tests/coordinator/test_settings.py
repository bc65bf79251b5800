"""The policy part of coordinator.toml: defaults, durations, budgets, blackouts, and errors naming keys."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator import Budget, Policy, load_policy, parse_duration


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_an_empty_file_gives_the_documented_defaults():
    policy = load_policy({})
    assert policy == Policy()
    assert policy.budgets == (Budget("group", count=1),)
    assert policy.manage == {"Reboot", "Redeploy"}
    assert (policy.approve_within, policy.min_healthy, policy.heartbeat_timeout) == (3600, 300, 180)
    assert (policy.echo_timeout, policy.forget_after) == (120, 86400)
    assert (policy.require_prepared, policy.shadow) == (False, False)
    assert (policy.group_tag, policy.blackouts) == ("", ())


def test_a_full_config_file_is_read():
    policy = load_policy(tomllib.loads("""
[policy]
manage = ["Reboot", "Redeploy", "Freeze"]
approve_within = "2h"
require_prepared = true
min_healthy = 600
heartbeat_timeout = "90s"
echo_timeout = "1m"
group_tag = "Tier"
shadow = true

[[budgets]]
scope = "group"
max_unavailable = 1
[[budgets]]
scope = "tag:Env"
max_unavailable = "10%"

[[blackouts]]
days = ["sat", "sunday"]
from = "00:00"
to = "24:00"
name = "weekends"

[[blackouts]]
start = 2026-12-24T00:00:00Z
end = "2027-01-02T00:00:00+00:00"

[eventhub]
anything = "the service's own section is not looked at"
"""))
    assert policy.manage == {"Reboot", "Redeploy", "Freeze"}
    assert (policy.approve_within, policy.min_healthy, policy.heartbeat_timeout, policy.echo_timeout) == (
        7200, 600, 90, 60)
    assert policy.require_prepared and policy.shadow and policy.group_tag == "tier"
    assert policy.budgets == (Budget("group", count=1), Budget("tag:env", percent=10))
    assert [b.name for b in policy.blackouts] == ["weekends", "blackout 2"]


@pytest.mark.parametrize(("value", "seconds"), [
    (30, 30), (1.5, 1.5), ("45", 45), ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), (" 5 m ", 300),
])
def test_durations_are_seconds_or_a_number_with_a_unit(value, seconds):
    assert parse_duration(value, "policy.x") == seconds


@pytest.mark.parametrize("value", ["10x", "m", "", "1h30m", True, None, [10], "-5s"])
def test_a_bad_duration_names_the_key(value):
    with pytest.raises(ConfigError, match=r"^policy\.min_healthy: .*duration"):
        load_policy({"policy": {"min_healthy": value}})


@pytest.mark.parametrize(("raw", "message"), [
    ({"policy": {"colour": 1}}, r"^policy\.colour: unknown key"),
    ({"policy": "x"}, r"^policy: must be a table"),
    ({"policy": {"manage": "Reboot"}}, r"^policy\.manage: must be a list"),
    ({"policy": {"manage": ["reboot"]}}, r"^policy\.manage\[0\]: 'reboot' is not an event type"),
    ({"policy": {"shadow": "yes"}}, r"^policy\.shadow: must be true or false"),
    ({"policy": {"require_prepared": 1}}, r"^policy\.require_prepared: must be true or false"),
    ({"policy": {"approve_within": "0s"}}, r"^policy\.approve_within: .* out of range"),
    ({"policy": {"heartbeat_timeout": "2s"}}, r"^policy\.heartbeat_timeout: .* out of range"),
    ({"policy": {"echo_timeout": "3d"}}, r"^policy\.echo_timeout: .* out of range"),
    ({"policy": {"heartbeat_timeout": "2h", "forget_after": "1h"}}, r"^policy\.forget_after: must be longer"),
    ({"policy": {"group_tag": "a/b"}}, r"^policy\.group_tag: 'a/b' is not a tag name"),
    ({"budgets": {"scope": "group"}}, r"^budgets: must be an array of tables"),
    ({"budgets": []}, r"^budgets: give at least one budget"),
    ({"budgets": ["group"]}, r"^budgets\[0\]: must be a table"),
    ({"budgets": [{"scope": "rack", "max_unavailable": 1}]}, r"^budgets\[0\]\.scope: 'rack' is not a scope"),
    ({"budgets": [{"scope": "tag:", "max_unavailable": 1}]}, r"^budgets\[0\]\.scope: 'tag:' does not name"),
    ({"budgets": [{"max_unavailable": 1}]}, r"^budgets\[0\]\.scope: missing"),
    ({"budgets": [{"scope": "zone"}]}, r"^budgets\[0\]\.max_unavailable: missing"),
    ({"budgets": [{"scope": "zone", "max_unavailable": 0}]},
     r"^budgets\[0\]\.max_unavailable: must be at least 1"),
    ({"budgets": [{"scope": "zone", "max_unavailable": 1.5}]},
     r"^budgets\[0\]\.max_unavailable: 1\.5 is neither"),
    ({"budgets": [{"scope": "zone", "max_unavailable": "1"}]},
     r"^budgets\[0\]\.max_unavailable: '1' is neither"),
    ({"budgets": [{"scope": "zone", "max_unavailable": "0%"}]},
     r"^budgets\[0\]\.max_unavailable: '0%' must be"),
    ({"budgets": [{"scope": "zone", "max_unavailable": "150%"}]}, r"^budgets\[0\]\.max_unavailable: '150%'"),
    ({"budgets": [{"scope": "zone", "max_unavailable": 1, "per": "x"}]}, r"^budgets\[0\]\.per: unknown key"),
    ({"budgets": [{"scope": "zone", "max_unavailable": 1}, {"scope": "zone", "max_unavailable": 2}]},
     r"^budgets\[1\]\.scope: 'zone' has a budget already"),
    ({"blackouts": {}}, r"^blackouts: must be an array of tables"),
    ({"blackouts": [{}]}, r"^blackouts\[0\]: give from/to"),
    ({"blackouts": [{"from": "01:00", "to": "02:00", "start": "2026-01-01T00:00:00Z"}]},
     r"^blackouts\[0\]: give either"),
    ({"blackouts": [{"from": "01:00"}]}, r"^blackouts\[0\]\.to: missing"),
    ({"blackouts": [{"from": "1am", "to": "02:00"}]}, r"^blackouts\[0\]\.from: '1am' is not a time of day"),
    ({"blackouts": [{"from": "01:00", "to": "24:30"}]}, r"^blackouts\[0\]\.to: '24:30' is not a time of day"),
    ({"blackouts": [{"from": "24:00", "to": "01:00"}]}, r"^blackouts\[0\]\.from: 24:00 is the end of a day"),
    ({"blackouts": [{"from": "03:00", "to": "03:00"}]}, r"^blackouts\[0\]: from and to are the same"),
    ({"blackouts": [{"from": "01:00", "to": "02:00", "days": ["funday"]}]},
     r"^blackouts\[0\]\.days\[0\]: 'funday'"),
    ({"blackouts": [{"from": "01:00", "to": "02:00", "days": []}]},
     r"^blackouts\[0\]\.days: must be a non-empty"),
    ({"blackouts": [{"start": "2026-01-02T00:00:00Z"}]}, r"^blackouts\[0\]\.end: missing"),
    ({"blackouts": [{"start": "2026-01-02T00:00:00", "end": "2026-01-03T00:00:00Z"}]},
     r"^blackouts\[0\]\.start: give the offset"),
    ({"blackouts": [{"start": "soon", "end": "2026-01-03T00:00:00Z"}]},
     r"^blackouts\[0\]\.start: 'soon' is not"),
    ({"blackouts": [{"start": "2026-01-03T00:00:00Z", "end": "2026-01-02T00:00:00Z"}]},
     r"^blackouts\[0\]\.end: must be after start"),
    ({"blackouts": [{"from": "01:00", "to": "02:00", "when": 1}]}, r"^blackouts\[0\]\.when: unknown key"),
])
def test_every_bad_key_or_value_is_a_config_error_naming_the_key(raw, message):
    with pytest.raises(ConfigError, match=message):
        load_policy(raw)


@pytest.mark.parametrize(("percent", "size", "limit"), [
    (10, 25, 2),  # 2.5 rounds down
    (10, 5, 1),  # 0.5 rounds down to 0: the minimum of 1 applies
    (10, 0, 1),
    (10, 10, 1),
    (33, 3, 1),  # 0.99
    (50, 7, 3),
    (100, 7, 7),
    (12.5, 16, 2),
    (20, 10, 2),  # exactly 2.0, not 1.9999
])
def test_a_percentage_is_rounded_down_with_a_minimum_of_one(percent, size, limit):
    assert Budget("zone", percent=percent).limit(size) == limit


def test_a_whole_number_budget_is_the_limit_whatever_the_size():
    assert Budget("zone", count=3).limit(1) == 3
    assert Budget("zone", count=3).limit(1000) == 3


def test_tag_scope_names_are_case_insensitive():
    policy = load_policy({"budgets": [{"scope": "tag:Tier", "max_unavailable": 1}]})
    assert policy.by_kind.keys() == {"tag:tier"}


def test_a_weekly_blackout_covers_its_hours_on_its_days_only():
    (window,) = load_policy({"blackouts": [{"days": ["mon"], "from": "08:00", "to": "18:00"}]}).blackouts
    assert window.active(at("2026-03-02T08:00:00"))  # a Monday
    assert window.active(at("2026-03-02T17:59:59"))
    assert not window.active(at("2026-03-02T18:00:00"))
    assert not window.active(at("2026-03-02T07:59:59"))
    assert not window.active(at("2026-03-03T09:00:00"))  # Tuesday


def test_a_blackout_ending_before_it_starts_runs_past_midnight_into_the_next_day():
    (window,) = load_policy({"blackouts": [{"days": ["fri"], "from": "22:00", "to": "06:00"}]}).blackouts
    assert window.active(at("2026-03-06T23:00:00"))  # Friday night
    assert window.active(at("2026-03-07T05:59:00"))  # Saturday morning
    assert not window.active(at("2026-03-07T06:00:00"))
    assert not window.active(at("2026-03-06T05:00:00"))  # Friday morning belongs to Thursday's window
    assert not window.active(at("2026-03-07T23:00:00"))  # Saturday night


def test_a_whole_day_blackout_is_from_midnight_to_24_00():
    (window,) = load_policy({"blackouts": [{"days": ["sun"], "from": "00:00", "to": "24:00"}]}).blackouts
    assert window.active(at("2026-03-08T00:00:00")) and window.active(at("2026-03-08T23:59:59"))
    assert not window.active(at("2026-03-09T00:00:00"))


def test_an_absolute_blackout_is_start_inclusive_end_exclusive():
    (window,) = load_policy({"blackouts": [
        {"start": "2026-12-24T00:00:00+01:00", "end": "2026-12-27T00:00:00Z"}]}).blackouts
    assert window.active(at("2026-12-23T23:00:00"))
    assert not window.active(at("2026-12-23T22:59:59"))
    assert not window.active(at("2026-12-27T00:00:00"))
