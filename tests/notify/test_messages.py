"""What people read: one short line per event, and bodies of the documented Teams and Slack shapes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.notify import describe, render

from .events import NOW, agent_event, decision, heartbeat
from .shapes import slack_problems, teams_problems, texts


def title(event, **kwargs) -> str:
    notice = describe(event, NOW, **kwargs)
    assert notice is not None
    return notice.title


def test_scheduled_says_vm_topology_type_time_countdown_and_source() -> None:
    assert title(agent_event("scheduled")) == \
        "web-3 (FD 1, zone 2): Reboot scheduled for 14:30 UTC, in 15 min (Platform)"


def test_a_not_before_on_another_day_carries_the_date() -> None:
    event = agent_event("scheduled", event_type="Redeploy", not_before=NOW + timedelta(days=2, hours=1))
    assert title(event) == \
        "web-3 (FD 1, zone 2): Redeploy scheduled for Wed 21 Sep 15:15 UTC, in 2 days (Platform)"


def test_a_not_before_already_passed_says_how_long_ago() -> None:
    event = agent_event("scheduled", not_before=NOW - timedelta(minutes=5))
    assert "scheduled for 14:10 UTC, due 5 min ago" in title(event)


def test_a_vm_whose_metadata_is_unknown_is_named_without_topology() -> None:
    incomplete = {"name": "web-3", "vmId": "", "resourceId": "", "zone": "", "platformFaultDomain": "",
                  "platformUpdateDomain": "", "complete": False}
    assert title(agent_event("started", machine=incomplete)) == "web-3: Reboot started"


def test_started_and_completed_after_the_time_between_them() -> None:
    started = agent_event("started", observed=NOW)
    completed = agent_event("completed", observed=NOW + timedelta(minutes=4, seconds=10))

    assert title(started) == "web-3 (FD 1, zone 2): Reboot started"
    assert title(completed, started_at=NOW) == "web-3 (FD 1, zone 2): Reboot completed after 4 min"


def test_completed_without_a_known_start_claims_no_duration() -> None:
    assert title(agent_event("completed")) == "web-3 (FD 1, zone 2): Reboot completed"


def test_inferred_transitions_say_they_were_inferred_and_from_what() -> None:
    started = agent_event("started", Inferred=True, InferredFrom="not-before-passed")
    completed = agent_event("completed", Inferred=True, InferredFrom="approved")

    assert title(started).endswith("Reboot started (inferred: NotBefore passed, then gone from the document)")
    assert title(completed, started_at=NOW).endswith(
        "Reboot completed (inferred: approved, then gone from the document)")


def test_canceled_says_when_it_was_due() -> None:
    assert title(agent_event("canceled")).endswith("Reboot canceled (was due 14:30 UTC)")


@pytest.mark.parametrize(("by", "said"), [
    ("policy:freeze-short", "approved by policy rule freeze-short"),
    ("coordinator:/se-forwarder/coordinator", "approved by the coordinator (/se-forwarder/coordinator)"),
    ("hook", "approved by the prepare hook"),
    ("cli", "approved by the CLI"),
])
def test_approved_names_who_approved(by: str, said: str) -> None:
    assert title(agent_event("approved", ApprovedBy=by)).endswith(f"Reboot {said}")


def test_prepared_says_how_long_the_hook_took() -> None:
    event = agent_event("prepared", Hook="prepare", DurationSeconds=42)
    assert title(event).endswith("ready for Reboot (prepare hook took 42 s)")


@pytest.mark.parametrize(("state", "said"), [
    ("preparefailed", "prepare hook failed for Reboot: hook exited with status 3"),
    ("recoverfailed", "recover hook failed after Reboot: hook exited with status 3"),
    ("approvalrejected", "approval message refused for Reboot: hook exited with status 3"),
])
def test_failures_and_refusals_carry_their_reason(state: str, said: str) -> None:
    event = agent_event(state, Reason="hook exited with status 3", ReasonCode="exit")
    assert title(event).endswith(said)


def test_recovered_says_the_vm_is_back_and_how_long_after_the_event_ended() -> None:
    event = agent_event("recovered", RecoveredAfterSeconds=95, RecoverHook="succeeded")
    assert title(event).endswith("back after Reboot, 2 min after it ended")
    assert describe(event, NOW).tone == "Good"


def test_heartbeats_are_not_chat_messages() -> None:
    assert describe(heartbeat(), NOW) is None
    assert render("teams", heartbeat(), NOW) is None
    assert render("slack", heartbeat(), NOW) is None


def test_coordinator_approval_names_the_vms_and_the_budget_use() -> None:
    assert title(decision("approve")) == \
        "Coordinator approved Reboot for web-3 (group web, 1/1 used)"


def test_a_breach_warning_says_when_and_which_budget_it_exceeds() -> None:
    event = decision("breach", Resources=["web-3", "web-4", "web-5", "web-6"],
                     Budgets=[{"scope": "zone:westeurope/2", "kind": "zone", "size": 9, "used": 0,
                               "withEvent": 4, "max": 1}],
                     ReasonCode="budget", Reason="4 VMs of zone 2 start together")
    assert title(event) == ("Breach ahead: Reboot for web-3, web-4, web-5 and 1 more at 16:15 UTC, "
                            "in 2 h (westeurope zone 2: 4 at once, max 1): 4 VMs of zone 2 start together")


@pytest.mark.parametrize(("action", "data", "said"), [
    ("defer", {"Reason": "group web is at its budget"},
     "Coordinator deferred Reboot for web-3: group web is at its budget"),
    ("pause", {"Scope": "zone:2", "Actor": "alice", "Reason": "change freeze"},
     "Coordinator paused zone 2 by alice: change freeze"),
    ("pause", {"Actor": "alice"}, "Coordinator paused all approvals by alice"),
    ("resume", {"Actor": "bob"}, "Coordinator resumed all approvals by bob"),
    ("hold", {"Actor": "alice", "Reason": "db migration"},
     "Coordinator holds Reboot for web-3 by alice: db migration"),
    ("release", {"Actor": "alice"}, "Coordinator released Reboot for web-3 by alice"),
    ("retarget", {"Reason": "no echo"}, "Coordinator retarget: Reboot for web-3: no echo"),
])
def test_each_coordinator_decision_has_its_line(action: str, data: dict, said: str) -> None:
    assert title(decision(action, **data)) == said


def test_an_approval_through_acknowledge_says_azure_and_what_azure_answered() -> None:
    target = {"name": "web-3", "vmId": "", "group": "avset/s/rg/web"}
    notice = describe(decision("approve", Target=target, Via="arm"), NOW)
    assert notice is not None and ("Sent to", "Azure (acknowledge on web-3)") in notice.facts
    refused = decision("acknowledge", Target=target, Via="arm", ReasonCode="forbidden",
                       Reason="ARM answered 403: AuthorizationFailed")
    assert title(refused) == "Azure refused Reboot for web-3: ARM answered 403: AuthorizationFailed"
    assert title(decision("acknowledge", ReasonCode="approved")) == "Azure approved Reboot for web-3"


def test_shadow_decisions_say_nothing_was_sent() -> None:
    notice = describe(decision("approve", Shadow=True), NOW)
    assert notice is not None
    assert notice.title.startswith("[shadow] Coordinator approved")
    assert ("Mode", "shadow: decided and published, nothing sent") in notice.facts


def test_an_unknown_type_still_gets_a_generic_line() -> None:
    event = agent_event("scheduled")
    event["type"] = "com.example.something"
    assert title(event) == "web-3 (FD 1, zone 2): com.example.something (Reboot)"


@pytest.mark.parametrize("event", [
    {}, {"type": "com.azure.scheduledevents.scheduled"}, {"type": None, "data": None},
    {"type": "com.azure.scheduledevents.scheduled", "data": {"Vm": "web-3", "NotBeforeUtc": 5}},
    {"type": "com.azure.scheduledevents.coordinator.approve", "data": {"Budgets": [1, {"scope": 2}]}},
    {"type": "com.azure.scheduledevents.prepared", "data": {"DurationSeconds": float("inf")}},
    [], "text", 3,
])
def test_missing_or_mistyped_fields_never_crash(event) -> None:
    for fmt, check in (("teams", teams_problems), ("slack", slack_problems)):
        body = render(fmt, event, NOW)
        assert body is not None
        assert check(body) == []


@pytest.mark.parametrize("state", ["scheduled", "started", "completed", "canceled", "approved",
                                   "prepared", "preparefailed", "recoverfailed", "recovered",
                                   "approvalrejected"])
def test_every_agent_event_renders_to_both_documented_shapes(state: str) -> None:
    event = agent_event(state, ApprovedBy="cli", Reason="because", DurationSeconds=3)
    assert teams_problems(render("teams", event, NOW)) == []
    assert slack_problems(render("slack", event, NOW)) == []


def test_the_teams_body_is_an_adaptive_card_message_for_workflows() -> None:
    body = render("teams", agent_event("scheduled"), NOW)
    [attachment] = body["attachments"]
    card = attachment["content"]
    assert body["type"] == "message"
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert card["body"][0]["text"] == \
        "web-3 (FD 1, zone 2): Reboot scheduled for 14:30 UTC, in 15 min (Platform)"
    facts = {f["title"]: f["value"] for e in card["body"] if e["type"] == "FactSet" for f in e["facts"]}
    assert facts["Event"] == "6b0c1f52-aaaa-4bbb-8ccc-000000000001"
    assert facts["Not before"] == "2033-09-19 14:30:00 UTC"


def test_the_slack_body_has_the_line_as_fallback_text_and_bold_headline() -> None:
    body = render("slack", agent_event("scheduled"), NOW)
    line = "web-3 (FD 1, zone 2): Reboot scheduled for 14:30 UTC, in 15 min (Platform)"
    assert body["text"] == line
    assert body["blocks"][0] == {"type": "section", "text": {"type": "mrkdwn", "text": f"*{line}*",
                                                              "verbatim": True}}


def test_slack_control_characters_from_an_event_are_escaped() -> None:
    event = agent_event("scheduled", Description="<!channel> see <https://evil.example|docs> & more")
    body = render("slack", event, NOW)
    assert all("<" not in t and ">" not in t for t in texts(body))
    assert "&lt;!channel&gt; see &lt;https://evil.example|docs&gt; &amp; more" in texts(body)


def test_slack_limits_hold_for_huge_values_even_after_escaping() -> None:
    many = [f"vm-{i}" for i in range(500)]
    event = agent_event("scheduled", Description="<&>" * 5000, Resources=many, Reason="&" * 5000)
    body = render("slack", event, NOW)
    assert slack_problems(body) == []
    assert teams_problems(render("teams", event, NOW)) == []


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)
_keys = st.sampled_from(["EventId", "EventType", "NotBeforeUtc", "NotBefore", "Resources", "Vm", "Reason",
                         "Budgets", "Shadow", "Inferred", "InferredFrom", "DurationSeconds", "Scope",
                         "VmName", "Actor", "DurationInSeconds", "ApprovedBy", "EventSource"])
_types = st.sampled_from([f"com.azure.scheduledevents.{s}" for s in (
    "scheduled", "started", "completed", "canceled", "approved", "prepared", "preparefailed",
    "approvalrejected", "heartbeat", "coordinator.approve", "coordinator.breach", "coordinator.pause",
    "coordinator.x")]) | st.text(max_size=30)


@settings(max_examples=300, deadline=None)
@given(kind=_types, data=st.dictionaries(_keys, _json, max_size=10), when=_json,
       fmt=st.sampled_from(["teams", "slack"]))
def test_any_event_renders_to_the_documented_shape_or_to_nothing(kind, data, when, fmt) -> None:
    event = {"type": kind, "time": when, "source": "/x/web-1", "id": "i", "data": data}
    body = render(fmt, event, NOW, started_at=NOW)
    if kind.endswith(".heartbeat"):
        assert body is None
    else:
        assert (teams_problems if fmt == "teams" else slack_problems)(body) == []


def test_the_countdown_is_measured_from_the_sending_moment() -> None:
    event = agent_event("scheduled", observed=NOW - timedelta(hours=1))
    later = describe(event, NOW + timedelta(minutes=10))
    assert later is not None and "in 5 min" in later.title
