"""The catch-up: Resource Graph (and ARM's instance views) read with the coordinator's identity.

``Graph.catch_up()`` runs on a thread of its own (input/azure.py), never on the service's loop, and
returns a ``CatchUp``: every VM of the managed subscriptions (``resources`` for availability sets
and flexible scale sets, ``computeresources`` for uniform scale sets) and every scheduled event
(``maintenanceresources``, type ``microsoft.maintenance/scheduledevents``) and every VM's Resource
Health (``healthresources``, fleet/health_queries.AVAILABILITY; a failure there costs only that
part), each row read through edge/azure_facts.py. Queries go through
``azure-mgmt-resourcegraph``'s ``ResourceGraphClient``:

- at most ``CHUNK`` subscriptions per query, as Resource Graph asks;
- every page, following ``$skipToken`` (a page holds at most ``page_size`` rows; the queries keep
  ``id``, without which Resource Graph gives no token); an answer cut short without a token
  (``resultTruncated``) makes that part incomplete;
- throttling: a 429 is retried by azure-core's retry policy after its ``Retry-After``, and when an
  answer says ``x-ms-user-quota-remaining: 0`` the next page waits ``x-ms-user-quota-resets-after``;
- each request ends at ``READ_TIMEOUT`` (the SDK's) and, retries included, at ``CALL_DEADLINE``
  (``arm_call``: the request is left to end on its own thread), and a whole catch-up stops at
  ``deadline`` seconds: what was not read is incomplete, and is read again at the next one;
- every request says whether ARM answered (reach.py, the ``arm`` part): any HTTP status but 429
  and 5xx is an answer (a 403 too: ARM answers, the identity lacks a role), no answer by the
  deadline, a connection that fails, a 429 after the retries or a 5xx is not.

Only a subscription whose queries were all read to the end counts as *covered*: its topology
replaces the last one, and its scheduled events make Azure's view of it fresh
(azure_topology.watched). An availability set's VM has no fault or update domain in Resource
Graph: they are read from its instance view (``GET <vm>/instanceView``, ``azure-mgmt-core``'s
ARM pipeline) once per VM, at most ``MAX_VIEWS`` a catch-up, and kept (they change only when
Azure moves the VM).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from ...health_queries import AVAILABILITY
from ..config.azure import AzureSettings
from ..edge import azure_facts
from ..fold.azure_state import CatchUp, VmFacts
from .reach import Reach, begin, describe_error

T = TypeVar("T")

VMS = ("resources | where type =~ 'microsoft.compute/virtualmachines' "
       "| project id, name, type, location, zones, tags, properties")
UNIFORM = ("computeresources | where type =~ 'microsoft.compute/virtualmachinescalesets/virtualmachines' "
           "| project id, name, type, location, zones, tags, properties")
SETS = ("resources | where type in~ ('microsoft.compute/availabilitysets', "
        "'microsoft.compute/virtualmachinescalesets') | project id, name, type, properties")
EVENTS = ("maintenanceresources | where type == 'microsoft.maintenance/scheduledevents' "
          "| project id, name, type, resourceGroup, subscriptionId, zones, properties")
CHUNK = 100
MAX_VIEWS = 200
VIEW_API_VERSION = "2024-07-01"
READ_TIMEOUT = 30
CALL_DEADLINE = 60.0  # s for one request, the SDK's retries (a 429's Retry-After) included
ARM_PART = "arm"
ERROR_LIMIT = 400  # characters of an ARM error kept (its messages run long)


class Incomplete(Exception):
    """A query could not be read to its end (its message says why, one line)."""


def arm_pipeline(settings: AzureSettings, credential: Any, retry_total: int = 3) -> Any:
    """An ``ARMPipelineClient`` for ``settings.arm_endpoint`` with ARM's bearer policy."""
    from azure.core.pipeline import policies
    from azure.mgmt.core import ARMPipelineClient
    from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy, ARMHttpLoggingPolicy

    from .... import __version__

    chain: list[Any] = [
        policies.RequestIdPolicy(), policies.HeadersPolicy(),
        policies.UserAgentPolicy(f"se-forwarder-coordinator/{__version__}"),
        policies.RetryPolicy(retry_total=retry_total, retry_backoff_factor=0.5, retry_backoff_max=10),
        ARMChallengeAuthenticationPolicy(credential, settings.scope),
        policies.ContentDecodePolicy(), ARMHttpLoggingPolicy(),
    ]
    return ARMPipelineClient(base_url=settings.arm_endpoint, policies=chain,
                             connection_verify=settings.verify)


