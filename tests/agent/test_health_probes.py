"""The [health] probes against real things on 127.0.0.1: an HTTP server and a TCP port the test
controls, real commands; and the checker's thread, which flips the verdict after N results."""

from __future__ import annotations

import os
import sys
import threading
import time

from se_forwarder.health.checker import HealthChecker
from se_forwarder.health.probes import Probe
from se_forwarder.health.settings import HealthSettings, ProbeSettings
from se_forwarder.model import HEALTHY, UNHEALTHY, UNKNOWN
from se_forwarder.outbox import Outbox
from tests.support.app_server import AppServer, TcpPort
from tests.support.ports import free_port
from tests.support.receiver import make_tls
from tests.support.waiting import wait_for


def http(url: str, timeout: float = 1.0, **kw) -> Probe:
    return Probe(ProbeSettings("http", "web", timeout, url=url, **kw))


def tcp(port: int, timeout: float = 1.0) -> Probe:
    return Probe(ProbeSettings("tcp", "db", timeout, host="127.0.0.1", port=port))


def command(code: str, timeout: float = 2.0, **kw) -> Probe:
    return Probe(ProbeSettings("command", "check", timeout, command=(sys.executable, "-c", code)), **kw)


def test_an_http_probe_passes_on_a_2xx_and_fails_naming_the_status(tmp_path):
    with AppServer() as app:
        assert http(app.url).run() == (True, None)
        app.status = 503
        assert http(app.url).run() == (False, f"HTTP 503 from {app.url} (expected 200-399)")
        assert app.requests == ["/healthz", "/healthz"]


def test_an_http_probe_takes_only_the_statuses_it_expects():
    with AppServer() as app:
        app.status = 204
        probe = http(app.url, expect_status=(200,))
        assert probe.run() == (False, f"HTTP 204 from {app.url} (expected 200)")


def test_an_http_probe_fails_when_nothing_listens_or_the_answer_is_late():
    port = free_port()
    passed, reason = http(f"http://127.0.0.1:{port}/healthz").run()
    assert not passed and "Connection refused" in reason
    with AppServer() as app:
        app.hang = 2.0
        began = time.monotonic()
        passed, reason = http(app.url, timeout=0.5).run()
        assert not passed and reason.startswith("no answer in time")
        assert time.monotonic() - began < 1.5  # bounded by its timeout, not the server


def test_an_http_probe_opens_a_fresh_connection_every_time():
    with AppServer() as app:
        probe = http(app.url)
        assert probe.run()[0]
        app.stop()  # an application that takes no new connections fails, whatever was open
        assert not probe.run()[0]


def test_an_https_probe_verifies_the_certificate_against_its_ca_file(tmp_path):
    tls = make_tls(tmp_path / "tls")
    with AppServer(tls=tls) as app:
        passed, reason = http(app.url).run()  # the public roots do not know the test CA
        assert not passed and reason.startswith("TLS: ")
        assert http(app.url, ca_file=str(tls.ca_cert)).run() == (True, None)


def test_a_tcp_probe_passes_while_the_port_accepts_and_fails_once_it_is_closed():
    with TcpPort() as port:
        assert tcp(port.port).run() == (True, None)
    passed, reason = tcp(port.port).run()
    assert not passed
    assert reason == f"cannot connect to 127.0.0.1:{port.port}: Connection refused"


def test_a_command_probe_passes_on_exit_0_and_fails_with_its_last_line_of_output():
    assert command("print('fine')").run() == (True, None)
    assert command("print('disk /data is read-only'); raise SystemExit(2)").run() == (
        False, "exit code 2: disk /data is read-only")


def test_a_command_probe_that_hangs_is_killed_at_its_timeout():
    passed, reason = command("import time; time.sleep(30)", timeout=0.5).run()
    assert (passed, reason) == (False, "timed out after 0.5 s (killed)")


def test_a_command_probe_never_sees_the_agents_secrets(tmp_path, monkeypatch):
    out = tmp_path / "env.txt"
    monkeypatch.setenv("SE_TEST_PROBE_SECRET", "whsec_secret")
    monkeypatch.setenv("PROBE_ALLOWED", "yes")
    probe = command(f"import os; open({str(out)!r}, 'w').write(repr(sorted(os.environ)))",
                    env_names=["PROBE_ALLOWED"], secret_env=["SE_TEST_PROBE_SECRET"])
    assert probe.run() == (True, None)
    names = eval(out.read_text())  # noqa: S307 - the list the probe wrote
    assert "PROBE_ALLOWED" in names and "SE_PROBE" in names
    assert "SE_TEST_PROBE_SECRET" not in names and "HOME" not in names


def settings(*probes: ProbeSettings, interval: float = 1.0, healthy: int = 1,
             unhealthy: int = 3) -> HealthSettings:
    return HealthSettings(probes=probes, interval=interval, timeout=0.5, healthy_threshold=healthy,
                          unhealthy_threshold=unhealthy)


def test_the_verdict_turns_unhealthy_after_three_failures_and_healthy_after_two_passes(tmp_path):
    with AppServer() as app:
        checker = HealthChecker(settings(ProbeSettings("http", "web", 0.5, url=app.url), healthy=2))
        assert checker.current().verdict == UNKNOWN
        assert [checker.round().verdict for _ in range(2)] == [UNKNOWN, HEALTHY]
        app.status = 500
        verdicts = [checker.round() for _ in range(3)]
        assert [v.verdict for v in verdicts] == [HEALTHY, HEALTHY, UNHEALTHY]
        assert (verdicts[-1].probe, verdicts[-1].reason) == (
            "web", f"HTTP 500 from {app.url} (expected 200-399)")
        app.status = 200
        assert [checker.round().verdict for _ in range(2)] == [UNHEALTHY, HEALTHY]


def test_the_checker_runs_its_rounds_on_its_own_thread_and_stores_each_change(tmp_path):
    changes = []
    with AppServer() as app, TcpPort() as port:
        checker = HealthChecker(
            settings(ProbeSettings("http", "web", 0.5, url=app.url),
                     ProbeSettings("tcp", "db", 0.5, host="127.0.0.1", port=port.port), unhealthy=2),
            state_dir=tmp_path, on_change=changes.append)
        stop = threading.Event()
        checker.start(stop)
        try:
            wait_for(lambda: checker.current().verdict == HEALTHY, timeout=10, what="healthy")
            port.stop()
            verdict = wait_for(lambda: (v := checker.current()).verdict == UNHEALTHY and v, timeout=10,
                               what="unhealthy after two failed rounds")
            assert verdict.probe == "db" and "Connection refused" in verdict.reason

            def stored() -> str:
                with Outbox(tmp_path, readonly=True) as box:
                    return box.get_meta("health") or ""

            wait_for(lambda: '"Verdict": "unhealthy"' in stored(), what="the verdict stored for status")
            assert '"Probe": "db"' in stored()
        finally:
            stop.set()
            checker.close()
            checker.join(5)
    assert [c.verdict for c in changes] == [HEALTHY, UNHEALTHY]


def test_a_stopping_agent_ends_a_running_command_probe_at_once(tmp_path):
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    checker = HealthChecker(settings(ProbeSettings("command", "slow", 0.9,
                                                   command=(sys.executable, "-c", code)), interval=1))
    stop = threading.Event()
    checker.start(stop)
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), what="the probe's pid"))
    stop.set()
    checker.close()
    checker.join(10)

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, timeout=10, what="the command probe to end")
