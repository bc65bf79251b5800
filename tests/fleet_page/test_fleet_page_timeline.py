"""The fleet page's rollout timeline in headless Chromium, and pending events that name their VMs.

The coordinator is tests/fleet_page/local.py: the pure core's fold fed with real agent CloudEvents,
served by the real Starlette app over real HTTP. Its history is a rollout through two groups
(``web0``, an availability set, and ``ss0``, a scale set in three zones), decided by the real
decision pass every 10 s of the last half hour with a group budget of 1; Azure's side (Started 5 s
after an approval, completed 60 s later) is played by local.rollout_state, since no simulator or
agent runs here. The end-to-end fleet's page test (test_fleet_page_browser.py) runs the real ones.

Set SE_SCREENSHOT_DIR=docs to refresh docs/fleet-timeline.png.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from se_forwarder.fleet.coordinator.api import ApiServer
from se_forwarder.fleet.coordinator.decide import index
from se_forwarder.fleet.coordinator.fold import claimed as fold_event
from se_forwarder.fleet.coordinator.fold.gates import GateVerdict
from se_forwarder.fleet.coordinator.view import spans
from tests.support.waiting import wait_for

from .browser import chrome, console_errors
from .local import POLICY, LocalCoordinator, report, rollout_state

pytestmark = pytest.mark.timeout(180)

TOKEN = "timeline-test-token-0123456789abcdef"
ROLLING = ("web0", "ss0")


@pytest.fixture(scope="module")
def page():
    now = time.time()
    state, groups = rollout_state(now, ROLLING)
    members = {g[0]["tags"]["group"]: g for g in groups}
    # An unmanaged Freeze and a Reboot past its NotBefore, each for one VM its group reported.
    freeze, due = str(uuid.uuid4()).upper(), str(uuid.uuid4()).upper()
    for v in members["web1"]:
        fold_event(state, report("scheduled", v, freeze, ["web1-3"], now - 20, now + 900, "Freeze"))
    for v in members["web2"]:
        fold_event(state, report("scheduled", v, due, ["web2-4"], now - 60, now - 30))
    # A gate (of a scope no rolling group is in) that was closed for five minutes and is closed again.
    state.gates["deploys"] = GateVerdict("deploys", "http", "group:tag/quiet", False, "answered 423",
                                         checked=now - 5, since=now - 120,
                                         closed=((now - 900, now - 600), (now - 120, None)))
    coordinator = LocalCoordinator(state, POLICY).start()
    server = ApiServer(coordinator, "127.0.0.1", 0, [TOKEN])
    server.start()
    browser = chrome(1500, 1300)
    try:
        browser.get(f"http://127.0.0.1:{server.port}/")
        wait_for(lambda: browser.execute_script("return window.sePage && window.sePage.renders"), 30,
                 "the first render")
        yield {"browser": browser, "coordinator": coordinator, "groups": groups, "freeze": freeze,
               "due": due, "now": now}
        assert console_errors(browser) == []
    finally:
        browser.quit()
        server.stop()
        coordinator.stop()


def js(browser, script: str):
    return browser.execute_script(script)


def bars(browser, group: str, kind: str) -> list[dict]:
    """The timeline's bars of one kind in a group: VM, times, and the SVG geometry in pixels."""
    return js(browser, f"""
        return [...document.querySelectorAll('.tl-group[data-group="tag/{group}"] rect.tl-bar.k-{kind}')]
          .map(r => ({{vm: r.dataset.vm, start: Number(r.dataset.start),
                      end: r.dataset.end === "" ? null : Number(r.dataset.end),
                      x: r.x.baseVal.value, width: r.width.baseVal.value}}));""")


def test_the_timeline_has_a_row_for_every_vm_grouped(page) -> None:
    browser, groups = page["browser"], page["groups"]
    rows = js(browser, "const o = {}; for (const g of document.querySelectorAll('.tl-group')) "
                       "o[g.dataset.group] = [...g.querySelectorAll('.tl-row[data-vm]')]"
                       ".map(r => r.dataset.vm); return o;")
    assert {group: sorted(names) for group, names in rows.items()} == {
        f"tag/{g[0]['tags']['group']}": sorted(v["name"] for v in g) for g in groups}


def test_one_bar_per_started_span_and_none_overlap_inside_a_group_with_budget_one(page) -> None:
    browser, coordinator = page["browser"], page["coordinator"]

    def started_spans() -> dict[str, set[tuple[str, float]]]:
        state = coordinator.state
        idx = index(state, POLICY)
        out: dict[str, set[tuple[str, float]]] = {}
        for s in spans(state, POLICY, idx):
            if s.kind == "started":
                out.setdefault(idx.group_of[s.vm], set()).add((state.vms[s.vm].name, round(s.start, 3)))
        return out

    expected = coordinator.submit(started_spans).result(10)
    assert set(expected) == {f"tag/{g}" for g in ROLLING} and all(len(v) == 10 for v in expected.values())
    for group in ROLLING:
        found = bars(browser, group, "started")
        assert {(b["vm"], b["start"]) for b in found} == expected[f"tag/{group}"]
        assert len(found) == len(expected[f"tag/{group}"])  # one bar each
        ordered = sorted(found, key=lambda b: b["start"])
        assert [b["end"] is None for b in ordered].count(True) <= 1  # only the last may go on
        for before, after in zip(ordered, ordered[1:], strict=False):
            assert before["end"] is not None and before["end"] <= after["start"]  # the data
            assert before["x"] + before["width"] <= after["x"] + 0.01  # and the drawing
    assert bars(browser, "web1", "started") == []


