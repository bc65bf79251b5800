"""``se-forwarder coordinator check``: one ``ok``/``FAIL``/``warn``/``skip`` line per part, as the agent's.

Parts: the signing key, the API token file, the attestation trust anchors (``[trust]``: which
roots, intermediates and subscriptions registrations are checked against, and whether unsigned
reports are folded: a ``warn`` line), the Event Hub (partitions readable in the consumer group),
the storage container (the lease and the snapshot), the approval queues' account, with
``[azure]`` the Azure feed hub, Resource Graph (the VMs and scheduled events the identity can read)
and, with ``acknowledge = true``, the right to acknowledge (a probe for the nil EventId on a VM
it can read: ARM answers 404 when the identity may acknowledge, 403 when it lacks the role), and
a running coordinator's ``/healthz``. Nothing is changed: no lease is taken, no message sent,
nothing acknowledged.

The signing key and the token file are secrets: each is a ``warn`` line when group or others may
read it (its mode has a read bit for them), saying the ``chmod`` that fixes it.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable

from ...approvals import signing
from ...errors import describe
from ...sinks.azure_common import scrub
from ...telemetry import redact
from .api.tokens import read_tokens
from .azure import clients as access
from .config.azure import AzureSettings
from .config.service import EventHubSettings, ServiceSettings

WARN = "warn"


def run_checks(settings: ServiceSettings, echo: Callable[[str], None]) -> int:
    """Print one line per check; the number of failures."""
    checks: list[tuple[str, Callable[[], tuple[bool | str | None, str]]]] = [
        ("signing key", lambda: _key(settings)),
        ("api token", lambda: _token(settings)),
        ("attestation", lambda: _attestation(settings)),
        ("event hub", lambda: _hub(settings.eventhub)),
        ("storage", lambda: _storage(settings)),
        ("queues", lambda: _queues(settings)),
    ]
    azure = settings.azure
    if azure is not None:
        graph = _Graph(azure)
        if azure.feed is not None:
            checks.append(("azure feed hub", lambda: _hub(azure.feed)))  # type: ignore[arg-type]
        checks.append(("resource graph", graph.read))
        if azure.acknowledge:
            checks.append(("acknowledge", graph.acknowledge))
    checks.append(("running coordinator", lambda: _running(settings)))
    failures = 0
    for label, check in checks:
        try:
            ok, text = check()
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line
            ok, text = False, scrub(describe(exc))
        prefix = {True: "ok   ", False: "FAIL ", None: "skip ", WARN: "warn "}[ok]
        echo(redact(f"{prefix} {label}: {text}"))
        failures += ok is False
    return failures


def _key(settings: ServiceSettings) -> tuple[bool | str, str]:
    key = signing.load_signing_key(file=settings.key_file)
    return _private(settings.key_file, f"{settings.key_file} (Ed25519, key id {signing.keyid(key)}; the "
                    f"agents verify with its public key {signing.public_key_line(key)})")


def _attestation(settings: ServiceSettings) -> tuple[bool | str, str]:
    ts = settings.trust
    anchors = ts.anchors()
    roots = "the roots Azure documents" if not ts.attestation_roots else ", ".join(ts.attestation_roots)
    parts = [f"{len(anchors.roots)} root(s) ({roots}), {len(anchors.intermediates)} intermediate(s) given"]
    if ts.fetch_intermediates:
        parts.append(f", fetched under {', '.join(ts.intermediate_paths[::2])} when missing")
    subscriptions = ", ".join(ts.subscriptions) if ts.subscriptions else ""
    parts.append(f"; subscriptions {subscriptions}" if subscriptions else "; any subscription")
    if not ts.require_signed_reports:
        parts.append("; unsigned reports of VMs without a registered key are folded (require_signed_reports "
                     "= false: they can only make the coordinator more careful)")
        return WARN, "".join(parts)
    return True, "".join(parts) + "; reports must be signed with their VM's registered key"


def _token(settings: ServiceSettings) -> tuple[bool | str, str]:
    table = read_tokens(settings.api.token_file)
    names = ", ".join(name for name, _ in table.entries)
    return _private(settings.api.token_file, f"{settings.api.token_file} ({len(table)} token(s): {names})")


def _private(path: str, text: str) -> tuple[bool | str, str]:
    """ok with ``text``, or WARN when group or others can read the secret file ``path``."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o044:
        return WARN, (f"{text}; it can be read by group or others (mode {mode:04o}): "
                      f"chmod 600 {path}")
    return True, text


