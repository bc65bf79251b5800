"""Real parts for the operations tests: a tiny HTTP endpoint, config files, scraping /metrics."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from tests.conftest import ROOT, toml_value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class HttpEndpoint:
    """A real HTTP server on 127.0.0.1 recording every request; it answers with the ``script``ed
    statuses first, then always ``status``."""

    def __init__(self, status: int = 200, script: Iterable[int] = ()) -> None:
        self.status = status
        self.script = list(script)
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with owner._lock:
                    owner.requests.append(Received(self.command, self.path,
                                                   dict(self.headers.items()), body))
                    status = owner.script.pop(0) if owner.script else owner.status
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_OPTIONS = do_PUT = _any  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def posts(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and (path is None or r.path == path)]

    def __enter__(self) -> HttpEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def write_config(path: Path, sinks: Iterable[dict[str, Any]] = (), **sections: dict[str, Any]) -> Path:
    """A TOML config file: ``[section]`` tables from keyword arguments and ``[[sinks]]`` tables."""
    lines: list[str] = []
    for name, table in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    for sink in sinks:
        lines.append("[[sinks]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in sink.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Every sample on /metrics as {(name, frozenset(labels)): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def sample(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def healthz(port: int) -> tuple[int, str]:
    """(status, line) of /healthz; (0, why) while nothing listens yet."""
    try:
        r = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    except requests.ConnectionError as exc:
        return 0, f"not listening: {type(exc).__name__}"
    return r.status_code, r.text.strip()


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    """`se-forwarder ARGS` as a user runs it."""
    import os

    return subprocess.run([sys.executable, "-m", "se_forwarder", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
