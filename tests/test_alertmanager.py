"""The Alertmanager the alert-gate tests run: Debian's ``prometheus-alertmanager``, started on
loopback by the ``alertmanager`` fixture, answering API v2 as a gate will ask it."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests.support.alertmanager import alert
from tests.support.waiting import wait_for

NOW = datetime.now(UTC)


def names(alerts: list[dict]) -> list[str]:
    return sorted(a["labels"]["alertname"] for a in alerts)


def test_it_is_the_alertmanager_debian_ships(alertmanager):
    version = subprocess.run([alertmanager.binary, "--version"], capture_output=True, text=True,
                             timeout=10)
    said = version.stdout + version.stderr
    assert "alertmanager, version 0." in said, said
    status = alertmanager.http.get(f"{alertmanager.url}/api/v2/status", timeout=5).json()
    assert status["versionInfo"]["version"].startswith("0.")
    assert status["cluster"]["status"] == "disabled"  # no gossip port opened


def test_a_posted_alert_is_returned_active_and_found_by_its_labels(alertmanager):
    alertmanager.post(alert("HighCpu", severity="page", scope="web"),
                      alert("DiskFull", severity="ticket", scope="db"))
    firing = alertmanager.alerts()
    assert names(firing) == ["DiskFull", "HighCpu"]
    assert all(a["status"]["state"] == "active" for a in firing)
    assert names(alertmanager.alerts(['alertname="HighCpu"'])) == ["HighCpu"]
    assert names(alertmanager.alerts(['severity=~"page|critical"', 'scope!="db"'])) == ["HighCpu"]
    assert alertmanager.alerts(['scope="api"']) == []


def test_an_expired_alert_is_not_returned(alertmanager):
    alertmanager.post(alert("WasFiring", starts=NOW - timedelta(minutes=5), ends=NOW - timedelta(seconds=1)),
                      alert("StillFiring"))
    assert names(alertmanager.alerts()) == ["StillFiring"]


def test_an_alert_that_ends_is_no_longer_returned(alertmanager):
    alertmanager.post(alert("Brief", ends=datetime.now(UTC) + timedelta(seconds=2)))
    assert names(alertmanager.alerts()) == ["Brief"]
    wait_for(lambda: alertmanager.alerts() == [], timeout=10, what="the alert to end")


def test_a_silenced_alert_is_left_out_unless_silenced_ones_are_asked_for(alertmanager):
    alertmanager.post(alert("Noisy", scope="web"), alert("Real", scope="web"))
    alertmanager.silence({"alertname": "Noisy"})
    wait_for(lambda: names(alertmanager.alerts()) == ["Real"], what="the silence applied")
    assert names(alertmanager.alerts(silenced=True)) == ["Noisy", "Real"]


def test_a_stopped_alertmanager_refuses_connections_and_comes_back_on_its_port(alertmanager):
    port = alertmanager.port
    alertmanager.stop()
    with pytest.raises(requests.ConnectionError):
        alertmanager.alerts()
    alertmanager.start()
    assert alertmanager.port == port and alertmanager.alerts() == []
