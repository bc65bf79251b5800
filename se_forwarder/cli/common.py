"""What every command shares: one-line errors, progress lines for long waits, common options."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, NoReturn, TypeVar

import click

from ..errors import describe, exit_code

F = TypeVar("F", bound=Callable[..., Any])
# click >= 8.2 raises this for a group run without a subcommand; older ones print the help and exit 0.
NO_ARGS_IS_HELP: type[Exception] = getattr(click.exceptions, "NoArgsIsHelpError", click.exceptions.Exit)


def report(line: str, code: int) -> NoReturn:
    """``se-forwarder: error: <line>`` on stderr, then exit with ``code``."""
    click.echo(f"se-forwarder: error: {line}", err=True)
    sys.exit(code)


def friendly_errors(func: F) -> F:
    """Every error of the ``SeForwarderError`` family as one line and its exit status."""
    from ..errors import SeForwarderError

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SeForwarderError as exc:
            report(describe(exc), exit_code(exc))

    return wrapper  # type: ignore[return-value]


def progress(what: str, seconds: float) -> Any:
    """Say on stderr, every few seconds, that a slow IMDS answer is still awaited (quiet if fast)."""
    import logging

    from ..telemetry import TextFormatter, countdown

    logger = logging.getLogger("se_forwarder.cli.progress")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(TextFormatter())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return countdown(logger, what, seconds)


config_option = click.option(
    "--config", "config", type=click.Path(dir_okay=False), envvar="SE_FORWARDER_CONFIG",
    help="TOML configuration file.",
)
imds_option = click.option("--imds-url", help="IMDS base URL (default http://169.254.169.254).")
state_option = click.option("--state-dir", type=click.Path(file_okay=False),
                            help="State directory (default /var/lib/se-forwarder).")


class Commands(click.Group):
    """Usage errors in one line too (click's default is a four-line usage block), and every
    command's whole first sentence in the help."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except NO_ARGS_IS_HELP as exc:  # a group without its subcommand: its help, as --help does
            ctx = getattr(exc, "ctx", None)
            click.echo(ctx.get_help() if ctx else str(exc))
            sys.exit(0)
        except click.exceptions.Abort:
            click.echo("se-forwarder: aborted", err=True)
            sys.exit(1)
        except click.UsageError as exc:
            where = f" (see: {exc.ctx.command_path} --help)" if exc.ctx else ""
            report(f"{exc.format_message()}{where}", exc.exit_code)
        except click.ClickException as exc:
            report(exc.format_message(), exc.exit_code)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
