"""``se-forwarder coordinator ...``: the click wiring (run, check, and the control commands) of
``se_forwarder.fleet.coordinator``."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..errors import ConfigError, SeForwarderError
from .common import friendly_errors

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_CONFIG = "/etc/se-forwarder/coordinator.toml"


config_option = click.option(
    "--config", "config", type=click.Path(dir_okay=False), envvar="SE_FORWARDER_COORDINATOR_CONFIG",
    help=f"coordinator.toml (default {DEFAULT_CONFIG}).")


def _settings(config: str | None) -> Any:
    from ..fleet.coordinator.config import load

    path = config or DEFAULT_CONFIG
    if not config and not Path(path).exists():
        raise ConfigError(f"no configuration: give --config FILE (or set SE_FORWARDER_COORDINATOR_CONFIG; "
                          f"{DEFAULT_CONFIG} does not exist)")
    return load(path)


@click.group("coordinator")
def coordinator() -> None:
    """The fleet coordinator: rolling maintenance within budgets (run it, check it, control it)."""


@coordinator.command("run")
@config_option
@friendly_errors
def run(config: str | None) -> None:
    """Run the coordinator (until SIGTERM or Ctrl-C)."""
    import logging

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    from ..fleet.coordinator.addons import start_addons
    from ..fleet.coordinator.api import ApiServer, read_tokens
    from ..fleet.coordinator.azure import check_connection_strings
    from ..fleet.coordinator.service import Service
    from ..sinks.azure_common import quiet_sdk_logs
    from ..telemetry import setup_logging

    settings = _settings(config)
    check_connection_strings(settings)
    setup_logging(settings.log_format, settings.log_level)
    quiet_sdk_logs()
    logging.getLogger("azure.storage").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    tokens = read_tokens(settings.api.token_file)
    service = Service(settings, stop)
    api = ApiServer(service, settings.api.host, settings.api.port, tokens)
    api.start()
    try:
        addons = start_addons(service, settings)  # the fleet page's listener, chat notifications
    except BaseException:
        api.stop()
        raise
    log = logging.getLogger("se_forwarder.coordinator")
    log.info("coordinator %s (instance %s) started: API on http://%s:%d, reading %s%s", settings.unit,
             settings.instance, settings.api.host, api.port, settings.eventhub.eventhub,
             " in SHADOW mode (nothing is sent)" if settings.policy.shadow else "")
    try:
        code = service.run()
    finally:
        addons.stop()
        api.stop()
    log.info("coordinator stopped")
    sys.exit(code)


@coordinator.command("check")
@config_option
@click.option("--key-file", type=click.Path(dir_okay=False),
              help="The signing key to check instead of the config's [signing] (e.g. the file the unit "
                   "hands to the service as a credential).")
@click.option("--token-file", type=click.Path(dir_okay=False),
              help="The API's token table to check instead of the config's api.token_file.")
@click.option("--imds-url", help="This VM's IMDS, for the attestation chain (default http://169.254.169.254).")
@friendly_errors
def check(config: str | None, key_file: str | None, token_file: str | None, imds_url: str | None) -> None:
    """Validate the configuration; reach every service it names."""
    import logging
    from dataclasses import replace

    from ..fleet.coordinator.azure import check_connection_strings
    from ..fleet.coordinator.check import run_checks
    from ..sinks.azure_common import quiet_sdk_logs

    settings = _settings(config)
    if key_file:
        settings = replace(settings, key_file=str(Path(key_file).expanduser()), key_vault=None)
    if token_file:
        settings = replace(settings, api=replace(settings.api, token_file=str(Path(token_file).expanduser())))
    check_connection_strings(settings)
    quiet_sdk_logs()
    logging.getLogger().addHandler(logging.NullHandler())  # each part says its own line, nothing else
    logging.captureWarnings(True)
    shard = settings.shard
    click.echo(f"ok    config: {settings.source_file}" + ("" if shard is None else
               f" (shard {settings.unit} of {len(shard.subscriptions)} subscription(s), consumer group "
               f"{settings.eventhub.consumer_group})"))
    sys.exit(1 if run_checks(settings, click.echo, imds_url) else 0)


def _client(config: str | None, url: str | None, token_file: str | None) -> Any:
    from ..fleet.coordinator.api import Client

    if url and token_file:
        return Client(url, token_file)
    settings = _settings(config)
    return Client(url or settings.api.advertise or settings.api.url, token_file or settings.api.token_file)


def _api_options(func: F) -> F:
    func = click.option("--token-file", type=click.Path(dir_okay=False),
                        help="File whose first entry is your API token; the coordinator records "
                             "your actions under its name in its token table (default: the "
                             "config's api.token_file).")(func)
    func = click.option("--url", help="The coordinator's API (default: from the config's [api]).")(func)
    return config_option(func)  # type: ignore[no-any-return]


@coordinator.command("status")
@_api_options
@click.option("--all", "all_scopes", is_flag=True,
              help="List every scope, not only those in use, and every event and VM of each list, not "
                   "only the first 20.")
@click.option("--json", "as_json", is_flag=True, help="The status document as JSON.")
@click.option("--shards", "shards", is_flag=True,
              help="Every shard: this one and each of the config's [shard] peers.")
@friendly_errors
def status(config: str | None, url: str | None, token_file: str | None, all_scopes: bool,
           as_json: bool, shards: bool) -> None:
    """Budgets, pending events and why each waits."""
    from ..fleet.coordinator.api import render_status

    if shards:
        _every_shard(config, url, token_file, all_scopes, as_json)
        return
    result = _client(config, url, token_file).status(all_scopes)
    click.echo(json.dumps(result, indent=2) if as_json else render_status(result, every=all_scopes))


def _every_shard(config: str | None, url: str | None, token_file: str | None, all_scopes: bool,
                 as_json: bool) -> None:
    from ..fleet.coordinator.api.client import every_shard, render_shards

    settings = _settings(config)
    if settings.shard is None:
        raise ConfigError(f"--shards: {settings.source_file} has no [shard] section (this coordinator is "
                          "not a shard)")
    results = every_shard(url or settings.api.advertise or settings.api.url, dict(settings.shard.peers),
                          token_file or settings.api.token_file, all_scopes)
    click.echo(json.dumps({"shards": results}, indent=2) if as_json else render_shards(results, all_scopes))
    silent = [r["url"] for r in results if "error" in r]
    if silent:
        raise SeForwarderError(f"{len(silent)} of {len(results)} shard(s) did not answer: "
                               f"{', '.join(silent)}")


reason_option = click.option("--reason", required=True, help="Why (kept in the audit trail, one line).")


def _act(kind: str, config: str | None, url: str | None, token_file: str | None,
         body: dict[str, Any]) -> None:
    result = _client(config, url, token_file).act(kind, body)
    d = result.get("decision", {})
    data = d.get("data", {})
    target = data.get("Target") or {}
    extra = f" -> approval to {target.get('name')}" if kind == "approve" and target else ""
    state = ("in force on the leader, not yet published: the Event Hub does not answer; it is published "
             "when it does" if result.get("published") is False else "published")
    click.echo(f"{kind}: {d.get('subject')} ({d.get('id')}, {state}){extra}")


@coordinator.command("pause")
@_api_options
@click.option("--scope", default="fleet", show_default=True,
              help="fleet, group:..., zone:..., fault_domain:..., scale_set:..., tag:<name>=<value> "
                   "(as status shows them).")
@reason_option
@friendly_errors
def pause(config: str | None, url: str | None, token_file: str | None, scope: str, reason: str) -> None:
    """Stop early approvals in a scope.

    Approvals already sent stand; their retries stop."""
    _act("pause", config, url, token_file, {"scope": scope, "reason": reason})


@coordinator.command("resume")
@_api_options
@click.option("--scope", default="fleet", show_default=True, help="The scope that was paused.")
@reason_option
@friendly_errors
def resume(config: str | None, url: str | None, token_file: str | None, scope: str, reason: str) -> None:
    """Undo a pause."""
    _act("resume", config, url, token_file, {"scope": scope, "reason": reason})


@coordinator.command("confirm")
@_api_options
@click.option("--scope", default="fleet", show_default=True,
              help="The scope whose VMs' new placements to confirm (as status shows them).")
@reason_option
@friendly_errors
def confirm(config: str | None, url: str | None, token_file: str | None, scope: str, reason: str) -> None:
    """Count VMs in the new zones, domains or tags they claim.

    Without [azure] a percentage budget is taken of where each VM was first seen; check the
    VMs status lists as outside their inventory, then confirm."""
    _act("confirm", config, url, token_file, {"scope": scope, "reason": reason})


@coordinator.command("hold")
@click.argument("event_id")
@_api_options
@reason_option
@friendly_errors
def hold(event_id: str, config: str | None, url: str | None, token_file: str | None, reason: str) -> None:
    """Approve nothing early for EVENT_ID.

    It still starts at its NotBefore: Azure's deadline cannot be held."""
    _act("hold", config, url, token_file, {"eventId": event_id, "reason": reason})


