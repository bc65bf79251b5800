"""The fleet page's steering buttons clicked in headless Chromium: hold and release an event, pause
and resume a group, approve an event now. Each asks for a reason, and the coordinator records the
decision with that reason and, as its actor, the name of the page's token in its token table.

The coordinator is tests/fleet_page/local.py (the pure core's fold with real agent CloudEvents),
served by the real Starlette app over real HTTP; the end-to-end fleet's browser test
(test_fleet_page_browser.py) clicks the fleet-wide pause against ``coordinator run``.
"""

from __future__ import annotations

import time

import pytest

from se_forwarder.fleet.coordinator import load_policy
from se_forwarder.fleet.coordinator.api import ApiServer, TokenTable
from tests.support.waiting import wait_for

from .browser import chrome, console_errors, dialog_open, give_reason, give_token
from .local import LocalCoordinator, fleet_state

pytestmark = pytest.mark.timeout(180)

TOKEN = "buttons-test-token-0123456789abcdef"
ACTOR = "tester"  # the token's name in the coordinator's table
# NotBefore is 20 minutes ahead or more: nothing is approved early unless a person says so.
POLICY = load_policy({
    "policy": {"approve_within": "5m", "min_healthy": "2m", "heartbeat_timeout": "1h", "group_tag": "group"},
    "budgets": [{"scope": "group", "max_unavailable": 1}],
})


@pytest.fixture(scope="module")
def page():
    state, _ = fleet_state(40, 2, time.time())
    coordinator = LocalCoordinator(state, POLICY).start()
    server = ApiServer(coordinator, "127.0.0.1", 0, TokenTable(((ACTOR, TOKEN),)))
    server.start()
    browser = chrome()
    try:
        browser.get(f"http://127.0.0.1:{server.port}/")
        wait_for(lambda: len(browser.find_elements("css selector", "#pending .event")) == 2, 30,
                 "both pending events on the page")
        yield browser, coordinator
        assert console_errors(browser) == []
    finally:
        browser.quit()
        server.stop()
        coordinator.stop()


def status(coordinator: LocalCoordinator) -> dict:
    return coordinator.submit(coordinator.status).result(10)


def pending(coordinator: LocalCoordinator) -> list[dict]:
    return status(coordinator)["pending"]


def click(browser, xpath: str, what: str) -> None:
    """Click the element once it is there; the page re-renders every poll, so a found element may
    be replaced before the click lands."""
    from selenium.common.exceptions import StaleElementReferenceException

    def attempt() -> bool:
        try:
            found = browser.find_elements("xpath", xpath)
            if not found:
                return False
            found[0].click()
            return True
        except StaleElementReferenceException:
            return False

    wait_for(attempt, 15, what)


def answer(browser, reason: str) -> None:
    """Give the token the first time the page asks for it, then the reason."""
    wait_for(lambda: dialog_open(browser, "token-dialog") or dialog_open(browser, "action-dialog"), 10,
             "a dialog")
    if dialog_open(browser, "token-dialog"):
        give_token(browser, TOKEN)
    give_reason(browser, reason)


def card(event_id: str) -> str:
    return f'//div[contains(@class, "event") and @data-event="{event_id}"]'


def group_header(label: str) -> str:
    return f'//div[contains(@class, "ghead")][span[@class="name" and text()="{label}"]]'


def test_hold_then_release_an_event_with_its_buttons(page) -> None:
    browser, coordinator = page
    event = pending(coordinator)[0]["eventId"]

    click(browser, card(event) + '//button[text()="Hold"]', "the Hold button")
    answer(browser, "database migration tonight")
    wait_for(lambda: status(coordinator)["held"], 15, "the hold")
    held = status(coordinator)["held"]
    assert [(h["eventId"], h["actor"], h["reason"]) for h in held] == \
        [(event, ACTOR, "database migration tonight")]
    wait_for(lambda: browser.find_elements("xpath", card(event) + '//span[@class="code" and text()="held"]'),
             10, "the card to say held")

    click(browser, card(event) + '//button[text()="Release"]', "the Release button")
    answer(browser, "migration done")
    wait_for(lambda: not status(coordinator)["held"], 15, "the release")
    wait_for(lambda: browser.find_elements("xpath", card(event) + '//button[text()="Hold"]'), 10,
             "the Hold button back")
    releases = [d for d in status(coordinator)["decisions"] if d["decision"] == "release"]
    assert [(d["eventId"], d["actor"], d["reason"]) for d in releases] == [(event, ACTOR, "migration done")]


def test_pause_then_resume_a_group_with_its_buttons(page) -> None:
    browser, coordinator = page
    click(browser, group_header("web1") + '//button[text()="Pause group"]', "the Pause group button")
    answer(browser, "web1 canary")
    wait_for(lambda: status(coordinator)["paused"], 15, "the pause")
    assert [(p["scope"], p["actor"], p["reason"]) for p in status(coordinator)["paused"]] == \
        [("group:tag/web1", ACTOR, "web1 canary")]
    wait_for(lambda: browser.find_elements("xpath", group_header("web1") + '//button[text()="Resume group"]'),
             10, "the group header to offer Resume")

    click(browser, group_header("web1") + '//button[text()="Resume group"]', "the Resume group button")
    answer(browser, "canary fine")
    wait_for(lambda: not status(coordinator)["paused"], 15, "the resume")
    wait_for(lambda: browser.find_elements("xpath", group_header("web1") + '//button[text()="Pause group"]'),
             10, "the group header to offer Pause again")


def test_a_button_held_down_across_polls_still_clicks_when_released(page) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    browser, coordinator = page
    event = pending(coordinator)[0]["eventId"]
    hold = card(event) + '//button[text()="Hold"]'
    wait_for(lambda: browser.find_elements("xpath", hold), 15, "the Hold button")
    rendered = browser.execute_script("return document.body.dataset.rendered")
    ActionChains(browser).click_and_hold(browser.find_element("xpath", hold)).perform()
    time.sleep(5)  # two polls (2 s each) arrive while it is held
    assert browser.execute_script("return document.body.dataset.rendered") == rendered, \
        "the page redrew under a pressed button"
    ActionChains(browser).release().perform()
    wait_for(lambda: dialog_open(browser, "token-dialog") or dialog_open(browser, "action-dialog"), 10,
             "the click's dialog")
    wait_for(lambda: browser.execute_script("return document.body.dataset.rendered") != rendered, 10,
             "the redraw the polls owed")
    cancel = "token-cancel" if dialog_open(browser, "token-dialog") else "action-cancel"
    browser.find_element("id", cancel).click()
    assert status(coordinator)["held"] == [], "cancelled: nothing held"


def test_approve_now_publishes_a_person_s_approval_of_an_event_not_yet_due(page) -> None:
    browser, coordinator = page
    event = pending(coordinator)[-1]["eventId"]
    assert pending(coordinator)[-1]["reasonCode"] == "too-early"

    click(browser, card(event) + '//button[text()="Approve now"]', "the Approve now button")
    answer(browser, "customer asked for it before the window")

    def approvals() -> list[dict]:
        return [d for d in status(coordinator)["decisions"]
                if d["decision"] == "approve" and d["eventId"] == event]

    wait_for(approvals, 15, "the approval")
    reason = "customer asked for it before the window"
    assert [(d["actor"], d["reason"]) for d in approvals()] == [(ACTOR, reason)]
    wait_for(lambda: not browser.find_elements("xpath", card(event) + '//button[text()="Approve now"]'), 10,
             "the card to drop its Approve now button")
