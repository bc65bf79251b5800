"""The ``se-forwarder`` command line: click commands only, wiring the modules together.

Only this package imports click. Each command imports what it runs inside its body, so that
``se-forwarder --help`` (and every command) loads no more than it needs. Every error a user can
cause ends as one line (``errors.describe``) and the exit status of its kind.
"""

from __future__ import annotations

import click

from .. import __version__
from . import agent, coordinator, fleet, simulate
from .common import Commands

EXIT_STATUSES = """\b
Exit status: 0 success; 1 a failure (IMDS, a sink, a check, the demo);
2 a usage or configuration error; 3 the state directory or database
cannot be used."""


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EXIT_STATUSES)
@click.version_option(__version__, prog_name="se-forwarder")
def main() -> None:
    """Forward Azure Scheduled Events as CloudEvents, durably, and approve them by policy."""


for command in (*agent.COMMANDS, fleet.fleet, coordinator.coordinator, simulate.simulate_command):
    main.add_command(command)
