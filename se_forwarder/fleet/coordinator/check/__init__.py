"""``se-forwarder coordinator check``: one ``ok``/``FAIL``/``warn``/``skip`` line per part, as the agent's.

Each part is tried as the service would use it, and nothing is changed: no lease is taken, no
event published, no message sent, nothing acknowledged.

- ``signing key``: read from its file, or from Key Vault with ``[signing] key_vault_secret``
  (config/keyvault.py); the public key the agents verify with.
- ``api token``: the token table. Both secrets are a ``warn`` line when group or others may read
  their file, saying the ``chmod`` that fixes it.
- ``attestation`` (trust.py): the trust anchors, and the chain a registration must have: this VM's
  own attested document, asked of its IMDS, verified against them with the intermediate it leaves
  out fetched from its "CA Issuers" URL (or given as a file); a ``warn`` when no IMDS answers here
  or unsigned reports are folded.
- ``event hub`` and ``azure feed hub`` (services.py): the partitions, read in the consumer group (a
  group the hub does not have is named), and for the agents' hub the right to send: a sender link
  is opened, as publishing opens it, and nothing is sent.
- ``storage``: the container (the lease and the snapshots) and the right to write blobs (a delete
  of a blob that does not exist: 404 means allowed);
- ``queues``: the right to send approval messages (a message to a queue that does not exist:
  404 means allowed). A 403 names the role the identity lacks, told apart from the storage
  account's firewall (``AuthorizationPermissionMismatch`` against ``AuthorizationFailure``).
- with ``[azure]`` (azure.py): ``resource graph`` (the VMs and scheduled events the identity can
  read) and, with ``acknowledge = true``, ``acknowledge`` (a probe for the nil EventId);
- with ``[[notify]]`` (notify.py): each hook's URL and pager's key read, each pager reached;
- ``gate <name>`` for each ``[[gates]]`` entry: asked once as the service asks it (input/gates.py);
  ``ok`` when it answers, open or closed (and why), ``FAIL`` when it cannot be asked (``warn`` with
  ``unreachable = "open"``);
- ``running coordinator``: its ``/healthz``.

Every line is one line, whatever the credential's errors say (``one``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from functools import partial

from ....approvals import signing
from ....errors import describe, one_line
from ....sinks.azure_common import scrub
from ....telemetry import redact
from ..api.tokens import read_tokens
from ..config.gates import GateSettings
from ..config.service import ServiceSettings
from .azure import AzureParts
from .notify import notify
from .services import WARN, Result, hub, no_token, queues, storage
from .trust import attestation

LIMIT = 400  # characters of one line's text


def run_checks(settings: ServiceSettings, echo: Callable[[str], None], imds_url: str | None = None) -> int:
    """Print one line per check; the number of failures. ``imds_url``: where this VM's IMDS is
    (default: found as the agent finds it)."""
    checks: list[tuple[str, Callable[[], Result]]] = [
        ("signing key", lambda: _key(settings)),
        ("api token", lambda: _token(settings)),
        ("attestation", lambda: attestation(settings, imds_url)),
        ("event hub", lambda: hub(settings.eventhub, send=True)),
        ("storage", lambda: storage(settings)),
        ("queues", lambda: queues(settings)),
    ]
    azure = settings.azure
    if azure is not None:
        graph = AzureParts(azure)
        if azure.feed is not None:
            feed = azure.feed
            checks.append(("azure feed hub", lambda: hub(feed, send=False)))
        checks.append(("resource graph", graph.read))
        if azure.acknowledge:
            checks.append(("acknowledge", graph.acknowledge))
    if settings.notify:
        checks.append(("notify", lambda: notify(settings.notify)))
    for gate in settings.gates:
        checks.append((f"gate {gate.name}", partial(gate_result, gate, settings)))
    checks.append(("running coordinator", lambda: _running(settings)))
    failures = 0
    for label, check in checks:
        try:
            ok, text = check()
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line
            status = getattr(exc, "status_code", 0)
            tokenless = type(exc).__name__ == "ClientAuthenticationError" and not status
            ok, text = False, no_token(exc) if tokenless else scrub(describe(exc))
        prefix = {True: "ok   ", False: "FAIL ", None: "skip ", WARN: "warn "}[ok]
        echo(redact(f"{prefix} {label}: {one(text)}"))
        failures += ok is False
    return failures


def one(text: str) -> str:
    """``text`` on one line of at most ``LIMIT`` characters."""
    line = one_line(text, limit=10_000)
    return line if len(line) <= LIMIT else line[:LIMIT - 1] + "…"


def _key(settings: ServiceSettings) -> Result:
    if settings.key_vault is not None:
        from ..azure.keyvault import signing_key

        key = signing_key(settings.key_vault)
        return True, (f"{settings.key_vault.url} (Key Vault; Ed25519, key id {signing.keyid(key)}; the "
                      f"agents verify with its public key {signing.public_key_line(key)})")
    key = signing.load_signing_key(file=settings.key_file)
    return _private(settings.key_file, f"{settings.key_file} (Ed25519, key id {signing.keyid(key)}; the "
                    f"agents verify with its public key {signing.public_key_line(key)})")


def _token(settings: ServiceSettings) -> Result:
    table = read_tokens(settings.api.token_file)
    names = ", ".join(name for name, _ in table.entries)
    return _private(settings.api.token_file, f"{settings.api.token_file} ({len(table)} token(s): {names})")


def _private(path: str, text: str) -> Result:
    """ok with ``text``, or WARN when group or others can read the secret file ``path``."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o044:
        return WARN, (f"{text}; it can be read by group or others (mode {mode:04o}): "
                      f"chmod 600 {path}")
    return True, text


def gate_result(gate: GateSettings, settings: ServiceSettings) -> Result:
    """One gate asked once: ok when it answers, FAIL (warn when unreachable counts as open) when not."""
    from ..input.gates import ask_once

    said = ask_once(gate, settings.azure)
    text = f"{gate.type} for {gate.scope}: {'open' if said.open else 'closed'}: {said.reason}"
    if said.unreachable:
        return (WARN if said.open else False), text
    return True, text


def _running(settings: ServiceSettings) -> Result:
    import requests

    url = f"{settings.api.url}/healthz"
    try:
        response = requests.get(url, timeout=2, proxies={"http": "", "https": ""})
    except requests.RequestException:
        return None, f"none answers at {url}"
    return response.status_code == 200, f"{url}: {response.text.strip()[:300]}"


__all__ = ["WARN", "run_checks"]