def answered(status: int | None) -> bool:
    """An HTTP status that says ARM answers (module docstring)."""
    return status is not None and status != 429 and status < 500


def arm_call(reach: Reach, func: Callable[[], T], what: str, deadline: float = CALL_DEADLINE) -> T:
    """``func()`` (one request to ARM, which returns a response or raises) on a thread of its own,
    ending at ``deadline`` (``Overdue``); whether ARM answered goes to ``reach`` (module docstring):
    the status of the ``HttpResponseError`` raised or of the response returned."""
    return reach.wait(begin(func, "coordinator-arm"), deadline, what, answered)


def _keeping(headers: dict[str, str]) -> Callable[[Any, Any, Any], Any]:
    """The SDK's ``cls`` hook: the answer's headers into ``headers``, the answer itself back."""
    def hook(response: Any, body: Any, _: Any) -> Any:
        headers.update(response.http_response.headers)
        return body
    return hook


class Graph:
    """Reads the managed subscriptions (module docstring)."""

    def __init__(self, settings: AzureSettings, credential: Any, *, page_size: int = 1000,
                 deadline: float = 120.0, sleep: Callable[[float], None] = time.sleep,
                 reach: Reach | None = None) -> None:
        from azure.mgmt.resourcegraph import ResourceGraphClient

        self.settings, self.page_size, self.deadline, self.sleep = settings, page_size, deadline, sleep
        self.reach = reach or Reach(ARM_PART)
        self.client = ResourceGraphClient(
            credential, base_url=settings.arm_endpoint, credential_scopes=[settings.scope],
            connection_verify=settings.verify, retry_total=3, retry_backoff_factor=0.5, retry_backoff_max=30,
            connection_timeout=10, read_timeout=READ_TIMEOUT)
        self.arm = arm_pipeline(settings, credential)
        self.domains: dict[str, tuple[str, str]] = {}  # resource id (lower case) -> (fault, update)

    def close(self) -> None:
        self.client.close()
        self.arm.close()

    # -- one query, every page --------------------------------------------------------------------

    def rows(self, query: str, subscriptions: Sequence[str], ends: float) -> tuple[list[dict[str, Any]], int]:
        """Every row of ``query`` (objectArray), and how many requests it took; Incomplete otherwise."""
        from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions

        out: list[dict[str, Any]] = []
        token: str | None = None
        pages = 0
        while True:
            if time.monotonic() > ends:
                raise Incomplete(f"the catch-up took longer than {self.deadline:.0f} s")
            headers: dict[str, str] = {}
            options = QueryRequestOptions(result_format="objectArray", top=self.page_size, skip_token=token)
            request = QueryRequest(subscriptions=list(subscriptions), query=query, options=options)
            answer = arm_call(self.reach, partial(self.client.resources, request, cls=_keeping(headers)),
                              "querying Resource Graph")
            pages += 1
            data = answer.data
            if not isinstance(data, list):
                raise Incomplete("Resource Graph answered rows that are not objects")
            out.extend(row for row in data if isinstance(row, dict))
            token = answer.skip_token
            if not token:
                if str(answer.result_truncated).lower() == "true":
                    raise Incomplete(f"Resource Graph cut the answer short at {len(out)} of "
                                     f"{answer.total_records} rows without a $skipToken")
                return out, pages
            self._pace(headers, ends)

    def _pace(self, headers: dict[str, str], ends: float) -> None:
        """Wait out a spent user quota before the next page (docs/azure-feed.md, throttling)."""
        lowered = {k.lower(): v for k, v in headers.items()}
        if lowered.get("x-ms-user-quota-remaining", "1").strip() not in ("0", "-1"):
            return
        try:
            h, m, s = (int(x) for x in lowered.get("x-ms-user-quota-resets-after", "0:0:1").split(":"))
        except ValueError:
            h, m, s = 0, 0, 1
        self.sleep(max(0.0, min(h * 3600 + m * 60 + s, ends - time.monotonic())))

    # -- the catch-up ------------------------------------------------------------------------------

    def catch_up(self) -> CatchUp:
        subs = self.settings.subscriptions
        result = CatchUp(time.time())
        ends = time.monotonic() + self.deadline
        topology: list[str] = []
        covered: list[str] = []
        for start in range(0, len(subs), CHUNK):
            chunk = subs[start:start + CHUNK]
            try:
                vms, queries = self._vms(chunk, ends, result)
                result.queries += queries
                result.vms += vms
                topology += chunk
                events, queries = self.rows(EVENTS, chunk, ends)
                result.queries += queries
            except Exception as exc:  # noqa: BLE001 - one line; the part is read again next time
                result.errors.append(describe_error(exc, ERROR_LIMIT))
                continue
            for row in events:
                facts = azure_facts.event_row(row, subs, result.as_of)
                if isinstance(facts, azure_facts.Refusal):
                    result.refused[facts.code] += 1
                else:
                    result.events.append(facts)
            covered += chunk
            self._health(chunk, ends, result)
        result.topology, result.covered = tuple(topology), tuple(covered)
        result.vms = self._with_domains(result.vms, ends, result)
        return result

    def _health(self, chunk: Sequence[str], ends: float, result: CatchUp) -> None:
        """Each VM's Resource Health (``healthresources``): a failure costs only this part."""
        try:
            rows, pages = self.rows(AVAILABILITY, chunk, ends)
        except Exception as exc:  # noqa: BLE001 - one line; read again at the next catch-up
            result.errors.append(f"Resource Health: {describe_error(exc, ERROR_LIMIT)}")
            return
        result.queries += pages
        for row in rows:
            facts = azure_facts.health_row(row, self.settings.subscriptions, result.as_of)
            if isinstance(facts, azure_facts.Refusal):
                result.refused[facts.code] += 1
            else:
                result.health.append(facts)

    def _vms(self, chunk: Sequence[str], ends: float, result: CatchUp) -> tuple[list[VmFacts], int]:
        """The VMs, each opted in when it or its set carries the policy (edge/azure_facts.py)."""
        vms: list[VmFacts] = []
        queries = 0
        for query in (VMS, UNIFORM):
            rows, pages = self.rows(query, chunk, ends)
            queries += pages
            for row in rows:
                facts = azure_facts.vm_row(row, self.settings.subscriptions)
                if isinstance(facts, azure_facts.Refusal):
                    result.refused[facts.code] += 1
                else:
                    vms.append(facts)
        rows, pages = self.rows(SETS, chunk, ends)
        opted = {found[0] for row in rows if (found := azure_facts.set_row(row)) is not None and found[1]}
        return [replace(vm, opted_in=True) if vm.set_id in opted else vm for vm in vms], queries + pages

    def _with_domains(self, vms: list[VmFacts], ends: float, result: CatchUp) -> list[VmFacts]:
        """The VMs with the fault and update domains of their instance views (module docstring)."""
        out = []
        for vm in vms:
            if not vm.instance_view:
                out.append(vm)
                continue
            key = vm.resource_id.lower()
            if key not in self.domains and result.views < MAX_VIEWS and time.monotonic() < ends:
                result.views += 1
                try:
                    self.domains[key] = self._view(vm.instance_view)
                except Exception as exc:  # noqa: BLE001 - the domains stay as they were; tried again
                    result.errors.append(f"instance view of {vm.name}: {describe_error(exc, ERROR_LIMIT)}")
            fault, update = self.domains.get(key, ("", ""))
            out.append(replace(vm, fault_domain=vm.fault_domain or fault,
                               update_domain=vm.update_domain or update))
        return out

    def _view(self, path: str) -> tuple[str, str]:
        from azure.core.exceptions import HttpResponseError
        from azure.core.rest import HttpRequest

        request = HttpRequest("GET", self.arm.format_url(f"{path}?api-version={VIEW_API_VERSION}"))
        response = arm_call(self.reach, partial(self.arm.send_request, request, connection_timeout=10,
                                                read_timeout=READ_TIMEOUT), "reading an instance view")
        if response.status_code != 200:
            raise HttpResponseError(response=response)
        return azure_facts.domains(response.json())