def _hub(hub: EventHubSettings) -> tuple[bool, str]:
    client = access.consumer(hub)
    try:
        ids = client.get_partition_ids()
    finally:
        client.close()
    return True, f"{hub.eventhub}: {len(ids)} partition(s), consumer group {hub.consumer_group}"


def _storage(settings: ServiceSettings) -> tuple[bool | str, str]:
    from azure.core.exceptions import ResourceNotFoundError

    container = access.container(settings.storage)
    try:
        container.get_container_properties()
    except ResourceNotFoundError:
        return WARN, (f"container {settings.storage.container} does not exist yet (the coordinator "
                      "creates it when its identity may)")
    blob = container.get_blob_client(f"{settings.name}/leader")
    try:
        props = blob.get_blob_properties()
        lease = props.lease.status if props.lease else "unlocked"
        who = (props.metadata or {}).get("instance", "?")
        leader = f"leader: {who}" if lease == "locked" else "no leader now"
    except ResourceNotFoundError:
        leader = "no coordinator has run yet"
    return True, f"container {settings.storage.container} reachable; {leader}"


def _queues(settings: ServiceSettings) -> tuple[bool | str, str]:
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError

    queues = access.Queues(settings.queues)
    probe = "se-forwarder-check"
    try:
        queues.client(probe).get_queue_properties()
    except ResourceNotFoundError:
        pass  # reachable and signed in
    except ClientAuthenticationError as exc:
        return False, f"the queue account refused the credential: {exc.message}"
    except HttpResponseError as exc:
        if exc.status_code != 403:
            raise
        return True, ("queue account reachable (sending rights are used at the first approval: "
                      "Storage Queue Data Message Sender cannot read queue properties)")
    finally:
        queues.close()
    return True, f"queue account reachable; queues named {settings.queues.template!r}"


def _running(settings: ServiceSettings) -> tuple[bool | None, str]:
    import requests

    url = f"{settings.api.url}/healthz"
    try:
        response = requests.get(url, timeout=2, proxies={"http": "", "https": ""})
    except requests.RequestException:
        return None, f"none answers at {url}"
    return response.status_code == 200, f"{url}: {response.text.strip()[:300]}"


class _Graph:
    """Resource Graph and the acknowledge probe, with the coordinator's own clients (azure/graph.py)."""

    NIL = "00000000-0000-0000-0000-000000000000"

    def __init__(self, settings: AzureSettings) -> None:
        self.settings = settings
        self.vm = ""  # a VM the identity can read, for the probe

    def read(self) -> tuple[bool | str | None, str]:
        from .azure.graph import EVENTS, Graph

        settings = self.settings
        graph = Graph(settings, access.azure_credential(settings), deadline=60)
        try:
            ends = time.monotonic() + 60
            vms, _ = graph.rows("resources | where type =~ 'microsoft.compute/virtualmachines' | project id "
                                "| limit 1000", settings.subscriptions[:100], ends)
            events, _ = graph.rows(EVENTS + " | limit 1000", settings.subscriptions[:100], ends)
        finally:
            graph.close()
        self.vm = str(vms[0].get("id") or "") if vms else ""
        subs = f"{len(settings.subscriptions)} subscription(s)"
        if not vms:
            return WARN, f"{settings.arm_endpoint}: the identity can read no VM in {subs} (it needs Reader)"
        return True, (f"{settings.arm_endpoint}: {len(vms)}{'+' if len(vms) == 1000 else ''} VM(s) and "
                      f"{len(events)} scheduled event(s) readable in {subs}")

    def acknowledge(self) -> tuple[bool | str | None, str]:
        from .azure.acknowledge import Acknowledger

        if not self.vm:
            return None, "no VM readable to probe the acknowledge permission on"
        probe = Acknowledger(self.settings, access.azure_credential(self.settings), lambda *_: None)
        try:
            code, reason = probe.post(f"{self.vm}/providers/Microsoft.Maintenance/scheduledevents/{self.NIL}"
                                      "/acknowledge?api-version=2025-11-01")
        finally:
            probe.close()
        if code in ("not-found", "approved"):
            return True, "the identity may acknowledge scheduled events (a probe for the nil EventId: " \
                         f"{reason}; nothing was approved)"
        if code in ("forbidden", "unauthorized"):
            return False, f"the identity may not acknowledge ({reason}): give it the Scheduled Events " \
                          "Contributor role, or set acknowledge = false"
        return False, reason
