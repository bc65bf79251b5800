"""The fleet page at 10,000 VMs in headless Chromium (its groups summarised), and who may read it.

The coordinator here is tests/fleet_page/local.py: the pure core's fold fed with real agent
CloudEvents (10,000 agents cannot run on one machine), served by the real Starlette app over real
HTTP (uvicorn). bench/fleet_page.py measures the same page's size and render times.
"""

from __future__ import annotations

import gzip
import json
import time

import pytest
import requests
from selenium.webdriver.common.keys import Keys

from se_forwarder.fleet.coordinator.addons import start_addons
from se_forwarder.fleet.coordinator.api import ApiServer, is_loopback_client
from se_forwarder.fleet.coordinator.config import WebSettings
from tests.support.waiting import wait_for

from .browser import chrome, console_errors
from .local import LocalCoordinator, fleet_state

TOKEN = "page-test-token-0123456789abcdef"
HTTP = requests.Session()
HTTP.trust_env = False


@pytest.fixture(scope="module")
def big():
    state, groups = fleet_state(10_000, 50, time.time())
    coordinator = LocalCoordinator(state).start()
    server = ApiServer(coordinator, "127.0.0.1", 0, [TOKEN])
    server.start()
    yield f"http://127.0.0.1:{server.port}", groups
    server.stop()
    coordinator.stop()


@pytest.fixture(scope="module")
def loaded(big):
    """Chromium with the page loaded and rendered once."""
    url, groups = big
    browser = chrome()
    try:
        browser.get(url + "/")
        wait_for(lambda: browser.execute_script("return window.sePage && window.sePage.renders"), 60,
                 "the first render")
        yield browser, groups
    finally:
        browser.quit()


def js(browser, script: str):
    return browser.execute_script(script)


def click(browser, selector: str) -> None:
    """Click what ``selector`` finds, scrolled to the middle of the window (not under its header)."""
    found = browser.find_element("css selector", selector)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", found)
    found.click()


def group_tiles(browser, group: str) -> int:
    return js(browser, f"return document.querySelectorAll('.group[data-group=\"{group}\"] .grid .vm').length")


@pytest.mark.timeout(300)
def test_at_10000_vms_groups_are_summarised_and_show_the_vms_that_are_not_ok(loaded) -> None:
    browser, groups = loaded
    counts = js(browser, "const all = (s) => document.querySelectorAll(s).length;"
                "return [all('.group'), all('.group .grid'), all('.group .strip .vm[data-state=approved]'),"
                " document.getElementById('fleet-counts').textContent]")
    assert counts[0] == 50 + 100  # the 50 groups with a Reboot, and the first 100 of those all ok
    assert counts[1] == 0  # no group's VMs are drawn until it is opened
    assert counts[2] == 50  # but each of the 50 VMs with a Reboot approved is (one per busy group)
    assert counts[3].startswith("10000 VMs")
    busy = "tag/" + groups[0][0]["tags"]["group"]
    head = js(browser, f"return document.querySelector('.group[data-group=\"{busy}\"] .ghead').textContent")
    assert "10 VMs · 1 unavailable" in head and "1 approved" in head
    assert js(browser, "return document.getElementById('expand-all').disabled")
    more = browser.find_element("id", "groups-more")
    quiet = sorted(groups[50:], key=lambda m: "tag/" + m[0]["tags"]["group"])  # as the page orders them
    assert more.text.startswith(f"{len(quiet) - 100} more groups with every VM ok "
                                f"({sum(len(m) for m in quiet[100:])} VMs)")
    click(browser, "#more-groups")
    wait_for(lambda: len(browser.find_elements("css selector", ".group")) == 50 + 200, 10, "100 more groups")
    assert console_errors(browser) == []


