"""`se-forwarder check`: the configuration, IMDS and every sink, one line each."""

from __future__ import annotations

from collections.abc import Callable

from .config import Settings
from .imds import ImdsClient, ImdsError
from .sinks import SinkContext, create


def run_checks(settings: Settings, echo: Callable[[str], None]) -> int:
    """Print ``ok``/``FAIL`` lines; the number of failures."""
    failures = 0
    client = ImdsClient(settings.imds.url, settings.imds.api_version,
                        timeout=settings.imds.timeout, first_call_timeout=10.0)
    try:
        doc = client.get_document()
        echo(f"ok    imds: {settings.imds.url} answers (incarnation {doc.incarnation}, "
             f"{len(doc.events)} event(s))")
    except ImdsError as exc:
        failures += 1
        echo(f"FAIL  imds: {exc} (is this an Azure VM, or is --imds-url right?)")
    finally:
        client.close()
    ctx = SinkContext(settings.state.dir)
    for s in settings.sinks:
        try:
            sink = create(s.type, s.name, s.options, ctx)
            problem = sink.check()
            sink.close()
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            failures += 1
            echo(f"FAIL  sink {s.name}: {problem}")
        else:
            echo(f"ok    sink {s.name}")
    return failures