@coordinator.command("release")
@click.argument("event_id")
@_api_options
@reason_option
@friendly_errors
def release(event_id: str, config: str | None, url: str | None, token_file: str | None,
            reason: str) -> None:
    """Undo a hold."""
    _act("release", config, url, token_file, {"eventId": event_id, "reason": reason})


@coordinator.command("settle-identity")
@click.argument("vm_id")
@click.option("--key", "keyid", default=None,
              help="The key id that speaks for VM_ID (one of those in dispute).")
@click.option("--none", "no_key", is_flag=True, help="No key: VM_ID's next registration binds.")
@_api_options
@reason_option
@friendly_errors
def settle_identity(vm_id: str, keyid: str | None, no_key: bool, config: str | None, url: str | None,
                    token_file: str | None, reason: str) -> None:
    """Settle VM_ID's key conflict (one document, two keys).

    One attested document came with two identity keys.

    Until settled it counts as unavailable in every budget and nobody speaks for it."""
    if (keyid is None) == (not no_key):
        raise click.UsageError("give exactly one of --key KEYID or --none")
    _act("settle", config, url, token_file, {"vmId": vm_id, "keyid": keyid, "reason": reason})


@coordinator.command("approve")
@click.argument("event_id")
@_api_options
@click.option("--scope", "scopes", multiple=True,
              help="A budget to exceed for this approval (a scope, a kind such as zone, or all); "
                   "repeatable. Without it every budget must fit.")
@reason_option
@friendly_errors
def approve(event_id: str, config: str | None, url: str | None, token_file: str | None,
            scopes: tuple[str, ...], reason: str) -> None:
    """Approve EVENT_ID now, on your word (within the budgets).

    Budgets still count unless --scope names those you choose to exceed."""
    _act("approve", config, url, token_file, {"eventId": event_id, "scopes": list(scopes),
                                              "reason": reason})

