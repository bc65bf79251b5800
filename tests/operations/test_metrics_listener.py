"""The /metrics listener cannot starve the agent: one thread for every client, each client bounded."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time

import psutil
import pytest
import requests

from se_forwarder import metrics_server
from se_forwarder.metrics_server import MetricsServer
from tests.support.agent import AgentProcess, cloudevents
from tests.support.config import write_config
from tests.support.ports import free_port
from tests.support.waiting import wait_for

from .helpers import healthz, scrape

HALF_SENT = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # the blank line never comes


def open_idle(port: int, count: int) -> list[socket.socket]:
    conns = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        conns.append(s)
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # already evicted
            s.sendall(HALF_SENT)
    return conns


def answer(s: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes the connection."""
    s.settimeout(timeout)
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


@pytest.fixture
def server():
    from prometheus_client import CollectorRegistry

    srv = MetricsServer("127.0.0.1", 0, CollectorRegistry(), lambda: (True, "ok: test"))
    yield srv
    srv.close()


def test_500_idle_connections_starve_neither_a_prepare_hook_nor_metrics(simulator, control, agents,
                                                                      tmp_path):
    port = free_port()
    marker = tmp_path / "prepared-by-hook"
    out = tmp_path / "out.jsonl"
    cfg = write_config(
        tmp_path / "agent.toml", sinks=[{"type": "file", "path": str(out)}],
        imds={"url": simulator.url, "poll_interval": 0.1}, state={"dir": str(tmp_path / "state")},
        telemetry={"prometheus_port": port, "log_format": "json"},
        **{"approvals.hooks": {"prepare": [sys.executable, "-c",
                                           f"open({str(marker)!r}, 'w').write('drained')"]}})
    agent = AgentProcess(["--config", str(cfg)], log_path=tmp_path / "agent.log").start()
    agents.append(agent)
    wait_for(lambda: healthz(port)[0] == 200, what="the endpoint")
    conns = open_idle(port, 500)
    try:
        time.sleep(0.5)  # every connection accepted (or evicted) by now
        assert psutil.Process(agent.proc.pid).num_threads() < 30  # not one per connection
        control.add(EventType="Reboot")
        wait_for(lambda: marker.exists(), timeout=15, what="the prepare hook to run")
        wait_for(lambda: cloudevents(out, "prepared"), timeout=15, what="the prepared CloudEvent")
        started = time.monotonic()
        assert scrape(port)  # answered while the 500 are still open
        assert time.monotonic() - started < 2.0
        assert healthz(port)[0] == 200
    finally:
        for s in conns:
            s.close()


def test_an_idle_connection_is_answered_408_and_closed_after_its_timeout(server, monkeypatch):
    monkeypatch.setattr(metrics_server, "REQUEST_TIMEOUT", 0.5)
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(HALF_SENT)
        started = time.monotonic()
        reply = answer(s)
    assert reply.startswith(b"HTTP/1.1 408 ")
    assert 0.4 <= time.monotonic() - started < 3.0


def test_open_connections_are_capped_and_the_oldest_make_room(server):
    conns = open_idle(server.port, metrics_server.MAX_CONNECTIONS + 40)
    try:
        wait_for(lambda: server.connections <= metrics_server.MAX_CONNECTIONS, timeout=5,
                 what="the cap")
        r = requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
        assert r.status_code == 200 and r.text == "ok: test\n"
        assert answer(conns[0], timeout=2) == b""  # the oldest was closed without an answer
        assert server.connections <= metrics_server.MAX_CONNECTIONS
    finally:
        for s in conns:
            s.close()


def test_an_oversized_request_head_is_refused_with_431(server):
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Filler: " + b"a" * (metrics_server.MAX_HEAD + 10))
        assert answer(s).startswith(b"HTTP/1.1 431 ")


@pytest.mark.parametrize(("request_line", "status"), [
    (b"POST /metrics HTTP/1.1", b"405"), (b"GET /nowhere HTTP/1.1", b"404"),
    (b"nonsense", b"400"), (b"GET /healthz?x=1 HTTP/1.0", b"200"),
])
def test_requests_get_one_answer_and_the_connection_closes(server, request_line, status):
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(request_line + b"\r\nHost: x\r\n\r\n")
        reply = answer(s)
    assert reply.split(b" ", 2)[1] == status
    assert b"\r\nConnection: close\r\n" in reply


def test_close_ends_the_thread_and_frees_the_port():
    from prometheus_client import CollectorRegistry

    srv = MetricsServer("127.0.0.1", 0, CollectorRegistry(), lambda: (True, "ok"))
    conns = open_idle(srv.port, 5)
    srv.close()
    assert "metrics-http" not in {t.name for t in threading.enumerate()}
    socket.create_server(("127.0.0.1", srv.port)).close()  # as the next agent would listen
    for s in conns:
        s.close()
