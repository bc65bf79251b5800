"""Running one probe once: its result (passed or not) and, when not, why, in one line.

- ``http``: one GET on a fresh connection (no keep-alive between rounds, so a server that takes no
  new connections fails the probe); redirects are not followed; at most ``BODY_BYTES`` of the body
  are read. ``https`` is always verified (``ca_file``, else the public roots). No proxy is used.
- ``tcp``: a connection is made and closed.
- ``command``: the command runs in its own process group with the hooks' environment allow-list
  (never the agent's secrets) and no stdin; at its timeout it gets SIGTERM, then SIGKILL
  (``approvals/hook_process.py``). The last line of its output is the reason when it fails.

Every probe ends by its ``timeout`` (a command by its timeout plus the kill grace) and never
raises: an error is a failure with its reason.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Iterable
from urllib.parse import urlsplit

from ..approvals import hook_process
from ..http_client import HttpError, Origin, tls_context
from ..validation import public_url
from .settings import ProbeSettings

BODY_BYTES = 4096
USER_AGENT = "se-forwarder-health"

Result = tuple[bool, str | None]


class Probe:
    """One configured probe, ready to run (``run``: from one thread at a time)."""

    def __init__(self, settings: ProbeSettings, *, env_names: Iterable[str] = (),
                 secret_env: Iterable[str] = (), processes: hook_process.Processes | None = None) -> None:
        self.settings = settings
        self.name = settings.name
        self.env_names = list(env_names)
        self.secret_env = list(secret_env)
        self.processes = processes or hook_process.Processes()
        self._origin: Origin | None = None
        if settings.type == "http":
            parts = urlsplit(settings.url)
            context = tls_context(settings.ca_file) if parts.scheme == "https" else None
            self._origin = Origin(f"{parts.scheme}://{parts.netloc}", connect_timeout=settings.timeout,
                                  headers={"User-Agent": USER_AGENT, "Connection": "close"},
                                  ssl_context=context)
            self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def run(self) -> Result:
        """One check: (passed, why not)."""
        try:
            if self.settings.type == "http":
                return self._http()
            if self.settings.type == "tcp":
                return self._tcp()
            return self._command()
        except Exception as exc:  # noqa: BLE001 - a probe's failure is a result, never a crash
            return False, f"could not run the probe: {type(exc).__name__}: {exc}"

    def _http(self) -> Result:
        assert self._origin is not None
        timeout = self.settings.timeout
        try:
            reply = self._origin.request("GET", self._target, timeout=timeout, total=timeout,
                                         max_bytes=BODY_BYTES, truncate=True)
        except HttpError as exc:
            cause = exc.__cause__
            if isinstance(cause, ssl.SSLCertVerificationError):
                return False, f"TLS: {cause.verify_message or cause}"
            return False, f"{exc} ({public_url(self.settings.url)})"
        finally:
            self._origin.close()  # a fresh connection each round
        if reply.status in self.settings.expect_status:
            return True, None
        return False, (f"HTTP {reply.status} from {public_url(self.settings.url)} "
                       f"(expected {_statuses(self.settings.expect_status)})")

    def _tcp(self) -> Result:
        host, port = self.settings.host, self.settings.port
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            with socket.create_connection((host, port), timeout=self.settings.timeout):
                return True, None
        except TimeoutError:
            return False, f"no connection to {shown} within {self.settings.timeout:g} s"
        except OSError as exc:
            return False, f"cannot connect to {shown}: {exc.strerror or exc}"

    def _command(self) -> Result:
        env = hook_process.environment(os.environ, self.env_names, self.secret_env,
                                       {"SE_PROBE": self.name})
        with open(os.devnull, "rb") as stdin:
            outcome = hook_process.run(self.processes, self.settings.command, stdin, env,
                                       self.settings.timeout)
        if outcome.state == hook_process.SUCCEEDED:
            return True, None
        last = next((line for line in reversed(outcome.spool.text().splitlines()) if line.strip()), "")
        return False, outcome.detail + (f": {last.strip()}" if last else "")


def _statuses(codes: tuple[int, ...]) -> str:
    if len(codes) > 3 and list(codes) == list(range(codes[0], codes[-1] + 1)):
        return f"{codes[0]}-{codes[-1]}"
    return ", ".join(map(str, codes))
