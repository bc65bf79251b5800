"""``se-forwarder simulate`` (also ``python -m se_forwarder.simulator``): the IMDS simulator in the
foreground, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import ConfigError, SeForwarderError
from .common import friendly_errors

if TYPE_CHECKING:  # the simulator loads when the command runs, not for --help
    from ..simulator import SimulatorServer
    from ..simulator.azure_side import AzureOptions
    from ..simulator.scenarios import Step

POLLS_PER_NOTICE = 3  # a notice shorter than this many polls may be missed as Scheduled


def _say(text: str) -> None:
    click.echo(text)
    sys.stdout.flush()


def _list_scenarios() -> None:
    from ..simulator.scenarios import builtin_scenarios

    scenarios = builtin_scenarios()
    width = max(len(s.name) for s in scenarios)
    for s in scenarios:
        params = ", ".join(f"{k}={v}" for k, v in s.params.items())
        line = f"{s.name.ljust(width)}  {s.description}"
        _say(line + (f" [params: {params}]" if params else ""))


def _parse_params(pairs: tuple[str, ...]) -> dict[str, str]:
    params: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param {pair!r} must look like KEY=VALUE")
        params[key.strip()] = value.strip()
    return params


def _vm_names(vm_name: str, vms: str | None) -> tuple[str, ...]:
    if vms is None:
        return (vm_name,)
    names = tuple(n.strip() for n in vms.split(","))
    if not all(names):
        raise ConfigError(f"--vms {vms!r} must be a comma-separated list of VM names, e.g. vm0,vm1,vm2")
    return names


def _put_all(lines: queue.Queue[str | None], items: list[str]) -> None:
    for item in items:
        lines.put(item)


def _printer(lines: queue.Queue[str | None]) -> None:
    while (line := lines.get()) is not None:
        _say(line)


@click.command("simulate")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=8099, show_default=True, help="Port; 0 = a free one.")
@click.option(
    "--scenario",
    metavar="FILE|NAME",
    help="A scenario file (.toml/.json) or a built-in name (see --list-scenarios).",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario parameter, e.g. --param notice=600.",
)
@click.option(
    "--time-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Simulated seconds per real second (60: 15 min notice = 15 s).",
)
@click.option(
    "--start",
    "scenario_start",
    type=click.Choice(("first-poll", "immediately")),
    default="first-poll",
    show_default=True,
    help="When the scenario's clock starts: at the first scheduled-events poll of any VM, or "
    "at once.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds between your client's polls (the agent's default is 1); a warning says when "
    f"--time-scale makes a notice shorter than {POLLS_PER_NOTICE} of them.",
)
@click.option("--vm-name", default="vm0", show_default=True, help="Name of the simulated VM.")
@click.option(
    "--vms",
    metavar="NAME,NAME,...",
    help="Several VMs sharing one event list, each under /vm/<name> (first also at /).",
)
@click.option(
    "--topology",
    type=click.Path(dir_okay=False),
    help="Availability sets and scale sets (TOML/JSON, see simulator/topology.py); replaces "
    "--vms: each group sees only its own events, each VM has its own instance metadata.",
)
@click.option("--list-scenarios", is_flag=True, help="Describe the built-in scenarios and exit.")
@click.option(
    "--throttle-rps",
    type=float,
    default=5.0,
    show_default=True,
    help="Answer 429 above this many requests/s per client and VM (IMDS: 5); 0 = off.",
)
@click.option(
    "--first-call-delay",
    type=float,
    default=0.0,
    show_default=True,
    help="Real seconds the first scheduled-events request of each VM waits (IMDS: <= 120).",
)
@click.option(
    "--multi-tenant",
    is_flag=True,
    help="An event starts only when every VM in Resources approved it (or at NotBefore).",
)
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="SPEC",
    help="Inject a fault, e.g. status=503,count=3 | delay_seconds=5 | hang | hang,seconds=10 "
    "(every request for 10 s) | 'body=not json' | truncate | huge_body | "
    "incarnation_reset,after_seconds=30 | a JSON object.",
)
@click.option(
    "--etag/--no-etag",
    default=True,
    show_default=True,
    help="Send an ETag with each document and answer If-None-Match with 304; --no-etag serves "
    "IMDS as the Azure documentation describes it (always 200 with the full document).",
)
@click.option(
    "--not-before-format",
    type=click.Choice(("rfc1123", "iso8601")),
    default="rfc1123",
    show_default=True,
    help="How NotBefore is written: RFC 1123 as IMDS does, or ISO 8601 (2026-11-25T19:05:25Z) "
    "as Microsoft's scheduled-events mock server does.",
)
@click.option(
    "--new-event-id-per-state",
    is_flag=True,
    help="The scenario's events show a new EventId once Started, as Microsoft's mock server does.",
)
@click.option("--quiet", is_flag=True, help="Do not print document changes.")
@click.option("--arm-port", type=int, help="Also serve Azure's ARM over HTTPS on "
              "127.0.0.1 at this port (0: a free one): Resource Graph, acknowledge, instance view.")
@click.option("--ca-file", type=click.Path(dir_okay=False), help="Write ARM's per-run test CA here (PEM).")
@click.option("--feed-connection-string-env", metavar="NAME", help="Publish Azure's Event Grid feed to the "
              "Event Hub whose connection string is in this environment variable.")
@click.option("--feed-eventhub", metavar="NAME", help="The feed's hub if the connection string has none.")
@click.option("--feed-delay", type=float, default=0.0, help="Seconds a feed event waits.")
@click.option("--feed-event-type", metavar="TYPE", help="The feed's CloudEvent type, either spelling "
              "Microsoft documents: Microsoft.ResourceNotifications.MaintenanceResources."
              "ScheduledEventEmitted (default) or microsoft.maintenance/scheduledevents/write.")
@click.option("--attestation-dir", metavar="DIR", help="Write the CA root and "
              "intermediate that sign the VMs' attested documents there (PEM), for a coordinator's "
              "[trust] (they are new each run).")
@friendly_errors
def simulate_command(**options: Any) -> None:
    """Run the IMDS Scheduled Events simulator in the foreground (Ctrl-C stops it)."""
    if options["list_scenarios"]:
        _list_scenarios()
        return
    server = _build(options)
    scenario, params = options["scenario"], options["params"]
    for warning in short_notice_warnings(_notices(scenario, params, server), options["time_scale"],
                                         options["poll_interval"]):
        click.echo(f"warning: {warning}", err=True)
    lines: queue.Queue[str | None] = queue.Queue()
    server.sim.on_scenario_start(
        lambda status: lines.put(
            f"{time.strftime('%H:%M:%S')} scenario {status['name']} started ({status['started_by']})"
        )
    )
    if not options["quiet"]:
        server.sim.subscribe(
            lambda inc, changes: _put_all(lines, [
                f"{time.strftime('%H:%M:%S')} incarnation {inc}: {c}" for c in changes
            ])
        )
    stop = threading.Event()
    previous = _handle_signals(stop)  # before binding: a signal at any point means a clean exit
    printer = threading.Thread(target=_printer, args=(lines,), daemon=True)
    try:
        try:
            server.start()
        except OSError as exc:
            raise SeForwarderError(f"cannot listen on {options['host']}:{options['port']}: "
                                   f"{exc.strerror or exc}") from None
        _announce(server, scenario, options["attestation_dir"])
        printer.start()
        _serve(server, scenario, lines, stop)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        lines.put(None)
        if printer.is_alive():
            printer.join(timeout=2)
    _say("simulator stopped")


def _build(options: Mapping[str, Any]) -> SimulatorServer:
    """The simulator the command's options (click's parameter names) describe."""
    from ..simulator import SimulatorServer
    from ..simulator.faults import parse_fault_flag
    from ..simulator.scenarios import load_scenario
    from ..simulator.topology import Topology

    names = _vm_names(options["vm_name"], options["vms"])
    topology = options["topology"]
    if topology and options["vms"]:
        raise ConfigError("give --vms or --topology, not both (the topology names the VMs)")
    # A bad option value is a ConfigError (SettingError, TopologyError, ScenarioError, FaultError):
    # one line naming it, exit 2.
    placement = Topology.load(topology) if topology else None
    fault_specs: list[dict[str, Any]] = [parse_fault_flag(f) for f in options["faults"]]
    scenario = options["scenario"]
    if options["new_event_id_per_state"]:
        if not scenario:
            raise ConfigError("--new-event-id-per-state applies to the events of a --scenario")
        scenario = dataclasses.replace(load_scenario(scenario), new_event_id_per_state=True)
    return SimulatorServer(
        options["host"],
        options["port"],
        vm_names=names,
        time_scale=options["time_scale"],
        scenario=scenario,
        throttle_rps=options["throttle_rps"] or None,
        first_call_delay=options["first_call_delay"],
        multi_tenant=options["multi_tenant"],
        scenario_params=_parse_params(options["params"]),
        scenario_start=options["scenario_start"],
        faults=fault_specs,
        etag=options["etag"],
        topology=placement,
        not_before_format=options["not_before_format"],
        azure=_azure(options),
        attestation_dir=_attestation_dir(options["attestation_dir"]),
    )


def _azure(options: Mapping[str, Any]) -> AzureOptions | None:
    from ..simulator.azure_side import options_from_flags

    return options_from_flags(options["arm_port"], options["ca_file"], options["feed_connection_string_env"],
                              options["feed_eventhub"], options["feed_delay"], options["feed_event_type"])


def _attestation_dir(value: str | None) -> Path | None:
    """The directory for the attested documents' CA files, made if missing; ConfigError when it
    cannot be made or written."""
    if value is None:
        return None
    directory = Path(value).expanduser()
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--attestation-dir {value}: is a file, not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--attestation-dir {value}: cannot make the directory: "
                          f"{exc.strerror or exc}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"--attestation-dir {value}: the directory is not writable")
    return directory


def _announce(server: SimulatorServer, scenario: str | None, options_dir: str | None) -> None:
    names = server.sim.vm_names
    _say(
        f"IMDS simulator listening on {server.url} "
        f"(VMs: {', '.join(names)}; time scale {server.sim.time_scale:g})"
    )
    if len(names) > 1:
        for name in names:
            _say(f"  {name}: {server.vm_url(name)}/metadata/scheduledevents?api-version=2020-07-01")
    _say(f"control API: {server.url}/control")
    for line in server.azure.announce(server.url) if server.azure is not None else []:
        _say(line)
    if options_dir is not None:  # a coordinator's [trust] attestation_roots and attestation_intermediates
        _say("attested documents are signed by a per-run CA:")
        _say(f"  root          {server.attestation_ca_file}")
        _say(f"  intermediate  {server.attestation_intermediate_file}")
    status = server.sim.scenario_status()
    if scenario and status.get("waiting_for_first_poll"):
        _say(f"scenario {status['name']}: starts at the first scheduled-events poll "
             "(--start immediately starts it at once)")
    _say("Ctrl-C to stop")


def _notices(
    scenario: str | None, params: tuple[str, ...], server: SimulatorServer
) -> list[tuple[str, float]]:
    """(what, notice in simulated seconds) for the scenario's Scheduled events, or the minimum
    notice of every event type when no scenario plays (events added through the control API)."""
    from ..simulator.scenarios import load_scenario
    from ..simulator.wire import MIN_NOTICE_SECONDS

    if scenario is None:
        return [(f"the minimum notice of a {kind}", notice) for kind, notice in MIN_NOTICE_SECONDS.items()]
    steps = load_scenario(scenario).compile(server.sim.vm_names, _parse_params(params))
    return [n for n in map(_notice_of, steps) if n[1] > 0]


def _notice_of(step: Step) -> tuple[str, float]:
    from ..simulator.wire import MIN_NOTICE_SECONDS

    f = step.fields
    if step.action != "add" or f.get("EventStatus", "Scheduled") != "Scheduled" or "NotBefore" in f:
        return "", 0.0
    kind = f.get("EventType", "Freeze")
    notice = float(f.get("NotBeforeInSeconds", MIN_NOTICE_SECONDS[kind]))
    return f"the {notice:g} s notice of the {kind} at {step.at:g} s", notice


def short_notice_warnings(
    notices: list[tuple[str, float]], time_scale: float, poll_interval: float
) -> list[str]:
    """One line for each notice that, under ``time_scale``, lasts fewer than 3 poll intervals."""
    out = []
    for what, notice in notices:
        real = notice / time_scale
        if real < POLLS_PER_NOTICE * poll_interval:
            slowest = notice / (POLLS_PER_NOTICE * poll_interval)
            out.append(
                f"at --time-scale {time_scale:g}, {what} lasts {real:.2g} s, less than "
                f"{POLLS_PER_NOTICE} polls of a client polling every {poll_interval:g} s "
                f"(--poll-interval): it may start before the client sees it Scheduled; "
                f"use --time-scale {_round_down(slowest)} or less"
            )
    return out


def _round_down(value: float) -> str:
    """A friendly time scale at most ``value`` (3 significant digits, rounded down)."""
    if value >= 1:
        return f"{int(value)}"
    digits = f"{value:.3g}"
    return digits if float(digits) <= value else f"{value:.2g}"


def _handle_signals(stop: threading.Event) -> dict[int, Any]:
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    return previous


def _serve(
    server: SimulatorServer,
    scenario: str | None,
    lines: queue.Queue[str | None],
    stop: threading.Event,
) -> None:
    announced = scenario is None
    while not stop.wait(0.2):
        if not announced and server.sim.scenario_done():
            announced = True
            lines.put(f"{time.strftime('%H:%M:%S')} scenario {scenario} finished: all its events are gone")
