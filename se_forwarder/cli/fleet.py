"""``se-forwarder fleet``: the coordinator's side: watch the fleet, send approvals, make keys."""

from __future__ import annotations

import sys

import click

from .common import Commands, friendly_errors


@click.group(cls=Commands)
def fleet() -> None:
    """The coordinator's side: watch the fleet, send approvals."""


@fleet.command("tail")
@click.option(
    "--connection-string-env",
    default="EH_CONN",
    show_default=True,
    help="Environment variable holding an Event Hubs connection string (listen rights).",
)
@click.option(
    "--connection-string-file",
    type=click.Path(dir_okay=False),
    help="File holding an Event Hubs connection string.",
)
@click.option(
    "--namespace",
    help="Fully qualified namespace (ns.servicebus.windows.net), signed in with an Entra credential "
    "instead of a connection string.",
)
@click.option(
    "--eventhub", help="Event Hub name (default: the connection string's, else scheduled-events)."
)
@click.option(
    "--credential",
    type=click.Choice(["default", "managed-identity"]),
    default="default",
    show_default=True,
    help="Credential for --namespace.",
)
@click.option("--client-id", help="Client id of a user-assigned managed identity.")
@click.option("--consumer-group", default="$Default", show_default=True)
@click.option(
    "--from",
    "start",
    type=click.Choice(["latest", "earliest"]),
    default=None,
    help="Where to start in partitions without a checkpoint (default: latest; earliest with --once).",
)
@click.option(
    "--once",
    is_flag=True,
    help="Read until every partition is quiet for a second, print the table and exit.",
)
@click.option("--duration", type=click.FloatRange(min=0.1), help="Stop after this many seconds.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: one JSON object per new row or new VM, or one summary with --once/--duration.",
)
@click.option(
    "--checkpoint-connection-string-env",
    help="Environment variable with a Storage connection string: checkpoints in blobs, so several "
    "instances share the partitions.",
)
@click.option(
    "--checkpoint-account-url",
    help="https://<account>.blob.core.windows.net for checkpoints, signed in with DefaultAzureCredential.",
)
@click.option("--checkpoint-container", default="se-forwarder-checkpoints", show_default=True)
@click.option(
    "--balance-interval",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds between partition load-balancing rounds (with a checkpoint store).",
)
@friendly_errors
def tail_command(
    connection_string_env: str,
    connection_string_file: str | None,
    namespace: str | None,
    eventhub: str | None,
    credential: str,
    client_id: str | None,
    consumer_group: str,
    start: str | None,
    once: bool,
    duration: float | None,
    fmt: str,
    checkpoint_connection_string_env: str | None,
    checkpoint_account_url: str | None,
    checkpoint_container: str,
    balance_interval: float,
) -> None:
    """Live table of events across the fleet: each event once, with how many VMs saw it."""
    from ..fleet.tail.command import run_tail
    from ..fleet.tail.reader import hub_source

    source = hub_source(namespace, eventhub, credential, client_id, connection_string_env,
                        connection_string_file)
    sys.exit(run_tail(
        source, consumer_group=consumer_group, start=start or ("earliest" if once else "latest"),
        once=once, duration=duration, fmt=fmt,
        store_args=(checkpoint_account_url, checkpoint_connection_string_env, checkpoint_container),
        balance_interval=balance_interval, echo=click.echo,
    ))


@fleet.command("approve")
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
              help="Environment variable holding the Ed25519 private key (PKCS#8 PEM text).")
@click.option("--key-file", type=click.Path(dir_okay=False),
              help="File holding the Ed25519 private key (PKCS#8 PEM, from 'fleet keygen' or "
              "'openssl genpkey -algorithm ed25519').")
@click.option("--print-only", is_flag=True, help="Print the signed message instead of sending it.")
@friendly_errors
def approve_command(event_id: str, vm_name: str | None, queue: str | None, queue_template: str,
                    expires_in: str, reason: str, source: str | None, account_url: str | None,
                    connection_string_env: str, connection_string_file: str | None, key_env: str,
                    key_file: str | None, print_only: bool) -> None:
    """Send a signed approval for one event to a VM's approval queue."""
    from ..fleet.approve import send, sign_approval

    approval = sign_approval(event_id, vm_name=vm_name, queue=queue, queue_template=queue_template,
                             expires_in=expires_in, reason=reason, source=source, key_env=key_env,
                             key_file=key_file)
    if approval.note:
        click.echo(f"approval {approval.note}", err=True)
    if print_only:
        click.echo(approval.text)
        return
    send(approval, account_url, connection_string_env, connection_string_file)
    click.echo(f"sent approval {approval.message['id']} for {event_id} to queue {approval.queue} "
               f"(expires {approval.message['data']['ExpiresAt']})")


@fleet.command("keygen")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="New file for the private key (PKCS#8 PEM, mode 0600); the public key goes to "
              "FILE.pub.")
@friendly_errors
def keygen_command(out: str) -> None:
    """Make an Ed25519 key pair for approval messages and print the public key.

    The private key (FILE) stays with the coordinator (--key-file). The public key (FILE.pub, the
    line printed) goes to the agents (approvals.queue.verify_keys_env or verify_keys_file). To
    rotate, add the new public key to the agents, then sign with the new private key, then remove
    the old public key.
    """
    from ..fleet.approve import write_key

    line = write_key(out)
    click.echo(f"wrote the private key to {out} and the public key to {out}.pub", err=True)
    click.echo(line)