@pytest.mark.timeout(300)
def test_at_10000_vms_opening_a_group_fetches_its_vms(loaded) -> None:
    browser, groups = loaded
    members = groups[-1]  # a scale set
    group = "tag/" + members[0]["tags"]["group"]
    click(browser, f'.group[data-group="{group}"] .ghead .name')
    wait_for(lambda: group_tiles(browser, group) == len(members), 10, "the group's tiles")
    drawn = js(browser, f"return [...document.querySelectorAll('.group[data-group=\"{group}\"] .grid .vm')]"
                        ".map(n => n.dataset.vm)")
    assert sorted(drawn) == sorted(v["name"] for v in members)
    click(browser, f'.group[data-group="{group}"] .ghead .name')
    wait_for(lambda: group_tiles(browser, group) == 0, 10, "the group to close")
    assert console_errors(browser) == []


@pytest.mark.timeout(300)
def test_at_10000_vms_the_search_box_finds_a_vm_of_a_summarised_group(loaded) -> None:
    browser, groups = loaded
    wanted = groups[-2][7]["name"]  # deep in a collapsed scale set
    box = browser.find_element("id", "search")
    box.send_keys(wanted)
    wait_for(lambda: browser.find_element("id", "search-result").text == "1 VM match", 10, "one match")
    tile = browser.find_element("css selector", ".vm.match")
    assert tile.get_attribute("data-vm") == wanted
    detail = wait_for(lambda: browser.find_element("id", "vm-detail").text, 5, "the VM's detail")
    assert detail.startswith(f"{wanted} (zone ") and "watched" in detail
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)  # (clear() fires no input event)
    wait_for(lambda: browser.find_element("id", "search-result").text == "", 10, "the search to clear")
    box.send_keys("web")  # every availability set's VMs: more than a search names
    result = browser.find_element("id", "search-result")
    wait_for(lambda: "the first 50 shown" in result.text, 10, "the matches")
    assert result.text.startswith(f"{sum('web' in v['name'] for m in groups for v in m)} VMs match")
    assert len(browser.find_elements("css selector", ".vm.match")) == 50
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    wait_for(lambda: browser.find_element("id", "search-result").text == "", 10, "the search to clear")
    assert console_errors(browser) == []


@pytest.mark.timeout(300)
def test_at_10000_vms_the_timeline_shows_the_groups_with_maintenance_collapsed(loaded) -> None:
    browser, groups = loaded
    shown = browser.execute_script(
        "return [...document.querySelectorAll('.tl-group')].map(g => [g.dataset.group, g.dataset.open,"
        " g.querySelectorAll('.tl-row[data-vm]').length, g.querySelectorAll('.tl-down').length])")
    busy = {"tag/" + members[0]["tags"]["group"] for members in groups[:50]}  # one Reboot each
    assert {group for group, *_ in shown} == busy
    assert {(opened, rows, lines) for _, opened, rows, lines in shown} == {("0", 0, 1)}
    quiet = browser.execute_script("return document.getElementById('timeline').lastChild.textContent")
    assert quiet == f"{len(groups) - 50} groups with no maintenance in this window"
    first = f'.tl-group[data-group="{shown[0][0]}"]'
    click(browser, f"{first} .tl-head")
    rows = f"return document.querySelectorAll('{first} .tl-row[data-vm]').length"
    wait_for(lambda: browser.execute_script(rows) == 10, 10, "the group's ten VM rows")
    scheduled = f"return document.querySelectorAll('{first} rect.k-scheduled').length"
    assert browser.execute_script(scheduled) == 1
    assert console_errors(browser) == []


def test_the_document_is_gzipped_and_viewing_is_open_on_loopback_only(big) -> None:
    url, _ = big
    reply = HTTP.get(url + "/page/v1/view", headers={"Accept-Encoding": "gzip"}, stream=True, timeout=30)
    assert reply.status_code == 200 and reply.headers["Content-Encoding"] == "gzip"
    document = json.loads(gzip.decompress(reply.raw.read()))
    assert document["fleet"]["vms"] == 10_000 and len(document["pending"]) == 50
    assert reply.headers["Content-Security-Policy"].startswith("default-src 'none'")
    # The control API still wants the token, even on loopback.
    assert HTTP.post(url + "/v1/pause", json={"reason": "x", "actor": "y"}, timeout=10).status_code == 401
    assert is_loopback_client("127.0.0.1") and is_loopback_client("::1")
    assert not is_loopback_client("10.0.0.4") and not is_loopback_client(None)


