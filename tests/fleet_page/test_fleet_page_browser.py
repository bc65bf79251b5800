"""The fleet page in a real browser (headless Chromium) against the end-to-end fleet: the simulator
with an availability set and a scale set, one agent per VM, the Event Hubs broker, Azurite and
``se-forwarder coordinator run``; the page is served by the coordinator's own HTTP server.

Set SE_SCREENSHOT_DIR=docs to refresh the README's screenshot (docs/fleet-page.png).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from se_forwarder.fleet.coordinator.api import unnamed
from tests.fleet_coordinator.fleet import DECISION, TOPOLOGY, Fleet
from tests.support.waiting import wait_for

from .browser import chrome, console_errors, give_reason, give_token

pytestmark = pytest.mark.timeout(420)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    fleet = Fleet(tmp_path_factory.mktemp("page-fleet")).start()
    yield fleet
    fleet.stop()


@pytest.fixture(scope="module")
def coordinator(fleet):
    c = fleet.coordinator("page").start()
    try:
        wait_for(c.ready, 120, "the coordinator to lead and catch up")
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def browser():
    driver = chrome()
    yield driver
    driver.quit()


def js(browser, script: str):
    return browser.execute_script(script)


def text(browser, selector: str) -> str:
    """The text of what ``selector`` finds, read in one go: the page redraws its cards every poll."""
    return js(browser, f"return document.querySelector({json.dumps(selector)}).innerText")


def tiles(browser) -> dict[str, str]:
    return js(browser, "const o = {}; for (const n of document.querySelectorAll('.group .vm[data-vm]')) "
                       "o[n.dataset.vm] = n.dataset.state; return o;")


def approvals_on_hub(fleet, event_id: str) -> list[dict]:
    return [e for e in fleet.decisions("page")
            if e["type"] == DECISION + "approve" and e["data"]["EventId"] == event_id]


def test_the_page_shows_the_fleet_counts_down_and_its_pause_button_stops_approvals(
        fleet, coordinator, browser, tmp_path: Path):
    from selenium.webdriver.common.by import By

    browser.get(coordinator.url + "/")
    # Every VM of the topology, watched (heartbeats), as a tile of its group's grid.
    wait_for(lambda: set(tiles(browser)) >= set(TOPOLOGY.vm_names)
             and set(tiles(browser).values()) == {"ok"}, 60, "every VM on the page, watched")
    assert js(browser, "return document.querySelectorAll('.group').length") >= 2

    # An unmanaged Freeze waits, with the reason and a live countdown to its NotBefore (30 min ahead).
    freeze = fleet.add("web-3", "Freeze")
    card = f'.event[data-event="{freeze}"]'
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, card), 30, "the Freeze among pending events")
    assert text(browser, f"{card} .why .code") == "unmanaged"
    first = text(browser, f"{card} .countdown")
    assert re.fullmatch(r"in (29|30):\d\d", first), first
    wait_for(lambda: browser.find_element(By.CSS_SELECTOR, f"{card} .countdown").text != first, 5,
             "the countdown to move")
    assert tiles(browser)["web-3"] == "pending"

    # Not paused: a Reboot is approved, and the decision log says so.
    reboot = fleet.add("api_0")
    wait_for(lambda: approvals_on_hub(fleet, reboot), 60, "the coordinator to approve the first Reboot")
    logged = ("return [...document.querySelectorAll('#decisions li.d-approve')]"
              ".map(n => n.textContent).join(' ')")
    wait_for(lambda: reboot in js(browser, logged), 15, "the approval in the log")

    # Pause everything with the button: the page asks for the token, then for a reason.
    browser.find_element(By.ID, "pause-fleet").click()
    token = fleet.token_file.read_text().strip()
    give_token(browser, token)
    give_reason(browser, "change freeze for the release")
    wait_for(lambda: browser.find_elements(By.ID, "paused-banner"), 20, "the paused banner")
    paused = coordinator.get("/v1/status")["paused"]
    assert [(p["scope"], p["actor"], p["reason"]) for p in paused] == \
        [("fleet", unnamed(token), "change freeze for the release")]  # the token file's one entry

    # Paused: a new Reboot waits with reason "paused" and nothing is approved or sent for it.
    waiting = fleet.add("web-1")
    wcard = f'.event[data-event="{waiting}"]'
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, f"{wcard} .why .code")
             and browser.find_element(By.CSS_SELECTOR, f"{wcard} .why .code").text == "paused", 30,
             "the Reboot to wait because of the pause")
    assert re.fullmatch(r"in (29|30):\d\d", text(browser, f"{wcard} .countdown"))
    time.sleep(8)
    assert approvals_on_hub(fleet, waiting) == []
    assert fleet.requests_for(waiting) == []
    assert waiting in fleet.pending()

    shot = tmp_path / "fleet-page.png"
    browser.execute_script("window.scrollTo(0, 0)")
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if os.environ.get("SE_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["SE_SCREENSHOT_DIR"]) / "fleet-page.png")

    # Resume with the button (the token is kept in the tab): the waiting Reboot is approved.
    browser.find_element(By.ID, "pause-fleet").click()
    give_reason(browser, "release is out")
    wait_for(lambda: approvals_on_hub(fleet, waiting), 60, "the approval after resume")
    wait_for(lambda: not browser.find_elements(By.ID, "paused-banner"), 20, "the banner to go")
    assert console_errors(browser) == []
