"""The agent's commands: run, demo, events, approve, check, status, sink resume."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from ..errors import ConfigError
from ..printable import strip_controls
from .common import Commands, config_option, friendly_errors, imds_option, progress, state_option


def _load_settings(config: str | None, **flags: Any) -> Any:
    from .. import config as cfg

    sinks = list(flags.pop("sinks", ()) or ())
    overrides: dict[str, dict[str, Any]] = {"imds": {}, "state": {}}
    if flags.get("imds_url"):
        overrides["imds"]["url"] = flags["imds_url"]
    if flags.get("poll_interval") is not None:
        overrides["imds"]["poll_interval"] = flags["poll_interval"]
    if flags.get("state_dir"):
        overrides["state"]["dir"] = str(flags["state_dir"])
    return cfg.load(config, overrides=overrides, sink_specs=sinks or None)



@click.command()
@config_option
@imds_option
@state_option
@click.option("--sink", "sinks", multiple=True, metavar="SPEC",
              help="stdout (JSON lines), stdout:pretty (columns for people), file:PATH or "
                   "webhook:URL; repeatable; replaces the configured sinks.")
@click.option("--poll-interval", type=float, help="Seconds between polls (default 1).")
@click.option("--once", is_flag=True, help="One poll and one delivery attempt, then exit.")
@click.option("--dry-run", is_flag=True, help="Never POST approvals; log what would be approved.")
@friendly_errors
def run(config: str | None, imds_url: str | None, state_dir: str | None, sinks: tuple[str, ...],
        poll_interval: float | None, once: bool, dry_run: bool) -> None:
    """Run the agent."""
    import threading

    stop = threading.Event()  # handlers first: a SIGTERM during start-up is a clean stop too

    def _stop(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    from ..agent import Agent
    from ..telemetry import setup_logging

    settings = _load_settings(config, imds_url=imds_url, state_dir=state_dir, sinks=sinks,
                              poll_interval=poll_interval)
    setup_logging(settings.telemetry.log_format, settings.telemetry.log_level)
    agent = Agent(settings, once=once, dry_run=dry_run, stop=stop)
    sys.exit(agent.run())


@click.command()
@click.option("--sink", "sinks", multiple=True, metavar="SPEC",
              help="Extra sinks receiving the same CloudEvents, e.g. file:/tmp/demo.jsonl.")
@click.option("--fleet", is_flag=True,
              help="A fleet instead: 11 VMs, an agent on each, the coordinator and its fleet page "
                   "(about a minute; needs the fleet extra).")
@click.option("--keep", is_flag=True, help="With --fleet: keep everything running after the summary, "
                                           "for the fleet page, until Ctrl-C.")
@click.option("--timeout", type=float, default=None, hidden=True)
@friendly_errors
def demo(sinks: tuple[str, ...], fleet: bool, keep: bool, timeout: float | None) -> None:
    """Show the whole flow against the built-in simulator (about 10 s).

    Needs no Azure and no configuration.
    """
    if fleet:
        if sinks:
            raise ConfigError("--sink: not with --fleet (the fleet's agents send to the demo's event hub)")
        sys.exit(_fleet_demo(keep, timeout))
    if keep:
        raise ConfigError("--keep: only with --fleet")
    from ..demo import run_demo

    sys.exit(run_demo(list(sinks), timeout=timeout or 55.0))


def _fleet_demo(keep: bool, timeout: float | None) -> int:
    from ..demo.fleet import needs, run_fleet_demo

    needs()  # the fleet extra, or one line saying how to get it
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return run_fleet_demo(keep=keep, timeout=timeout or 150.0, stop=stop)


@click.command()
@imds_option
@click.option("--api-version", default=None, help="IMDS api-version (default 2020-07-01).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw document as JSON.")
@friendly_errors
def events(imds_url: str | None, api_version: str | None, as_json: bool) -> None:
    """Show the current Scheduled Events document."""
    from ..imds import DEFAULT_API_VERSION, DEFAULT_URL, ImdsClient

    client = ImdsClient(imds_url or DEFAULT_URL, api_version or DEFAULT_API_VERSION,
                        first_call_timeout=130.0)
    with progress("waiting for IMDS (the first answer on a VM may take up to 2 minutes)",
                  client.first_call_timeout):
        doc = client.get_document()
    if as_json:
        click.echo(json.dumps(doc.to_wire(), indent=2))
        return
    click.echo(f"DocumentIncarnation {doc.incarnation}, {len(doc.events)} event(s)")
    if doc.events:
        click.echo(f"{'EventId':<38} {'Type':<10} {'Status':<10} {'Source':<9} "
                   f"{'Duration':>8}  NotBefore (UTC)        Resources")
    for e in doc.events:
        nb = e.not_before.strftime("%Y-%m-%d %H:%M:%S") if e.not_before else "-"
        dur = "-" if e.duration is None else str(e.duration)
        click.echo(strip_controls(f"{e.event_id:<38} {e.event_type:<10} {e.status:<10} {e.source or '-':<9} "
                                  f"{dur:>8}  {nb:<22} {','.join(e.resources)}"))


@click.command()
@click.argument("event_ids", nargs=-1, required=True)
@imds_option
@state_option
@click.option("--config", "config", type=click.Path(dir_okay=False), envvar="SE_FORWARDER_CONFIG",
              help="Configuration (for the state directory and IMDS URL).")
@friendly_errors
def approve(event_ids: tuple[str, ...], imds_url: str | None, state_dir: str | None,
            config: str | None) -> None:
    """Approve (start) events now and record `approved` CloudEvents.

    POSTs StartRequests for events that are Scheduled in the current document.
    """
    from ..manual import approve_now

    settings = _load_settings(config, imds_url=imds_url, state_dir=state_dir)
    with progress("waiting for IMDS (the first answer on a VM may take up to 2 minutes)", 130):
        lines = approve_now(settings, list(event_ids))
    for line in lines:
        click.echo(line)


@click.command()
@config_option
@imds_option
@friendly_errors
def check(config: str | None, imds_url: str | None) -> None:
    """Validate the configuration and reach IMDS and every sink."""
    from ..checks import run_checks

    settings = _load_settings(config, imds_url=imds_url)
    click.echo(f"ok    config: {settings.source}")
    failures = run_checks(settings, click.echo)
    sys.exit(1 if failures else 0)


@click.command()
@state_option
@config_option
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def status(state_dir: str | None, config: str | None, as_json: bool) -> None:
    """Show the last poll, incarnation and per-sink backlog.

    Read from the state directory; works while the agent runs.
    """
    from ..status import read_status, render_status

    settings = _load_settings(config, state_dir=state_dir)
    info = read_status(Path(settings.state.dir))
    click.echo(json.dumps(info, indent=2) if as_json else render_status(info))


@click.group(cls=Commands)
def sink() -> None:
    """Manage sinks (resume a parked one)."""


@click.command("resume")
@click.argument("name")
@state_option
@config_option
@friendly_errors
def sink_resume(name: str, state_dir: str | None, config: str | None) -> None:
    """Unpark sink NAME: its kept backlog is delivered again."""
    from ..errors import SeForwarderError
    from ..outbox import Outbox

    settings = _load_settings(config, state_dir=state_dir)
    with Outbox(Path(settings.state.dir), create=False) as box:
        if not box.resume(name):
            known = ", ".join(box.sink_names()) or "none"
            raise SeForwarderError(f"no sink named {name!r} (known: {known})")
    click.echo(f"sink {name} resumed; a running agent picks it up at its next poll")


sink.add_command(sink_resume)
COMMANDS = (run, demo, events, approve, check, status, sink)
