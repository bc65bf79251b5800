"""`se-forwarder fleet approve` and `fleet keygen`: the coordinator sends signed approvals.

The message format and signature are defined in ``approvals/signing.py``; the queue name for
``--vm`` is computed exactly as the agent computes its own (``approvals.queue.queue_name``).
"""

from __future__ import annotations

import os
import re
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from ..approvals import signing
from ..approvals.messages import EVENT_ID, MAX_LIFETIME
from ..approvals.queue import make_client, queue_name, read_connection_string, validate_account_url
from ..errors import ConfigError

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``90``, ``30s``, ``10m``, ``2h``: a positive duration of at most 24 h."""
    match = DURATION.match(text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a duration like 30s, 10m or 2h")
    seconds = float(match.group(1)) * UNITS[match.group(2)]
    if not 0 < seconds <= MAX_LIFETIME.total_seconds():
        raise click.BadParameter("must be more than 0 and at most 24h (agents refuse longer ones)")
    return timedelta(seconds=seconds)


def _default_source() -> str:
    return f"urn:se-forwarder:fleet:{socket.gethostname() or 'coordinator'}"


@click.command("approve")
@click.option("--event-id", required=True, help="The EventId to approve.")
@click.option("--vm", "vm_name", help="The VM whose queue receives the message (see --queue-template).")
@click.option("--queue", "queue", help="The queue name, instead of --vm.")
@click.option("--queue-template", default="se-approvals-{vm_name}", show_default=True,
              help="Queue name for --vm; the agents' approvals.queue.queue.")
@click.option("--expires-in", default="10m", show_default=True,
              help="How long the approval stays valid (30s, 10m, 2h; at most 24h).")
@click.option("--reason", default="", help="Why (kept in the agent's audit trail).")
@click.option("--source", default=None,
              help="Who approves (CloudEvent source; default urn:se-forwarder:fleet:<hostname>).")
@click.option("--account-url", envvar="APPROVALS_ACCOUNT_URL",
              help="https://<account>.queue.core.windows.net, signed in with DefaultAzureCredential.")
@click.option("--connection-string-env", default="APPROVALS_CONN", show_default=True,
              help="Environment variable holding a Storage connection string.")
@click.option("--connection-string-file", type=click.Path(dir_okay=False),
              help="File holding a Storage connection string.")
@click.option("--key-env", default="APPROVALS_KEY", show_default=True,
              help="Environment variable holding the signing key(s); the first one signs.")
@click.option("--key-file", type=click.Path(dir_okay=False),
              help="File holding the signing key(s), one per line; the first one signs.")
@click.option("--print-only", is_flag=True, help="Print the signed message instead of sending it.")
def approve_command(event_id: str, vm_name: str | None, queue: str | None, queue_template: str,
                    expires_in: str, reason: str, source: str | None, account_url: str | None,
                    connection_string_env: str, connection_string_file: str | None, key_env: str,
                    key_file: str | None, print_only: bool) -> None:
    """Send a signed approval for one event to a VM's approval queue."""
    if not EVENT_ID.match(event_id):
        raise click.ClickException(f"--event-id {event_id!r} is not an EventId")
    if bool(vm_name) == bool(queue):
        raise click.ClickException("give exactly one of --vm NAME or --queue NAME")
    lifetime = parse_duration(expires_in)
    if len(reason) > 1000 or any(ord(c) < 32 for c in reason):
        raise click.ClickException("--reason must be one line of at most 1000 characters")
    try:
        name = queue_name(queue_template, vm_name) if vm_name else queue_name(queue or "", "")
        if queue and name != queue:
            raise ConfigError(f"--queue {queue!r} is not a valid queue name (did you mean {name!r}?)")
        keys = signing.load_keys(key_env if not key_file else None, key_file)
        now = datetime.now(UTC)
        message = signing.new_message(
            event_id, source=source or _default_source(), key=keys[0], expires_at=now + lifetime,
            reason=reason, vm_name=vm_name, now=now,
        )
        text = signing.encode(message)
        if print_only:
            click.echo(text)
            return
        client = _client(name, account_url, connection_string_env, connection_string_file)
        _send(client, name, text)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"sent approval {message['id']} for {event_id} to queue {name} "
               f"(expires {message['data']['ExpiresAt']})")


def _client(name: str, account_url: str | None, conn_env: str, conn_file: str | None) -> Any:
    try:
        import azure.storage.queue  # noqa: F401
    except ImportError:
        raise ConfigError("azure-storage-queue is missing: pip install 'se-forwarder[queue]'") from None
    conn = read_connection_string(conn_env, conn_file)
    if conn:
        try:
            return make_client(name, connection_string=conn)
        except ValueError:
            raise ConfigError("the Storage connection string is not valid") from None
    if not account_url:
        raise ConfigError(f"no queue to send to: set {conn_env} (a connection string), or give "
                          "--connection-string-file or --account-url")
    account_url = validate_account_url(account_url, "--account-url")
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise ConfigError("azure-identity is missing: pip install 'se-forwarder[queue]'") from None
    return make_client(name, account_url=account_url, credential=DefaultAzureCredential())


def _send(client: Any, name: str, text: str) -> None:
    from azure.core.exceptions import AzureError, ClientAuthenticationError, ResourceNotFoundError

    try:
        client.send_message(text)
    except ResourceNotFoundError:
        raise ConfigError(f"queue {name} does not exist (is the agent configured with this "
                          "queue name, and has it started?)") from None
    except ClientAuthenticationError as exc:
        raise ConfigError(f"not allowed to send to queue {name}: {_first_line(exc)}") from None
    except AzureError as exc:
        raise ConfigError(f"cannot send to queue {name}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


@click.command("keygen")
@click.option("--out", "out", type=click.Path(dir_okay=False),
              help="Write the key to this new file (mode 0600) instead of printing it.")
def keygen_command(out: str | None) -> None:
    """Make a new signing key for approval messages (base64 of 32 random bytes).

    Give the same key to the coordinator (APPROVALS_KEY or --key-file) and to the agents
    (approvals.queue.signing_key_env or signing_key_file). To rotate, list the new key first and
    keep the old one on the agents until every coordinator signs with the new one.
    """
    key = signing.generate_key()
    if not out:
        click.echo(key)
        return
    path = Path(out)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise click.ClickException(f"{path} exists; not overwriting a key (choose another --out)") \
            from None
    except OSError as exc:
        raise click.ClickException(f"cannot create {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(key + "\n")
    click.echo(f"wrote a new signing key to {path}")
