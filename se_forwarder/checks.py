"""`se-forwarder check`: one line per part (state, IMDS, each sink, approval queue, telemetry).

Each line starts with ``ok``, ``FAIL``, ``warn`` or ``skip`` and says what is wrong and how to fix
it. The caller exits non-zero when any line failed (a warning is not a failure).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import getpass
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import requests

from .approvals.queue.names import names_the_vm
from .config import Settings
from .enrichment import hostname
from .errors import StateError, one_line, root_cause
from .imds import ImdsClient, ImdsError
from .model import MalformedDocument, VmIdentity
from .outbox import Outbox, db_path
from .sinks import SinkContext, create
from .telemetry import otlp_base, redact

WARN = "warn"  # a check result that is worth saying but never fails the command
CHECK_IMDS_TIMEOUT = 10.0  # not IMDS's two minutes: `check` is interactive
HTTP_TIMEOUT = 5.0
LOCAL_TIMEOUT = 2.0  # a running agent on this machine answers /healthz at once


def run_checks(settings: Settings, echo: Callable[[str], None]) -> int:
    """Print one ``ok``/``FAIL``/``skip`` line per check; the number of failures."""
    failures = 0
    checks: list[tuple[str, Callable[[], tuple[bool | str | None, str]]]] = [
        ("state", lambda: check_state(settings.state.dir)),
        ("imds", lambda: check_imds(settings)),
        ("instance metadata", lambda: check_instance_metadata(settings)),
    ]
    for s in settings.sinks:
        checks.append((f"sink {s.name}", functools.partial(check_sink, settings, s)))
    checks.append(("approval queue", lambda: check_queue(settings)))
    t = settings.telemetry
    if t.prometheus_port:
        checks.append(("prometheus", lambda: check_prometheus(t.prometheus_host, t.prometheus_port)))
    if t.otlp_endpoint:
        checks.append(("otlp", lambda: check_otlp(t.otlp_endpoint)))
    for label, check in checks:
        try:
            ok, text = check()
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line
            ok, text = False, f"{type(exc).__name__}: {exc}"
        prefix = {True: "ok   ", False: "FAIL ", None: "skip ", WARN: "warn "}[ok]
        echo(redact(f"{prefix} {label}: {text}" if text else f"{prefix} {label}"))
        failures += ok is False
    return failures


def check_state(state_dir: Path) -> tuple[bool, str]:
    """Do with the state directory what the agent does: create it if needed, then write, fsync and
    remove a file in it (``os.access`` is wrong for root and for special file systems). Folders
    made here are removed again; an existing outbox database must open and pass a quick check."""
    path = Path(state_dir)
    if path.exists() and not path.is_dir():
        return False, f"{path} exists but is not a directory; set [state] dir to a directory"
    made = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
    try:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return False, f"{path} cannot be created: {exc.strerror or exc}{_state_hint(exc)}"
        problem = _write_fsync_remove(path)
        if problem:
            return False, problem
    finally:
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()
    who = _user()
    if made:
        return True, f"{path} can be created and written by {who} (tested; the agent creates it)"
    database = db_path(path)
    if database.exists():
        try:
            with Outbox(path, readonly=True):
                pass
        except StateError as exc:
            return False, str(exc)
        return True, f"{path} is writable by {who} (tested) and its outbox database is sound"
    return True, f"{path} is writable by {who} (tested by writing, fsyncing and removing a file)"


def _write_fsync_remove(folder: Path) -> str | None:
    try:
        fd, name = tempfile.mkstemp(prefix=".se-forwarder-check-", dir=folder)
    except OSError as exc:
        return f"{folder} is not writable: {exc.strerror or exc}{_state_hint(exc)}"
    try:
        os.write(fd, b"se-forwarder check\n")
        os.fsync(fd)
    except OSError as exc:
        return f"{folder}: writing and fsyncing a file failed: {exc.strerror or exc}{_state_hint(exc)}"
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)
    if os.path.exists(name):
        return f"{folder}: a file written there cannot be removed ({name})"
    return None


def _state_hint(exc: OSError) -> str:
    """What to do about a failed create/write in the state directory (after the OS's words)."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        if hasattr(os, "getuid") and os.getuid() == 0:
            return " even for root (a special or protected file system); set [state] dir elsewhere"
        return f" for {_user()}; run check as the agent's user, or give it write access (chown)"
    return {
        errno.EROFS: "; give the agent a writable [state] dir",
        errno.ENOENT: " (a special file system such as /proc takes no files); set [state] dir elsewhere",
        errno.ENOSPC: "; free some space, or set [state] dir elsewhere",
        errno.EDQUOT: "; raise the quota, or set [state] dir elsewhere",
    }.get(exc.errno or 0, "; set [state] dir to a directory the agent can write")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (containers)
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "this user"


def check_imds(settings: Settings) -> tuple[bool, str]:
    """One GET of the scheduled-events document."""
    client = _imds_client(settings)
    try:
        doc = client.get_document()
    except ImdsError as exc:
        return False, f"{exc} (is this an Azure VM, or is [imds] url / --imds-url right?)"
    finally:
        client.close()
    return True, (f"{client.base_url} answers (incarnation {doc.incarnation}, "
                  f"{len(doc.events)} event(s))")


def _imds_client(settings: Settings) -> ImdsClient:
    return ImdsClient(settings.imds.url, settings.imds.api_version, timeout=settings.imds.timeout,
                      first_call_timeout=CHECK_IMDS_TIMEOUT, lease_files=settings.imds.lease_files)


def check_instance_metadata(settings: Settings) -> tuple[bool | str, str]:
    """The instance metadata (for enrichment); missing is a warning: events go out anyway."""
    client = _imds_client(settings)
    try:
        vm = VmIdentity.from_compute(client.get_compute(), settings.vm.tags)
    except (ImdsError, MalformedDocument) as exc:
        return WARN, (f"{exc}; events are forwarded with the host name {hostname()!r} as the VM "
                      "name until it answers")
    finally:
        client.close()
    tags = f", tags {', '.join(k for k, _ in vm.tags)}" if vm.tags else ""
    return True, (f"{vm.name} (vmId {vm.vm_id}, fault domain {vm.platform_fault_domain or '-'}, "
                  f"update domain {vm.platform_update_domain or '-'}{tags})")


def check_sink(settings: Settings, sink_settings: object) -> tuple[bool, str]:
    """Build the sink like the agent does (secrets, CA bundle) and let it reach its endpoint."""
    s = sink_settings
    sink = create(s.type, s.name, s.options, SinkContext(settings.state.dir))  # type: ignore[attr-defined]
    try:
        problem = sink.check()
    finally:
        sink.close()
    return (False, problem) if problem else (True, "")


def check_queue(settings: Settings) -> tuple[bool | str | None, str]:
    """The remote approval queue (``approvals.queue.client.check``)."""
    if not settings.approvals.queue:
        return True, "not configured (remote approvals off)"
    from .approvals.queue.client import check

    try:
        problem = check(settings)
    except ImportError as exc:
        return False, (f"needs the package {getattr(exc, 'name', None) or exc}: "
                       "pip install 'se-forwarder[queue]'")
    if problem:
        return False, problem
    template = settings.approvals.queue.queue
    if not names_the_vm(template):
        return WARN, (f"reachable, but the template {template!r} names no VM: every VM using it shares "
                      "one queue, and the coordinator sends none of them an approval (put {vm_name} or "
                      "{vm_id} in [approvals.queue] queue)")
    return True, "reachable"


def check_prometheus(host: str, port: int) -> tuple[bool, str]:
    """The port is free for the agent, or a running agent serves it and is healthy."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    probe = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    probe = f"[{probe}]" if ":" in probe else probe
    try:
        reply = requests.get(f"http://{probe}:{port}/healthz", timeout=LOCAL_TIMEOUT,
                             allow_redirects=False, proxies={"http": "", "https": ""})
    except requests.RequestException:
        reply = None
    if reply is not None and reply.headers.get("Server", "").startswith("se-forwarder"):
        line = reply.text.strip()
        if reply.status_code == 200:
            return True, f"a running agent serves http://{shown}/metrics; /healthz: {line}"
        return False, f"the running agent is unhealthy: {line}"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            return False, (f"cannot listen on {shown}: {exc.strerror or exc} (another program uses "
                           "it, or the address is not on this machine); choose another "
                           "telemetry.prometheus_port / prometheus_host")
    return True, f"{shown} is free; the agent will serve /metrics and /healthz there"


def check_otlp(endpoint: str) -> tuple[bool, str]:
    """An empty OTLP/HTTP metrics export (valid protobuf) is accepted by the collector."""
    url = f"{otlp_base(endpoint)}/v1/metrics"
    headers = {"Content-Type": "application/x-protobuf"}
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS"):
        for item in os.environ.get(name, "").split(","):
            key, sep, value = item.partition("=")
            if sep and key.strip():
                headers[unquote(key.strip())] = unquote(value.strip())
    try:
        reply = requests.post(url, data=b"", headers=headers, timeout=HTTP_TIMEOUT,
                              allow_redirects=False)
    except requests.RequestException as exc:
        return False, (f"cannot reach {url} ({one_line(root_cause(exc))}); is the OpenTelemetry "
                       "collector running and telemetry.otlp_endpoint its OTLP/HTTP address (port 4318)?")
    if 200 <= reply.status_code < 300:
        return True, f"{url} accepts OTLP/HTTP exports"
    hint = {401: "set OTEL_EXPORTER_OTLP_HEADERS with the collector's credentials",
            403: "set OTEL_EXPORTER_OTLP_HEADERS with the collector's credentials",
            404: "is telemetry.otlp_endpoint the collector's OTLP/HTTP base URL (port 4318)?",
            }.get(reply.status_code, "check the collector's logs")
    return False, f"{url} answered {reply.status_code}; {hint}"
