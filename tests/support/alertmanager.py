"""Prometheus Alertmanager (Debian's ``prometheus-alertmanager``, 0.25) as a real subprocess on
127.0.0.1, for the alert-gate tests.

It listens on a free loopback port with a minimal configuration (one receiver that sends nothing),
its own storage directory and clustering off (Alertmanager otherwise gossips on 0.0.0.0:9094).
Alerts are posted and read through its API v2, as a gate reads them::

    with Alertmanager(workdir) as am:
        am.post(alert("HighCpu", severity="page"))
        am.alerts(['alertname="HighCpu"'])     # active, not silenced, not inhibited

``stop()`` then ``start()`` brings it back on the same port, with what its storage kept (silences;
alerts live in memory); in between the port refuses connections, as an Alertmanager that is down.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests

from .paths import ROOT
from .ports import free_port
from .processes import end
from .waiting import wait_for

BINARIES = ("prometheus-alertmanager", "alertmanager")  # Debian's name, upstream's
LOCAL = ROOT / ".cache" / "alertmanager" / "usr" / "bin" / "prometheus-alertmanager"
INSTALL_HINT = ("scripts/test unpacks Debian's prometheus-alertmanager into .cache/alertmanager "
                "(apt-get download prometheus-alertmanager; dpkg-deb -x ...)")
CONFIG = """\
route:
  receiver: nowhere
  group_wait: 0s
receivers:
  - name: nowhere
"""


def find_binary() -> str | None:
    """Alertmanager from PATH, or from the test script's unpacked package in ``.cache``."""
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    return str(LOCAL) if os.access(LOCAL, os.X_OK) else None


def alert(name: str, *, starts: datetime | None = None, ends: datetime | None = None,
          **labels: str) -> dict[str, Any]:
    """A postable alert (API v2): ``alertname`` and ``labels``, firing from ``starts`` (now) until
    ``ends`` (none: until Alertmanager's resolve timeout, 5 min, unless posted again)."""
    body: dict[str, Any] = {"labels": {"alertname": name, **labels},
                            "annotations": {"summary": f"{name} (a test's alert)"},
                            "startsAt": _stamp(starts or datetime.now(UTC))}
    if ends is not None:
        body["endsAt"] = _stamp(ends)
    return body


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Alertmanager:
    """One Alertmanager process (module docstring)."""

    def __init__(self, workdir: Path, binary: str | None = None) -> None:
        self.binary = binary or find_binary()
        self.workdir = Path(workdir)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = requests.Session()
        self.http.trust_env = False  # loopback: never through a proxy from the environment

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> Alertmanager:
        if not self.binary:
            raise RuntimeError(f"Alertmanager not found ({INSTALL_HINT})")
        config = self.workdir / "alertmanager.yml"
        config.write_text(CONFIG)
        storage = self.workdir / "data"
        storage.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / "alertmanager.log", "ab")  # noqa: SIM115 - the process keeps it
        try:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={config}", f"--storage.path={storage}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
                 "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        try:
            wait_for(self._ready, timeout=timeout, what=f"Alertmanager on {self.url}")
        except AssertionError:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            tail = (self.workdir / "alertmanager.log").read_text(errors="replace")[-500:]
            raise RuntimeError(f"Alertmanager exited ({self.proc.returncode}): {tail}")
        return self.http.get(f"{self.url}/-/ready", timeout=2).status_code == 200

    def stop(self) -> None:
        end(self.proc)
        self.proc = None

    def __enter__(self) -> Alertmanager:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.http.close()

    # -- API v2 -----------------------------------------------------------------------------
    def post(self, *alerts: dict[str, Any]) -> None:
        """``POST /api/v2/alerts``."""
        answer = self.http.post(f"{self.url}/api/v2/alerts", json=list(alerts), timeout=5)
        assert answer.status_code == 200, answer.text

    def alerts(self, matchers: list[str] = (), *, active: bool = True, silenced: bool = False,
               inhibited: bool = False) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts`` with label ``matchers`` (``alertname="HighCpu"``,
        ``severity=~"page|critical"``), as an alert gate asks."""
        params: list[tuple[str, str]] = [("active", _flag(active)), ("silenced", _flag(silenced)),
                                         ("inhibited", _flag(inhibited))]
        params += [("filter", m) for m in matchers]
        answer = self.http.get(f"{self.url}/api/v2/alerts", params=params, timeout=5)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def silence(self, matchers: dict[str, str], minutes: float = 10) -> str:
        """``POST /api/v2/silences`` for equal-matchers; the silence's id."""
        now = datetime.now(UTC)
        body = {"matchers": [{"name": k, "value": v, "isRegex": False, "isEqual": True}
                             for k, v in matchers.items()],
                "startsAt": _stamp(now), "endsAt": _stamp(now + timedelta(minutes=minutes)),
                "createdBy": "se-forwarder tests", "comment": "a test's silence"}
        answer = self.http.post(f"{self.url}/api/v2/silences", json=body, timeout=5)
        assert answer.status_code == 200, answer.text
        return answer.json()["silenceID"]


def _flag(value: bool) -> str:
    return "true" if value else "false"