def test_a_group_s_vms_and_a_search_are_read_over_http_and_a_bad_request_is_told_why(big) -> None:
    url, groups = big
    members = groups[-1]
    group = "tag/" + members[0]["tags"]["group"]
    reply = HTTP.get(url + "/page/v1/group", params={"group": group}, timeout=30)
    assert reply.status_code == 200 and reply.headers["Content-Security-Policy"].startswith("default-src")
    assert sorted(v[0] for v in reply.json()["vms"]) == sorted(v["name"] for v in members)
    found = HTTP.get(url + "/page/v1/search", params={"q": members[7]["name"]}, timeout=30).json()
    assert found["count"] == 1 and found["groups"][0]["group"] == group
    missing = HTTP.get(url + "/page/v1/group", params={"group": "tag/no-such-group"}, timeout=30)
    assert (missing.status_code, missing.json()) == (404, {"error": "no such group"})
    for path, params in (("group", {"group": group, "limit": "0"}),
                         ("group", {"group": group, "limit": "3000"}),
                         ("group", {"group": group, "offset": "-1"}), ("group", {}), ("search", {"q": ""}),
                         ("search", {"q": "x" * 257}), ("search", {"q": "x", "limit": "51"})):
        bad = HTTP.get(f"{url}/page/v1/{path}", params=params, timeout=30)
        assert bad.status_code == 400 and bad.json()["error"], (path, params)


class Settings:
    """What start_addons reads from ServiceSettings."""

    def __init__(self, web: WebSettings, token_file: str) -> None:
        self.web, self.notify = web, ()
        self.api = type("Api", (), {"token_file": token_file})()


def test_the_web_listener_serves_the_page_and_wants_its_own_token_off_loopback(tmp_path) -> None:
    state, _ = fleet_state(20, 1, time.time())
    coordinator = LocalCoordinator(state).start()
    api_tokens, web_tokens = tmp_path / "api.token", tmp_path / "web.token"
    api_tokens.write_text("api-token-0123456789abcdef\n")
    web_tokens.write_text("web-token-0123456789abcdef\n")
    web = WebSettings(port=0, token_file=str(web_tokens), open_on_loopback=False)
    coordinator.settings = Settings(web, str(api_tokens))
    addons = start_addons(coordinator, coordinator.settings)
    try:
        base = f"http://127.0.0.1:{addons.web.port}"
        assert "<title>Fleet" in HTTP.get(base + "/", timeout=10).text
        assert HTTP.get(base + "/page/v1/view", timeout=10).status_code == 401  # open_on_loopback = false
        assert HTTP.get(base + "/page/v1/view", timeout=10,
                        headers={"Authorization": "Bearer api-token-0123456789abcdef"}).status_code == 401
        ok = HTTP.get(base + "/page/v1/view", timeout=10,
                      headers={"Authorization": "Bearer web-token-0123456789abcdef"})
        assert ok.status_code == 200 and ok.json()["fleet"]["vms"] == 20
        for path in ("/page/v1/group?group=tag/web0", "/page/v1/search?q=web"):  # as the document
            assert HTTP.get(base + path, timeout=10).status_code == 401
            assert HTTP.get(base + path, timeout=10,
                            headers={"Authorization": "Bearer web-token-0123456789abcdef"}).status_code == 200
        paused = HTTP.post(base + "/v1/pause", json={"scope": "fleet", "reason": "r", "actor": "person:t"},
                           headers={"Authorization": "Bearer web-token-0123456789abcdef"}, timeout=10)
        assert paused.status_code == 200 and paused.json()["decision"]["data"]["Scope"] == "fleet"
    finally:
        addons.stop()
        coordinator.stop()
