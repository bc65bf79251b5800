"""The check's probes of the hubs, the storage container and the approval queues (check/__init__.py).

None changes anything. A hub is read in its consumer group (a receiver on one partition, from its
end: opening it is what a missing group fails; the SDK says nothing when it opened, so one that
has not failed within ``RECEIVE_WAIT`` seconds, or has handed on an event, counts as open) and, for the
agents' hub, a sender link is opened the way publishing opens it (``create_batch``; nothing is
sent): Event Hubs refuses a link the identity's claims do not cover when it is attached. Storage
answers a 403 with one of two codes: ``AuthorizationPermissionMismatch`` (the identity lacks a data
role) or ``AuthorizationFailure`` (the account's network rules: its firewall or private endpoints
refuse this network), told apart here (``explain``).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from ....errors import one_line
from ....sinks.azure_common import scrub
from ..azure import clients as access
from ..config.service import EventHubSettings, ServiceSettings

WARN = "warn"
Result = tuple[bool | str | None, str]
RECEIVE_WAIT = 6.0  # s a receiver that opened has not failed in (module docstring)
FIREWALL = ("the storage account refuses this network (403 AuthorizationFailure: its firewall or private "
            "endpoint rules): allow this VM's subnet or address, or reach it through a private endpoint")
BLOB_ROLE = "Storage Blob Data Contributor"
QUEUE_ROLE = "Storage Queue Data Message Sender"


def explain(exc: BaseException, role: str, where: str) -> str:
    """One line for an error of a storage call: the role the identity lacks, the firewall, or the
    credential that got no token."""
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

    code = getattr(exc, "error_code", None)
    if isinstance(exc, HttpResponseError) and exc.status_code == 403 and code == "AuthorizationFailure":
        return FIREWALL
    if isinstance(exc, HttpResponseError) and exc.status_code == 403 and code in (
            "AuthorizationPermissionMismatch", "AuthorizationResourceTypeMismatch"):
        return f"the identity may not do this on {where} (403 {code}): give it {role}"
    if isinstance(exc, ClientAuthenticationError) and getattr(exc, "status_code", None) is None:
        return no_token(exc)
    status = getattr(exc, "status_code", None)
    said = f"HTTP {status} {code or ''}".strip() if status else type(exc).__name__
    return f"{said}: {scrub(one_line(exc))[:240]}"


def no_token(exc: BaseException) -> str:
    """One line for a credential that got no token (DefaultAzureCredential's message is a page)."""
    text = str(exc)
    if "DefaultAzureCredential failed" in text:
        return ("the credential got no token: DefaultAzureCredential found none here (no managed identity "
                "answered, no AZURE_* variables, no 'az login')")
    if "ManagedIdentityCredential" in text:
        return ("the credential got no token: no managed identity answered (is one assigned to this VM, "
                f"and is client_id its client id?): {scrub(one_line(exc))[:160]}")
    return f"the credential got no token: {scrub(one_line(exc))[:200]}"


def storage(settings: ServiceSettings) -> Result:
    """The container, and the right to write blobs in it (module docstring)."""
    from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

    name = settings.storage.container
    container = access.container(settings.storage)
    where = f"container {name}"
    try:
        try:
            container.get_container_properties()
            exists = True
        except ResourceNotFoundError:
            exists = False
        except HttpResponseError as exc:
            return False, explain(exc, BLOB_ROLE, where)
        try:
            container.get_blob_client(f"{settings.unit}/check-{uuid.uuid4().hex}").delete_blob()
        except ResourceNotFoundError:
            pass  # allowed: nothing there to delete
        except HttpResponseError as exc:
            return False, explain(exc, BLOB_ROLE, where)
        if not exists:
            return WARN, (f"{where} does not exist yet; the identity may write blobs (the coordinator "
                          "creates the container when its identity may)")
        return True, f"{where} reachable, blobs may be written; {_leader(container, settings.unit)}"
    finally:
        container.close()


def _leader(container: Any, name: str) -> str:
    from azure.core.exceptions import ResourceNotFoundError

    try:
        props = container.get_blob_client(f"{name}/leader").get_blob_properties()
    except ResourceNotFoundError:
        return "no coordinator has run yet"
    who = (props.metadata or {}).get("instance", "?")
    return f"leader: {who}" if props.lease and props.lease.status == "locked" else "no leader now"


def queues(settings: ServiceSettings) -> Result:
    """The right to send approval messages (module docstring)."""
    from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

    clients = access.Queues(settings.queues)
    probe = f"se-forwarder-check-{uuid.uuid4().hex[:20]}"  # a queue no VM has
    try:
        clients.client(probe).send_message("se-forwarder coordinator check", time_to_live=1)
    except ResourceNotFoundError:
        pass  # allowed: the queue does not exist, so nothing was sent
    except HttpResponseError as exc:
        return False, explain(exc, QUEUE_ROLE, "the approval queues")
    else:  # a queue of that name existed: its probe message lives one second
        return WARN, f"the probe queue {probe} exists; a probe message was put in it for 1 s"
    finally:
        clients.close()
    return True, f"messages may be sent to the approval queues (named {settings.queues.template!r})"


def hub(settings: EventHubSettings, *, send: bool) -> Result:
    """A hub read in its consumer group and, with ``send``, a sender link opened (module docstring)."""
    client = access.consumer(settings, retry_total=0)  # a refused receiver fails at once
    try:
        ids = client.get_partition_ids()
        failed = _receive(client, ids[0])
    finally:
        client.close()
    text = f"{settings.eventhub}: {len(ids)} partition(s)"
    if failed is not None:
        return False, f"{text}, but {_hub_problem(failed, settings)}"
    text += f", read in consumer group {settings.consumer_group}"
    if not send:
        return True, text
    producer = access.producer(settings)
    try:
        producer.create_batch()
    except Exception as exc:  # noqa: BLE001 - the refusal is the answer
        return False, f"{text}, but {_hub_problem(exc, settings)}"
    finally:
        producer.close()
    return True, f"{text}; decisions may be published (a sender link opened, nothing sent)"


def _receive(client: Any, partition: str) -> BaseException | None:
    """Open a receiver on ``partition`` from its end: its error, or None (module docstring)."""
    settled, problem = threading.Event(), []

    def received(_context: Any, event: Any) -> None:
        if event is not None:  # the SDK also calls with None when it waited, open or not
            settled.set()

    def failed(_context: Any, error: BaseException) -> None:
        problem.append(error)
        settled.set()

    thread = threading.Thread(target=client.receive, name="coordinator-check-receive", daemon=True,
                              kwargs={"on_event": received, "on_error": failed, "partition_id": partition,
                                      "starting_position": "@latest", "max_wait_time": 1})
    thread.start()
    settled.wait(RECEIVE_WAIT)
    return problem[0] if problem else None


def _hub_problem(exc: BaseException, settings: EventHubSettings) -> str:
    text = str(exc)
    if "amqp:not-found" in text and "|" in text.split("could not be found")[0]:
        return (f"its consumer group {settings.consumer_group!r} does not exist: create it (the Bicep "
                f"makes 'coordinator') or set [{settings.where}] consumer_group")
    for claim, role in (("Send", "Azure Event Hubs Data Sender (it publishes its decisions there)"),
                        ("Listen", "Azure Event Hubs Data Receiver")):
        if f"'{claim}' claim" in text:
            return (f"the identity may not {claim.lower()} (Event Hubs: '{claim}' claim required): give it "
                    f"{role}")
    return scrub(one_line(exc))[:300]
