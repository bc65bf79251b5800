"""The `se-forwarder` command line: click commands only, wiring the modules together."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from . import __version__
from .errors import SeForwarderError

F = TypeVar("F", bound=Callable[..., Any])
# click >= 8.2 raises this for a group run without a subcommand; older ones print the help and exit 0.
NO_ARGS_IS_HELP: type[Exception] = getattr(click.exceptions, "NoArgsIsHelpError", click.exceptions.Exit)
EXIT_STATUSES = """\b
Exit status: 0 success; 1 a failure (IMDS, a sink, a check, the demo);
2 a usage or configuration error; 3 the state directory or database
cannot be used."""


def friendly_errors(func: F) -> F:
    """Turn the errors a user can cause into one line on stderr and their exit code."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SeForwarderError as exc:
            click.echo(f"se-forwarder: error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


class LazyGroup(click.Group):
    """Subcommands living in modules that import heavy SDKs are imported only when invoked."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str, str]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, attr, _help = self.lazy[cmd_name]
            import importlib

            try:
                return getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as exc:
                missing = getattr(exc, "name", None) or str(exc)

                @click.command(cmd_name, help=_help)
                def unavailable() -> None:
                    raise click.ClickException(
                        f"'{cmd_name}' is not available: {missing} is missing "
                        "(pip install 'se-forwarder[all]')"
                    )

                return unavailable
        return super().get_command(ctx, cmd_name)

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Usage errors are one line too (click's default is a four-line usage block)."""
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except NO_ARGS_IS_HELP as exc:  # a group without its subcommand: its help, as --help does
            click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
            sys.exit(0)
        except click.exceptions.Abort:
            click.echo("se-forwarder: aborted", err=True)
            sys.exit(1)
        except click.UsageError as exc:
            where = f" (see: {exc.ctx.command_path} --help)" if exc.ctx else ""
            click.echo(f"se-forwarder: error: {exc.format_message()}{where}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"se-forwarder: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, self.lazy[name][2]))
            else:
                cmd = super().get_command(ctx, name)
                if cmd is not None and not cmd.hidden:  # the whole first sentence, never cut
                    rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    lazy={
        "simulate": ("se_forwarder.simulator.command", "simulate_command",
                     "Run the IMDS Scheduled Events simulator in the foreground (Ctrl-C stops it)."),
        "coordinator": ("se_forwarder.fleet.coordinator.command", "coordinator",
                        "The fleet coordinator: rolling maintenance within budgets (run, check, "
                        "status, pause, resume, hold, release, approve)."),
    },
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EXIT_STATUSES,
)
@click.version_option(__version__, prog_name="se-forwarder")
def main() -> None:
    """Forward Azure Scheduled Events as CloudEvents, durably, and approve them by policy."""


def _progress(what: str, seconds: float) -> Any:
    """Say on stderr, every few seconds, that a slow IMDS answer is still awaited (quiet if fast)."""
    import logging

    from .telemetry import TextFormatter, countdown

    logger = logging.getLogger("se_forwarder.cli.progress")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(TextFormatter())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return countdown(logger, what, seconds)


def _load_settings(config: str | None, **flags: Any) -> Any:
    from . import config as cfg

    sinks = list(flags.pop("sinks", ()) or ())
    overrides: dict[str, dict[str, Any]] = {"imds": {}, "state": {}}
    if flags.get("imds_url"):
        overrides["imds"]["url"] = flags["imds_url"]
    if flags.get("poll_interval") is not None:
        overrides["imds"]["poll_interval"] = flags["poll_interval"]
    if flags.get("state_dir"):
        overrides["state"]["dir"] = str(flags["state_dir"])
    return cfg.load(config, overrides=overrides, sink_specs=sinks or None)


config_option = click.option(
    "--config", "config", type=click.Path(dir_okay=False), envvar="SE_FORWARDER_CONFIG",
    help="TOML configuration file.",
)
imds_option = click.option("--imds-url", help="IMDS base URL (default http://169.254.169.254).")
state_option = click.option("--state-dir", type=click.Path(file_okay=False),
                            help="State directory (default /var/lib/se-forwarder).")


