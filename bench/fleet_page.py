"""The fleet page at fleet scale: its document's size, the time to build it, and the browser's times.

For each fleet size: VMs heard from just now (bench/coordinator_fold.py's fleet: availability sets
of 10 and scale sets of 50 in three zones), 50 pending Reboots. Groups are named by a tag (as a
fleet that sets ``group_tag`` has them); ``--learned`` leaves the tag out, so every availability-set
VM that has not shared an event yet is a group of its own (the worst case: one header per VM).
``--rollout`` replaces the 50 Reboots by half an hour of a rollout through every group (one Reboot
per VM, paced by the real decision pass: tests/fleet_page/local.rollout_state), so the timeline
has four spans or so per VM that went through it.
The page is served by the real Starlette app over uvicorn on loopback, from an in-process fold
(tests/fleet_page/local.py), and loaded in headless Chromium: the bytes it was sent (every response
of the load, as Chromium counts them), and the time from the navigation's start to its first render
on the screen, the document's build on a cold cache included. Above view.page.INLINE_VMS VMs the
document summarises the groups; opening one fetches its VMs, and the search box asks the
coordinator. Figures are printed; nothing is asserted. Baselines, from the same run: the document
with every VM in it (what the page sent before groups were summarised), and the view.status +
view.groups documents the control API serves for the same fold.
``/v1/state`` is asked over HTTP as ``coordinator`` tools ask it: its digest kept as the fold goes
(view/digest.py), beside the whole fold's JSON hashed as every call did before.

    .venv/bin/python bench/fleet_page.py [--vms 1000 10000 100000] [--learned | --rollout]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from se_forwarder.fleet.coordinator import FleetState, evaluate  # noqa: E402
from se_forwarder.fleet.coordinator.api import ApiServer  # noqa: E402
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot  # noqa: E402
from se_forwarder.fleet.coordinator.view import (
    groups,  # noqa: E402
    page_view,  # noqa: E402
)
from se_forwarder.fleet.coordinator.view.digest import Digest  # noqa: E402
from se_forwarder.fleet.coordinator.view.page import INLINE_VMS  # noqa: E402
from se_forwarder.fleet.coordinator.view.status import status  # noqa: E402
from tests.fleet_page.browser import chrome  # noqa: E402
from tests.fleet_page.local import POLICY, LocalCoordinator, fleet_state, rollout_state, tagged  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402


def best_of(runs: int, func) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(runs):
        began = time.perf_counter()
        value = func()
        best = min(best, time.perf_counter() - began)
    return best, value


TOKEN = "bench-token-0123456789abcdef"


def state_calls(state: FleetState, port: int) -> list[tuple[str, str]]:
    """/v1/state over HTTP: the first call, then the next ones."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/state",
                                     headers={"Authorization": f"Bearer {TOKEN}"})

    def call() -> bytes:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return bytes(reply.read())

    first, _ = best_of(1, call)
    later, _ = best_of(5, call)
    whole, _ = best_of(1, lambda: Digest().of(state))
    old, _ = best_of(1, lambda: hashlib.sha256(json.dumps(snapshot(state), sort_keys=True,
                                                          separators=(",", ":")).encode()).hexdigest())
    return [("/v1/state over HTTP (best of 5)", f"{later * 1000:.1f} ms, first call {first * 1000:.0f} ms "
                                                f"(made whole at a start: {whole * 1000:.0f} ms)"),
            ("  baseline: the whole fold hashed per call", f"{old * 1000:.0f} ms")]


