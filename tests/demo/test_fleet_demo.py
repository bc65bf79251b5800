"""``se-forwarder demo --fleet`` as a user runs it: one run for the whole module, a subprocess with
``--keep`` so that its page can be loaded while the rollout runs and its simulator asked afterwards,
ended with Ctrl-C (the last test).

What the demo says is checked against the simulator's own record, read over its control API
(``/control/history``: when each event came, started and went; ``/control/approvals``: every
StartRequests), not against anything the demo computed. The page is loaded in headless Chromium.

Set SE_SCREENSHOT_DIR=docs to refresh the README's docs/fleet-demo.png.
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from tests.fleet_page.browser import chrome, console_errors
from tests.support.waiting import wait_for

from .run import DemoRun

pytestmark = pytest.mark.timeout(300)

WIDTH = 100
WEB = [f"web-{i}" for i in range(6)]
API = [f"api_{i}" for i in range(4)]
VMS = [*WEB, *API, "db"]
SLOW = "web-1"  # the VM whose application comes back late (demo/application.py)
SUMMARY = r"^summary, from the simulator's record"
KEPT = r"^Still running \(--keep\)"


@pytest.fixture(scope="module")
def demo():
    run = DemoRun("demo", "--fleet", "--keep").start()
    try:
        yield run
    finally:
        run.kill()


def utc(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def history(demo: DemoRun) -> list[dict]:
    demo.wait_for(KEPT, 180)  # the rollout is over: its record is complete
    return demo.control("history")


def summary_text(demo: DemoRun) -> str:
    demo.wait_for(KEPT, 180)
    out = demo.stdout
    return " ".join(out[re.search(SUMMARY, out, re.M).start():].split())  # type: ignore[union-attr]


def js(browser, script: str):
    return browser.execute_script(script)


def started_bars(browser) -> list[dict]:
    return js(browser, """
        return [...document.querySelectorAll('.tl-group rect.tl-bar.k-started')].map(r => ({
          group: r.closest('.tl-group').dataset.group, vm: r.dataset.vm, start: Number(r.dataset.start),
          end: r.dataset.end === "" ? null : Number(r.dataset.end), x: r.x.baseVal.value,
          width: r.width.baseVal.value}));""")


def started_spans(lives: list[dict]) -> dict[str, int]:
    """VM -> how many Started spans the simulator recorded for it."""
    count: dict[str, int] = {}
    for life in lives:
        if life["started"]:
            for vm in life["Resources"]:
                count[vm] = count.get(vm, 0) + 1
    return count


def test_the_page_shows_every_vm_a_countdown_and_the_timeline_as_the_rollout_runs(demo, tmp_path: Path):
    url = demo.url("Fleet page")
    browser = chrome(1500, 1300)
    try:
        browser.get(url + "/")
        wait_for(lambda: js(browser, "return window.sePage && window.sePage.renders"), 30, "the first render")
        tiles = "return [...document.querySelectorAll('.group .vm[data-vm]')].map(n => n.dataset.vm)"
        wait_for(lambda: set(js(browser, tiles)) >= set(VMS), 60, "every VM of the topology on the page")
        countdowns = "return [...document.querySelectorAll('.event .countdown')].map(n => n.textContent)"
        assert wait_for(lambda: [c for c in js(browser, countdowns) if re.fullmatch(r"in \d+:\d\d", c)], 60,
                        "a pending event counting down to its NotBefore")
        wait_for(lambda: len({b["vm"] for b in started_bars(browser) if b["group"] == "tag/web"}) >= 5, 90,
                 "five web VMs' Started bars on the timeline")
        shot = tmp_path / "fleet-demo.png"
        js(browser, "window.scrollTo(0, 0)")
        assert browser.save_screenshot(str(shot))
        if os.environ.get("SE_SCREENSHOT_DIR"):
            shutil.copy(shot, Path(os.environ["SE_SCREENSHOT_DIR"]) / "fleet-demo.png")

        spans = started_spans(history(demo))

        def bars_per_vm() -> dict[str, int]:
            return {vm: sum(1 for b in started_bars(browser) if b["vm"] == vm) for vm in spans}

        wait_for(lambda: bars_per_vm() == spans, 30, "a Started bar per Started span the simulator recorded")
        bars = started_bars(browser)
        assert {b["group"] for b in bars} == {"tag/web", "tag/api", "tag/db"}
        for group in ("tag/web", "tag/api"):
            mine = sorted((b for b in bars if b["group"] == group), key=lambda b: b["start"])
            for i, one in enumerate(mine):  # two VMs of a group never down at once
                for other in mine[i + 1:]:
                    if other["vm"] != one["vm"]:
                        assert one["end"] is not None and one["end"] <= other["start"], (one, other)
                        # drawn in percent to 3 decimals: bars that touch may meet 0.01-0.05 px off
                        assert one["x"] + one["width"] <= other["x"] + 0.05, (one, other)
        recovering = js(browser, """
            return [...document.querySelectorAll('.tl-group rect.tl-bar.k-recovering')].map(r => ({
              vm: r.dataset.vm, start: Number(r.dataset.start),
              end: r.dataset.end === "" ? null : Number(r.dataset.end)}));""")
        [slow] = [r for r in recovering if r["vm"] == SLOW]  # the slot held until its app was back
        assert slow["end"] is not None and slow["end"] - slow["start"] >= 4
        lives = history(demo)
        later = [utc(life["started"]) for life in lives if life["Resources"][0] in WEB and life["started"]
                 and utc(life["started"]) > slow["start"]]
        assert min(later) >= slow["end"]  # the next web VM started only once it was recovered
        assert console_errors(browser) == []
    finally:
        browser.quit()


def test_the_slow_application_holds_its_groups_slot_until_its_agent_reports_recovered(demo):
    demo.wait_for(KEPT, 180)
    rows = [line.split(None, 5) for line in demo.stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d  ", line)]
    slow = [r for r in rows if r[1] == SLOW]
    states = [r[2] for r in slow if r[2] in ("started", "unhealthy", "completed", "healthy", "recovered")]
    assert sorted(states) == sorted(["started", "unhealthy", "completed", "healthy", "recovered"]), states
    at = states.index  # the probe may see the application down before or after the Reboot ended
    assert at("started") < at("unhealthy") < at("healthy") < at("recovered")
    assert at("completed") < at("recovered")
    said = re.search(rf"{SLOW}'s application came back (\d+) s after its Reboot ended; the coordinator "
                     r"held the group's only slot until its agent reported it recovered: the next VM "
                     r"started (\d+) s after it was back", summary_text(demo))
    assert said, summary_text(demo)
    lives = [life for life in history(demo) if life["Resources"][0] in WEB and life["addedAs"] == "Scheduled"]
    [own] = [life for life in lives if life["Resources"] == [SLOW]]
    back = utc(own["ended"]) + int(said.group(1))
    assert all(utc(life["started"]) > back - 1 for life in lives if utc(life["started"]) > utc(own["ended"]))


def test_the_page_url_comes_first_then_a_line_per_decision_and_per_vm_in_columns(demo):
    demo.wait_for(KEPT, 180)
    lines = demo.stdout.splitlines()
    assert re.fullmatch(r"Fleet page: http://127\.0\.0\.1:\d+/ .*", lines[0])
    assert max(len(line) for line in lines) <= WIDTH
    assert re.search(r"^TIME +WHO +WHAT +EVENT +EVENT ID +DETAILS$", demo.stdout, re.M)
    rows = [line.split(None, 5) for line in lines if re.match(r"\d\d:\d\d:\d\d  ", line)]
    approvals = [r for r in rows if r[1:3] == ["coordinator", "approve"]]
    assert len(approvals) == len(WEB) + len(API)
    assert {r[5].split(":")[0] for r in approvals} == set(WEB + API)
    assert [r for r in rows if r[1:3] == ["coordinator", "defer"]]
    assert re.search(r"web-\d: group:tag/web would have 2 unavailable, max 1", " ".join(demo.stdout.split()))
    unannounced = {r[4] for r in rows if r[5:] == ["no notice"]}
    for vm in [*WEB, *API]:  # each VM's maintenance, in the order it went through
        states = [r[2] for r in rows if r[1] == vm and r[4] not in unannounced
                  and r[2] in ("scheduled", "approved", "started", "completed")]
        assert states == ["scheduled", "approved", "started", "completed"], (vm, states)
    assert any(r[1] == "api_3" and r[2] == "started" and r[5] == "no notice" for r in rows if len(r) > 5)
    assert any(r[1] == "db" and r[2] == "started" and "left to Azure" in r[5] for r in rows if len(r) > 5)
    for kind in ("scheduled:", "approve:", "defer:", "approved:", "started:", "hardware failure:",
                 "completed:"):
        assert len([ln for ln in lines if ln.strip().startswith(f"^ {kind}")]) == 1, kind


def test_every_rollout_event_was_started_by_one_startrequests_from_its_own_vm(demo):
    lives = {life["EventId"]: life for life in history(demo)}
    approvals = [a for a in demo.control("approvals") if a["started"]]
    rollout = [life for life in lives.values() if life["EventType"] in ("Reboot", "Redeploy")
               and life["addedAs"] == "Scheduled"]
    assert sorted(vm for life in rollout for vm in life["Resources"]) == sorted(WEB + API)
    for life in rollout:
        [approval] = [a for a in approvals if a["EventId"] == life["EventId"]]
        assert approval["vm"] == life["Resources"][0] and life["how"] == "approved"
        assert utc(life["started"]) < utc(life["notBefore"])  # early, not at NotBefore


def test_the_summarys_numbers_are_the_simulators(demo):
    lives = history(demo)
    text = summary_text(demo)
    announced = min(utc(life["added"]) for life in lives  # the rollout's, not the failure's before it
                    if life["EventType"] in ("Reboot", "Redeploy") and life["addedAs"] == "Scheduled")
    for group, verb, kind, members in (("web", "rebooted", "availability set", WEB),
                                       ("api", "redeployed", r"scale set \(zones 1 and 2\)", API)):
        mine = [life for life in lives if life["addedAs"] == "Scheduled" and life["Resources"][0] in members]
        took = max(utc(x["ended"]) for x in mine) - min(utc(x["started"]) for x in mine)
        not_before = min(utc(x["notBefore"]) for x in mine) - announced
        said = re.search(rf"{group} The {len(members)} VMs of the {kind} were {verb} one at a time in "
                         r"(\d+) s of demo time, each on a StartRequests from its own VM, where Azure "
                         rf"alone would have started all {len(members)} at NotBefore, (\d+) s after they "
                         "were announced", text)
        assert said, text
        assert abs(int(said.group(1)) - took) <= 1 and abs(int(said.group(2)) - not_before) <= 1
    [failure] = [life for life in lives if life["addedAs"] == "Started"]
    said = re.search(r"A hardware failure took api_3 down for (\d+) s with no notice", text)
    assert failure["Resources"] == ["api_3"] and said
    assert abs(int(said.group(1)) - (utc(failure["ended"]) - utc(failure["started"]))) <= 1
    [freeze] = [life for life in lives if life["EventType"] == "Freeze"]
    said = re.search(r"db Its Freeze was left to Azure: it started at its NotBefore, (\d+) s after", text)
    assert freeze["how"] == "not-before" and said
    assert abs(int(said.group(1)) - (utc(freeze["started"]) - utc(freeze["added"]))) <= 1
    assert "Never more than 1 VM down at once in a group or a zone" in text


def test_the_budgets_hold_in_the_simulators_record(demo):
    """Never two VMs of a group or of a zone Started at once, from the simulator's record and its
    topology (a VM with two events Started at once is one VM down)."""
    lives = history(demo)
    topology = demo.control("topology")
    scopes = {vm: [f"group {g['name']}" for g in topology["groups"] if vm in g["vms"]]
              + ([f"zone {facts['zone']}"] if facts["zone"] else []) for vm, facts in topology["vms"].items()}
    down: dict[str, list[tuple[float, float]]] = {}
    for life in lives:
        if life["started"]:
            for vm in life["Resources"]:
                down.setdefault(vm, []).append((utc(life["started"]), utc(life["ended"])))
    most: dict[str, int] = {}
    for scope in {s for vm_scopes in scopes.values() for s in vm_scopes}:
        members = [vm for vm, vm_scopes in scopes.items() if scope in vm_scopes]
        moments = sorted({t for vm in members for span in down.get(vm, []) for t in span})
        most[scope] = max((sum(1 for vm in members if any(a <= t < b for a, b in down.get(vm, [])))
                           for t in moments), default=0)
    assert set(most) == {"group web", "group api", "group db", "zone 1", "zone 2"}
    assert all(n == 1 for n in most.values()), most


def test_every_vm_registered_and_the_coordinator_folded_only_verified_reports(demo):
    """The rollout went through the trust edge of a real coordinator: each agent's key bound by the
    simulator's attested document, every report signed with it, nothing refused or left waiting."""
    text = summary_text(demo)
    metrics = demo.metrics()
    prefix = "se_forwarder_coordinator_"
    assert metrics[prefix + "identities"] == {"": len(VMS)}
    refused = metrics[prefix + "refused_total"]
    assert "unsigned" in refused and "unregistered" in refused and "bad-signature" in refused
    assert set(refused.values()) == {0}, {reason: n for reason, n in refused.items() if n}
    assert metrics[prefix + "waiting"] == {"": 0}
    assert metrics[prefix + "skipped_total"]["malformed"] == 0
    said = re.search(r"It folded (\d+) reports from the agents, each verified with the key its VM "
                     rf"registered with an attested document \({len(VMS)} of {len(VMS)} VMs registered\), "
                     r"and refused 0\.", text)
    assert said, text
    assert int(said.group(1)) > len(VMS) and "All 11 VMs registered their keys" in demo.stdout


def test_ctrl_c_stops_it_cleanly(demo):
    demo.wait_for(KEPT, 180)
    assert demo.interrupt() == 0
    assert demo.stderr == ""
