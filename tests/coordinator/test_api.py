"""The control API and the page over real HTTP: only trusted Hosts are answered (no DNS rebinding),
and the actor of an action is the name of its token in the server's table, whatever the client says.

The coordinator behind the app is tests/fleet_page/local.py's (the pure core's fold in this
process); the app is the real Starlette one, served by uvicorn on loopback.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator.api import ApiServer, TokenTable, host_allowed, read_tokens, unnamed
from tests.fleet_page.local import LocalCoordinator, fleet_state

ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
HTTP = requests.Session()
HTTP.trust_env = False
ROUTES = ["/", "/page/v1/view", "/page/static/page.js", "/healthz", "/metrics", "/v1/status"]


@pytest.fixture(scope="module")
def api() -> Any:
    coordinator = LocalCoordinator(fleet_state(20, 2, time.time())[0]).start()
    coordinator.settings = SimpleNamespace(api=SimpleNamespace(allowed_hosts=("coordinator.internal",)),
                                           web=None)
    server = ApiServer(coordinator, "127.0.0.1", 0, TokenTable((("alice", ALICE), ("bob", BOB))))
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", coordinator
    finally:
        server.stop()
        coordinator.stop()


@pytest.mark.parametrize("route", ROUTES)
def test_a_request_for_another_host_name_gets_400_on_every_route(api: Any, route: str) -> None:
    url, _ = api
    reply = HTTP.get(url + route, headers={"Host": "attacker.example", "Authorization": f"Bearer {ALICE}"},
                     timeout=10)
    assert reply.status_code == 400 and "Host" in reply.json()["error"]


def test_the_page_document_is_not_given_to_a_rebound_name_through_a_loopback_tunnel(api: Any) -> None:
    url, _ = api  # a browser on a page of attacker.example:8470, whose name now points at 127.0.0.1
    reply = HTTP.get(url + "/page/v1/view", headers={"Host": "attacker.example:8470"}, timeout=10)
    assert reply.status_code == 400


@pytest.mark.parametrize("host", ["localhost:8470", "LOCALHOST", "127.0.0.1:1", "[::1]:8470", "10.0.0.5",
                                  "coordinator.internal:8470"])
def test_localhost_ip_addresses_and_configured_names_are_answered(api: Any, host: str) -> None:
    url, _ = api
    assert HTTP.get(url + "/page/v1/view", headers={"Host": host}, timeout=10).status_code == 200


@pytest.mark.parametrize(("header", "allowed"), [
    ("localhost", True), ("localhost.:80", True), ("127.0.0.1:8470", True), ("[::1]", True),
    ("[2001:db8::1]:443", True), ("10.1.2.3", True), ("coordinator.internal", True),
    ("attacker.example", False), ("127.0.0.1.attacker.example", False),
    ("localhost.attacker.example", False),
    ("", False), ("[::1", False), ("[::1]x", False), ("::1", False), ("localhost:http", False),
    ("coordinator.internal.evil", False),
])
def test_host_allowed_takes_localhost_addresses_and_the_names_given(header: str, allowed: bool) -> None:
    assert host_allowed(header, ["coordinator.internal"]) is allowed


def pause(url: str, token: str, body: dict[str, Any]) -> requests.Response:
    return HTTP.post(url + "/v1/pause", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def test_the_actor_recorded_is_the_token_s_name_whatever_the_client_says(api: Any) -> None:
    url, coordinator = api
    reply = pause(url, ALICE, {"scope": "fleet", "reason": "release", "actor": "person:ceo"})
    assert reply.status_code == 200 and reply.json()["decision"]["data"]["Actor"] == "alice"
    reply = pause(url, BOB, {"scope": "zone:westeurope/1", "reason": "zone work", "actor": "alice"})
    assert reply.status_code == 200 and reply.json()["decision"]["data"]["Actor"] == "bob"
    paused = coordinator.submit(coordinator.status).result(10)["paused"]
    assert sorted((p["scope"], p["actor"]) for p in paused) == \
        [("fleet", "alice"), ("zone:westeurope/1", "bob")]


def test_an_action_needs_no_actor_in_its_body(api: Any) -> None:
    url, _ = api
    reply = HTTP.post(url + "/v1/resume", json={"scope": "fleet", "reason": "over"},
                      headers={"Authorization": f"Bearer {BOB}"}, timeout=10)
    assert reply.status_code == 200 and reply.json()["decision"]["data"]["Actor"] == "bob"


def test_a_token_file_names_its_tokens_and_a_bare_token_gets_a_stable_name(tmp_path: Path) -> None:
    path = tmp_path / "api.token"
    path.write_text(f"# who may act\nalice {ALICE}   # on call\n\n{BOB}\n")
    table = read_tokens(str(path))
    assert table.entries == (("alice", ALICE), (unnamed(BOB), BOB))
    assert unnamed(BOB).startswith("token-") and len(unnamed(BOB)) == 14 and BOB[:8] not in unnamed(BOB)
    assert table.name_of(BOB) == unnamed(BOB) and table.name_of("x" * 20) is None
    path.write_text(f"{BOB}\n# rotated:\nalice {ALICE}\n")
    assert read_tokens(str(path)).name_of(BOB) == unnamed(BOB)  # the same name wherever it stands


@pytest.mark.parametrize(("text", "message"), [
    ("", "holds no token"),
    ("alice short\n", "line 1: a token must be at least 16"),
    (f"alice {ALICE} extra\n", "line 1: give a name and a token"),
    (f"al/ice {ALICE}\n", "line 1: a name is 1-64"),
    (f"alice {ALICE}\nalice {BOB}\n", "line 2: the same name or token"),
    (f"alice {ALICE}\nbob {ALICE}\n", "line 2: the same name or token"),
])
def test_a_bad_token_file_is_one_line_naming_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "api.token"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_tokens(str(path))


def test_settle_ends_a_key_conflict_over_http_with_the_tokens_name_as_actor(api: Any) -> None:
    from se_forwarder.fleet.coordinator.fold.state import Conflict, Identity

    url, coordinator = api
    vm = next(iter(coordinator.state.vms))
    one, two = (Identity(k * 44, k * 16, 100.0, 900.0, "doc", "") for k in ("a", "b"))
    coordinator.state.identities.pop(vm, None)
    coordinator.state.conflicts[vm] = Conflict("doc", 100.0, (one, two), 50.0)
    headers = {"Authorization": f"Bearer {ALICE}"}
    wrong = HTTP.post(url + "/v1/settle", json={"vmId": vm, "keyid": "c" * 16, "reason": "checked"},
                      headers=headers, timeout=10)
    assert wrong.status_code in (400, 409) and "not one of the keys" in wrong.json()["error"]
    body = {"vmId": vm, "keyid": one.keyid, "reason": "checked on the VM"}
    reply = HTTP.post(url + "/v1/settle", json=body, headers=headers, timeout=10)
    assert reply.status_code == 200 and reply.json()["decision"]["data"]["Actor"] == "alice"
    assert coordinator.state.conflicts == {} and coordinator.state.identities[vm] == one
    again = HTTP.post(url + "/v1/settle", json={"vmId": vm, "keyid": None, "reason": "twice"},
                      headers=headers, timeout=10)
    assert again.status_code == 409 and "not in key conflict" in again.json()["error"]
