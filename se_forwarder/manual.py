"""`se-forwarder approve`: a person approves events now, from the VM."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from . import cloudevents as ce
from .config import Settings
from .enrichment import initial_identity
from .errors import SeForwarderError, StateError
from .imds import ImdsClient, ImdsError
from .model import SCHEDULED, MalformedDocument, VmIdentity
from .outbox import Outbox


def approve_now(settings: Settings, event_ids: list[str]) -> list[str]:
    """POST StartRequests for the listed events that are Scheduled now; lines to print.

    Refuses (non-zero exit) any id not in the current document or not Scheduled: approving lets
    the event proceed for every VM in its Resources, so a typo must not pass silently. Then records
    one ``approved`` CloudEvent per event (``ApprovedBy: cli``) in the state directory's outbox, which
    a running agent delivers to its sinks; the same ids as the agent's own, so never twice.
    """
    event_ids = list(dict.fromkeys(i.strip() for i in event_ids if i.strip()))
    if not event_ids:
        raise SeForwarderError("no EventId given")
    client = ImdsClient(settings.imds.url, settings.imds.api_version,
                        timeout=settings.imds.timeout, first_call_timeout=130.0,
                        lease_files=settings.imds.lease_files)
    try:
        doc = client.get_document()
        current = doc.by_id()
        bad = [i for i in event_ids if i not in current or current[i].status != SCHEDULED]
        if bad:
            states = ", ".join(
                f"{i} ({current[i].status})" if i in current else f"{i} (not in the document)"
                for i in bad
            )
            raise SeForwarderError(f"not approving; only Scheduled events can be: {states}")
        client.start_events(event_ids)
        lines = [f"approved {i}" for i in event_ids]
        try:
            observed = datetime.now(UTC)
            with Outbox(Path(settings.state.dir)) as box:
                # Recorded even without the instance metadata: the agent counts this approval
                # when the event vanishes (it ran, it was not canceled).
                try:
                    vm = VmIdentity.from_compute(client.get_compute(), settings.vm.tags)
                except (ImdsError, MalformedDocument):
                    vm = initial_identity(box, settings.vm.tags)
                box.record(None, [ce.for_outbox(ce.approved(current[i], doc.incarnation, vm, "cli", observed))
                                   for i in event_ids])
            lines.append(f"recorded in {settings.state.dir} (ApprovedBy: cli)")
        except StateError as exc:
            lines.append(f"warning: approved, but the approved CloudEvent was not recorded: {exc}")
        return lines
    except ImdsError as exc:
        raise SeForwarderError(str(exc)) from exc
    finally:
        client.close()