def test_each_group_shows_its_budget_line_against_its_max(page) -> None:
    browser = page["browser"]
    for group in ROLLING:
        sel = f'.tl-group[data-group="tag/{group}"]'
        assert js(browser, f"return document.querySelector('{sel}').dataset.peak") == "1"
        assert js(browser, f"return document.querySelector('{sel} .tl-down .tl-max').dataset.max") == "1"
        levels = js(browser, f"return [...document.querySelectorAll('{sel} .tl-down .tl-level')]"
                             ".map(r => Number(r.dataset.n))")
        assert levels and set(levels) == {1}
        assert js(browser, f"return document.querySelectorAll('{sel} .tl-down .tl-level.over').length") == 0
    header = js(browser, "return document.querySelector('.tl-group[data-group=\"tag/web0\"] .tl-head')"
                         ".textContent")
    assert "10 Started" in header and "at most 1 down at once (max 1)" in header


def test_a_gate_that_was_closed_has_a_row_of_its_own_with_a_bar_per_closed_period(page) -> None:
    browser, now = page["browser"], page["now"]
    periods = js(browser, """
        return [...document.querySelectorAll('.tl-gate-row[data-gate="deploys"] rect.tl-gate')].map(r => ({
          start: Number(r.dataset.start), end: r.dataset.end === "" ? null : Number(r.dataset.end),
          open: r.classList.contains("open"), x: r.x.baseVal.value, width: r.width.baseVal.value}));""")
    assert [(round(p["start"] - now), None if p["end"] is None else round(p["end"] - now)) for p in periods] \
        == [(-900, -600), (-120, None)]
    first, going = periods
    assert not first["open"] and going["open"]  # still closed: drawn up to now, dashed
    assert first["x"] + first["width"] < going["x"] and first["width"] > going["width"]
    label = "return document.querySelector('.tl-gate-row[data-gate=\"deploys\"] .tl-label').textContent"
    assert js(browser, label) == "gate deploys"


def click(browser, selector: str, what: str) -> None:
    """Click what ``selector`` finds now, found again if a poll's redraw replaced it meanwhile."""
    wait_for(lambda: browser.find_element("css selector", selector).click() or True, 10, what)


def vm_rows(browser, group: str) -> int:
    return js(browser, f"return document.querySelectorAll('.tl-group[data-group=\"tag/{group}\"] "
                       ".tl-row[data-vm]').length")


def test_a_group_collapses_to_its_budget_line_and_opens_again(page) -> None:
    browser = page["browser"]
    sel = '.tl-group[data-group="tag/ss0"]'
    assert vm_rows(browser, "ss0") == 10
    click(browser, f"{sel} .tl-head", "the group's header")
    wait_for(lambda: vm_rows(browser, "ss0") == 0, 10, "the group to collapse")
    assert js(browser, f"return document.querySelectorAll('{sel} .tl-down .tl-level').length") > 0
    click(browser, f"{sel} .tl-head", "the group's header")
    wait_for(lambda: vm_rows(browser, "ss0") == 10, 10, "the group to open again")


def test_a_groups_header_clicked_after_a_poll_redrew_the_timeline_still_toggles_it(page) -> None:
    browser = page["browser"]
    header = browser.find_element("css selector", '.tl-group[data-group="tag/web0"] .tl-head')
    renders = js(browser, "return window.sePage.renders")
    wait_for(lambda: js(browser, "return window.sePage.renders") > renders, 10, "a poll's redraw")
    header.click()  # the element found before the redraw: the same one, not a replaced copy
    wait_for(lambda: vm_rows(browser, "web0") == 0, 10, "the group to collapse")
    header.click()  # and after the redraw of its own click
    wait_for(lambda: vm_rows(browser, "web0") == 10, 10, "the group to open again")


def test_every_pending_event_card_names_its_vm_left_alone_or_past_not_before(page, tmp_path: Path) -> None:
    browser = page["browser"]
    for event_id, code, vm in ((page["freeze"], "unmanaged", "web1-3"), (page["due"], "due", "web2-4")):
        card = f'.event[data-event="{event_id}"]'
        wait_for(lambda card=card: js(browser, f"return !!document.querySelector('{card}')"), 10, "the card")
        assert js(browser, f"return document.querySelector('{card} .why .code').textContent") == code
        head = js(browser, f"return document.querySelector('{card} .head').textContent")
        assert vm in head, head
    shot = tmp_path / "fleet-timeline.png"
    browser.execute_script("window.scrollTo(0, 0)")
    assert browser.find_element("id", "timeline-section").screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("SE_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["SE_SCREENSHOT_DIR"]) / "fleet-timeline.png")