@main.command()
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
    from .agent import Agent
    from .telemetry import setup_logging

    settings = _load_settings(config, imds_url=imds_url, state_dir=state_dir, sinks=sinks,
                              poll_interval=poll_interval)
    setup_logging(settings.telemetry.log_format, settings.telemetry.log_level)
    agent = Agent(settings, once=once, dry_run=dry_run, stop=stop)
    sys.exit(agent.run())


@main.command()
@click.option("--sink", "sinks", multiple=True, metavar="SPEC",
              help="Extra sinks receiving the same CloudEvents, e.g. file:/tmp/demo.jsonl.")
@click.option("--timeout", type=float, default=55.0, show_default=True, hidden=True)
@friendly_errors
def demo(sinks: tuple[str, ...], timeout: float) -> None:
    """Show the whole flow against the built-in simulator (about 10 s).

    Needs no Azure and no configuration.
    """
    from .demo import run_demo

    sys.exit(run_demo(list(sinks), timeout=timeout))


@main.command()
@imds_option
@click.option("--api-version", default=None, help="IMDS api-version (default 2020-07-01).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw document as JSON.")
@friendly_errors
def events(imds_url: str | None, api_version: str | None, as_json: bool) -> None:
    """Show the current Scheduled Events document."""
    from .imds import DEFAULT_API_VERSION, DEFAULT_URL, ImdsClient, ImdsError

    client = ImdsClient(imds_url or DEFAULT_URL, api_version or DEFAULT_API_VERSION,
                        first_call_timeout=130.0)
    try:
        with _progress("waiting for IMDS (the first answer on a VM may take up to 2 minutes)",
                       client.first_call_timeout):
            doc = client.get_document()
    except ImdsError as exc:
        raise SeForwarderError(str(exc)) from exc
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
        click.echo(f"{e.event_id:<38} {e.event_type:<10} {e.status:<10} {e.source or '-':<9} "
                   f"{dur:>8}  {nb:<22} {','.join(e.resources)}")


@main.command()
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
    from .manual import approve_now

    settings = _load_settings(config, imds_url=imds_url, state_dir=state_dir)
    with _progress("waiting for IMDS (the first answer on a VM may take up to 2 minutes)", 130):
        lines = approve_now(settings, list(event_ids))
    for line in lines:
        click.echo(line)


@main.command()
@config_option
@imds_option
@friendly_errors
def check(config: str | None, imds_url: str | None) -> None:
    """Validate the configuration and reach IMDS and every sink."""
    from .checks import run_checks

    settings = _load_settings(config, imds_url=imds_url)
    click.echo(f"ok    config: {settings.source}")
    failures = run_checks(settings, click.echo)
    sys.exit(1 if failures else 0)


@main.command()
@state_option
@config_option
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def status(state_dir: str | None, config: str | None, as_json: bool) -> None:
    """Show the last poll, incarnation and per-sink backlog.

    Read from the state directory; works while the agent runs.
    """
    from .status import read_status, render_status

    settings = _load_settings(config, state_dir=state_dir)
    info = read_status(Path(settings.state.dir))
    click.echo(json.dumps(info, indent=2) if as_json else render_status(info))


@main.group(cls=LazyGroup)
def sink() -> None:
    """Manage sinks (resume a parked one)."""


@sink.command("resume")
@click.argument("name")
@state_option
@config_option
@friendly_errors
def sink_resume(name: str, state_dir: str | None, config: str | None) -> None:
    """Unpark sink NAME: its kept backlog is delivered again."""
    from .outbox import Outbox

    settings = _load_settings(config, state_dir=state_dir)
    with Outbox(Path(settings.state.dir), create=False) as box:
        if not box.resume(name):
            known = ", ".join(box.sink_names()) or "none"
            raise SeForwarderError(f"no sink named {name!r} (known: {known})")
    click.echo(f"sink {name} resumed; a running agent picks it up within a second")


@main.group(
    cls=LazyGroup,
    lazy={
        "tail": ("se_forwarder.fleet.tail", "tail_command",
                 "Live table of events across the fleet: each event once, with how many VMs "
                 "saw it."),
        "approve": ("se_forwarder.fleet.approve", "approve_command",
                    "Send a signed approval for one event to a VM's approval queue."),
        "keygen": ("se_forwarder.fleet.approve", "keygen_command",
                   "Make a new signing key for approval messages (base64 of 32 random "
                   "bytes)."),
    },
)
def fleet() -> None:
    """The coordinator's side: watch the fleet, send approvals."""