def measure(vms: int, learned: bool, rollout: bool = False) -> list[tuple[str, str]]:
    now = time.time()
    if rollout:
        every = tuple(members[0]["tags"]["group"] for members in tagged(vms))
        state, _ = rollout_state(now, every, vms)
    else:
        state, _ = fleet_state(vms, 50, now)
    policy = replace(POLICY, group_tag="") if learned else POLICY
    build, document = best_of(3, lambda: page_view(state, policy, now))
    raw = json.dumps(document, separators=(",", ":")).encode()
    packed = gzip.compress(raw, 5)
    whole_build, whole = best_of(1, lambda: page_view(state, policy, now, inline=vms + 1))
    whole_raw = json.dumps(whole, separators=(",", ":")).encode()

    def baseline() -> bytes:
        ev = evaluate(state, policy, now)
        return json.dumps({"status": status(state, policy, now, ev),
                           "groups": groups(state, policy, now, ev)}).encode()

    base_build, base = best_of(3, baseline)
    rows = [
        ("groups", f"{len(document['groups'])}"),
        ("timeline spans", f"{sum(g.get('spanCount', len(g.get('spans', ()))) for g in document['groups'])}"),
        ("groups summarised", "yes" if document["summarised"] else f"no (up to {INLINE_VMS} VMs)"),
        ("document build (server, best of 3)", f"{build * 1000:.0f} ms   (every VM in it: "
                                               f"{whole_build * 1000:.0f} ms; status+groups: "
                                               f"{base_build * 1000:.0f} ms)"),
        ("document size", f"{len(raw) / 1024:.0f} KB raw, {len(packed) / 1024:.0f} KB gzipped   "
                          f"(every VM in it: {len(whole_raw) / 1024:.0f} KB raw, "
                          f"{len(gzip.compress(whole_raw, 5)) / 1024:.0f} KB gzipped; status+groups: "
                          f"{len(base) / 1024:.0f} KB raw, "
                          f"{len(gzip.compress(base, 5)) / 1024:.0f} KB gzipped)"),
    ]
    coordinator = LocalCoordinator(state, policy).start()
    server = ApiServer(coordinator, "127.0.0.1", 0, [TOKEN])
    server.start()
    rows += state_calls(state, server.port)
    browser = chrome()
    try:
        browser.get(f"http://127.0.0.1:{server.port}/")
        drawn = "return window.sePage && window.sePage.drawnMs"
        wait_for(lambda: browser.execute_script(drawn), 120, "a render")
        stats = browser.execute_script("return window.sePage")
        sent = browser.execute_script(
            "return [performance.getEntriesByType('navigation')[0].transferSize,"
            " ...performance.getEntriesByType('resource').map(e => e.transferSize)]")
        rows.append(("bytes sent for the load", f"{sum(sent) / 1024:.0f} KB in {len(sent)} responses"))
        rows.append(("navigation start to first render drawn", f"{stats['drawnMs']:.0f} ms"))
        timing = browser.execute_script(
            "const v = performance.getEntriesByType('resource').find(e => e.name.includes('/page/v1/view'));"
            "const n = performance.getEntriesByType('navigation')[0];"
            "return [n.responseEnd, n.domContentLoadedEventEnd, v.startTime, v.responseStart, v.responseEnd]")
        page, ran, asked, answered, received = timing
        rows.append(("  of which", f"page {page:.0f} ms, scripts run {ran:.0f} ms, document asked "
                                   f"{asked:.0f} ms, answered {answered:.0f} ms, received {received:.0f} ms"))
        rows.append(("  polls, errors", f"{stats['polls']}, {stats['errors']}"))
        rows.append(("first render (collapsed groups)", f"{stats['firstRenderMs']:.0f} ms, fetch+parse "
                                                        f"{stats['lastFetchMs']:.0f} ms"))
        rows.append(("of which the timeline", f"{stats['lastTimelineMs']:.0f} ms"))
        wait_for(lambda: browser.execute_script("return window.sePage.renders") >= 3, 30, "two more polls")
        stats = browser.execute_script("return window.sePage")
        rows.append(("render of a later poll", f"{stats['lastRenderMs']:.0f} ms"))
        if document["summarised"]:
            rows += open_a_group(browser, document)
        else:
            browser.find_element("id", "expand-all").click()
            wait_for(lambda: browser.execute_script("return window.sePage.lastExpandMs"), 60, "expand all")
            tiles = browser.execute_script("return document.querySelectorAll('.group .vm').length")
            expand = browser.execute_script("return window.sePage.lastExpandMs")
            rows.append(("expand all groups", f"{expand:.0f} ms ({tiles} tiles)"))
            browser.find_element("id", "collapse-all").click()
        name = next(iter(state.vms.values())).name
        began = time.perf_counter()
        browser.find_element("id", "search").send_keys(name)
        wait_for(lambda: browser.find_element("id", "search-result").text == "1 VM match", 30, "the search")
        found = time.perf_counter() - began
        rows.append(("search for one VM (typed to drawn, wall)", f"{found * 1000:.0f} ms (150 ms debounce)"))
    finally:
        browser.quit()
        server.stop()
        coordinator.stop()
    return rows


def open_a_group(browser, document: dict) -> list[tuple[str, str]]:
    """The largest group drawn opened by its header: the time until its VMs are drawn."""
    drawn = set(browser.execute_script(
        "return [...document.querySelectorAll('.group')].map(n => n.dataset.group)"))
    group = max((g for g in document["groups"] if g["group"] in drawn), key=lambda g: g["size"])
    tiles = f"return document.querySelectorAll('.group[data-group=\"{group['group']}\"] .grid .vm').length"
    browser.execute_script("window.scrollTo(0, 0)")
    head = browser.find_element("css selector", f'.group[data-group="{group["group"]}"] .ghead .name')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", head)
    began = time.perf_counter()
    head.click()
    wait_for(lambda: browser.execute_script(tiles) == min(group["size"], 2000), 30, "the group's VMs")
    opened = time.perf_counter() - began
    return [("open a group (fetch and draw, wall)", f"{opened * 1000:.0f} ms ({group['size']} VMs)")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vms", type=int, nargs="+", default=[1000, 10_000])
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--learned", action="store_true", help="no group tag: groups not learned yet")
    kind.add_argument("--rollout", action="store_true", help="a rollout through every group")
    args = parser.parse_args()
    for vms in args.vms:
        what = " (groups not learned yet)" if args.learned else " (mid-rollout)" if args.rollout else ""
        print(f"fleet page, {vms} VMs{what}:")
        for figure, value in measure(vms, args.learned, args.rollout):
            print(f"  {figure:<38} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
