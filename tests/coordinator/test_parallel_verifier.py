"""The verifier's worker processes (input/verifier.py, edge/offload.py) reach the verdicts the fold
thread reaches alone, on every kind of event the trust tests use, in any order; a worker that dies is
replaced and no report is lost or folded unverified. Real processes, real signatures; the hub is
left out (its batches are built here as the reader builds them)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator.config.anchors import anchors
from se_forwarder.fleet.coordinator.config.limits import DEFAULT_LIMITS
from se_forwarder.fleet.coordinator.edge import offload, trust
from se_forwarder.fleet.coordinator.edge.gate import Quota
from se_forwarder.fleet.coordinator.fold.identities import Claim
from se_forwarder.fleet.coordinator.fold.state import Identity
from se_forwarder.fleet.coordinator.input.hub_reader import Batch, Position
from se_forwarder.fleet.coordinator.input.lag import LagGuard
from se_forwarder.fleet.coordinator.input.verifier import Verifier
from tests.support.forged_registrations import KINDS, forged

from .fleet import AgentVm, heartbeat, pause_event, report
from .signed import COORDINATOR_KEY, Coordinator, SignedVm, authority

NOW = time.time()  # the hub time of every batch here: taken once, when the module is collected


def registration(vm: SignedVm, at: float = NOW, **document: Any) -> dict[str, Any]:
    """``vm``'s registration made at ``at`` (the hub time it is read at), however long after
    collection its test runs: a document created later than that is refused as from the future."""
    return vm.identity(vm.document(created=at, **document), t=at)


class Parallel:
    """A coordinator whose events pass the verifier's workers first, as the service's do."""

    def __init__(self, workers: int = 2) -> None:
        self.coordinator = Coordinator()
        self.out: queue.Queue[Batch] = queue.Queue()
        auth = authority()
        job = offload.Job.of(anchors([auth.ca_file], [auth.intermediate_file]), None)
        self.verifier = Verifier(self.out.put, workers, DEFAULT_LIMITS, self._bound, self._known, lambda: job)

    def fresh(self) -> Parallel:
        """A new coordinator behind the same workers (and a new count of registrations)."""
        self.coordinator, self.verifier.quota = Coordinator(), Quota()
        return self

    def _bound(self, vm: str) -> Any:
        return self.coordinator.state.identities.get(vm)

    def _known(self, event: Any) -> bool:
        return self.coordinator.gate.known(self.coordinator.state, event)

    def admit(self, *events: dict[str, Any], t: float = NOW) -> list[str]:
        batch = Batch("0", [(e, Position(i, str(i), t)) for i, e in enumerate(events)], time.monotonic(),
                      [json.dumps(e).encode() for e in events])
        self.verifier.put(batch)
        got = self.out.get(timeout=120)
        checks = got.checked or [None] * len(got.events)
        return [self.coordinator.gate.admit(self.coordinator.state, e, t, c)
                for (e, _), c in zip(got.events, checks, strict=True)]

    def close(self) -> None:
        self.verifier.close()


@pytest.fixture(scope="module")
def parallel():
    pipeline = Parallel()
    yield pipeline
    pipeline.close()


def _cases() -> dict[str, list[dict[str, Any]]]:
    """The trust tests' kinds of event, each a small story (registration first where it needs one)."""
    vm, other = SignedVm(AgentVm("web-0")), SignedVm(AgentVm("web-1"))
    beat = heartbeat(vm.vm, NOW)
    stringy = {**beat, "data": "a string"}
    decision = {**pause_event("fleet", t=NOW), "specversion": "1.0"}
    return {
        "a report signed by its registered key": [vm.identity(), vm.sign(beat)],
        "reports before and after the registration in one batch": [vm.sign(beat), vm.identity(),
                                                                    vm.sign(heartbeat(vm.vm, NOW + 1))],
        "a report signed by another key": [vm.identity(), other.sign(beat)],
        "a report with its signature changed": [vm.identity(), {**vm.sign(beat), "signature": "A" * 88}],
        "a report whose signature is not base64": [vm.identity(), {**vm.sign(beat), "signature": "%%%"}],
        "a report with its content changed": [vm.identity(), {**vm.sign(beat), "time": "2020-01-01T00:00Z"}],
        "a report of an unregistered vm": [other.sign(heartbeat(other.vm, NOW))],
        "an unsigned report": [vm.identity(), beat],
        "a report about another vm": [vm.identity(), vm.sign({**beat, "vmid": other.vm.vm_id})],
        "a report whose data is a string": [vm.identity(), vm.sign(stringy)],
        "a scheduled report": [vm.identity(), vm.sign(report("scheduled", vm.vm, "e-1", NOW))],
        "a registration announced again": [vm.identity(), vm.identity()],
        "a registration not signed by its key": [vm.identity(key=signing.generate_private_key())],
        "a registration for another vm's document": [vm.identity(other.document())],
        "a rekey": [vm.identity(vm.document(created=NOW - 60)),
                    SignedVm(vm.vm).identity(SignedVm(vm.vm).document(created=NOW))],
        "a signed decision": [signing.sign(decision, COORDINATOR_KEY)],
        "a forged decision": [signing.sign(decision, signing.generate_private_key())],
        "Azure's type on the agents' hub": [{**beat, "type": "Microsoft.ResourceNotifications.X"}],
        **{f"a forged registration: {kind}": [forged(kind, authority())] for kind in KINDS},
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_workers_reach_the_verdicts_of_the_fold_thread_alone(parallel, name):
    serial = Coordinator()
    expected = serial.admit(*CASES[name], t=NOW)
    parallel.fresh()
    assert parallel.admit(*CASES[name]) == expected
    assert parallel.coordinator.gate.refused == serial.gate.refused
    assert sorted(parallel.coordinator.state.vms) == sorted(serial.state.vms)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.sampled_from(sorted(CASES)), min_size=1, max_size=5), data=st.data())
def test_any_mix_and_order_of_the_cases_gets_the_same_verdicts(parallel, names, data):
    events = [e for n in names for e in CASES[n]]
    events = data.draw(st.permutations(events))
    serial = Coordinator()
    expected = serial.admit(*events, t=NOW)
    parallel.fresh()
    assert parallel.admit(*events) == expected


def test_reports_checked_by_the_workers_are_not_verified_again_on_the_fold_thread(parallel, monkeypatch):
    from se_forwarder.fleet.coordinator.edge import trust

    vm = SignedVm(AgentVm("web-0"))
    parallel.fresh()
    parallel.admit(registration(vm))
    calls: list[Any] = []
    monkeypatch.setattr(trust.signing, "problem", lambda *a: calls.append(a))
    assert parallel.admit(*(vm.sign(heartbeat(vm.vm, NOW + i)) for i in range(20))) == ["folded"] * 20
    assert calls == []


def test_a_worker_that_dies_is_replaced_and_no_report_is_lost():
    pipeline = Parallel(workers=1)
    try:
        vms = [SignedVm(AgentVm(f"web-{i}")) for i in range(3)]
        for vm in vms:
            pipeline.admit(registration(vm))
        beats = [vm.sign(heartbeat(vm.vm, NOW + i)) for i in range(1500) for vm in vms]
        batch = Batch("0", [(e, Position(i, str(i), NOW)) for i, e in enumerate(beats)], time.monotonic(),
                      [json.dumps(e).encode() for e in beats])
        pool = pipeline.verifier._pool
        assert pool is not None
        pipeline.verifier.put(batch)
        for pid in list(pool._processes):  # SIGKILL the worker while it verifies the batch
            os.kill(pid, signal.SIGKILL)
        got = pipeline.out.get(timeout=120)
        outcomes = [pipeline.coordinator.gate.admit(pipeline.coordinator.state, e, NOW, c)
                    for (e, _), c in zip(got.events, got.checked or [], strict=True)]
        assert outcomes == ["folded"] * len(beats)
        assert pipeline.verifier.restarts >= 1
        after = vms[0].sign(heartbeat(vms[0].vm, NOW + 9999))
        assert pipeline.admit(after) == ["folded"]  # the new pool works
    finally:
        pipeline.close()


def test_a_verifier_behind_stops_early_approvals_until_what_it_held_is_handed_on():
    """A worker stopped (SIGSTOP) keeps a batch in the stage: the lag guard counts it from the hub's
    enqueued time, and lets approvals go on once the workers answered and the batch went on."""
    pipeline = Parallel(workers=1)
    try:
        vm = SignedVm(AgentVm("web-0"))
        pipeline.admit(registration(vm))  # the pool is made and the key bound
        pool = pipeline.verifier._pool
        assert pool is not None
        workers = list(pool._processes)
        guard = LagGuard([], 5.0, backlog=pipeline.verifier.backlog)
        beats = [vm.sign(heartbeat(vm.vm, NOW + i)) for i in range(50)]
        batch = Batch("0", [(e, Position(i, str(i), NOW)) for i, e in enumerate(beats)], time.monotonic(),
                      [json.dumps(e).encode() for e in beats])
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        try:
            pipeline.verifier.put(batch)
            assert pipeline.verifier.backlog() == (50, NOW)
            assert guard.stale({}, NOW + 10) == ("verification is 10 s behind the agents' hub (50 event(s) "
                                                 "waiting for the verifier's workers), more than max_lag 5 s")
            assert pipeline.out.empty()
        finally:
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
        got = pipeline.out.get(timeout=120)
        outcomes = [pipeline.coordinator.gate.admit(pipeline.coordinator.state, e, NOW, c)
                    for (e, _), c in zip(got.events, got.checked or [], strict=True)]
        assert outcomes == ["folded"] * len(beats)
        assert pipeline.verifier.backlog() == (0, None)
        assert guard.stale({}, NOW + 10) == ""
    finally:
        pipeline.close()


def test_a_registration_whose_intermediate_is_to_be_fetched_is_judged_where_it_is_fetched(parallel):
    from se_forwarder.fleet.coordinator.input import Intermediates
    from tests.support.ca_issuer import Issuer, azure_like

    issuer = Issuer()
    threading.Thread(target=issuer.serve_forever, daemon=True).start()
    try:
        authority = azure_like(issuer)
        done: queue.Queue[str] = queue.Queue()
        fetcher = Intermediates((issuer.url("/"),), done.put)
        parallel.fresh()
        parallel.coordinator = Coordinator(signer=authority, fetched=fetcher.lookup)
        agent = SignedVm(AgentVm("web-0"))
        at = time.time()  # the CA was made just now: its certificates are valid from now on
        assert parallel.admit(registration(agent, at, signer=authority), t=at) == ["waiting"]
        parallel.coordinator.gate.fetched(parallel.coordinator.state, done.get(timeout=30))
        assert AgentVm("web-0").vm_id.lower() in parallel.coordinator.state.identities
        fetcher.close()
    finally:
        issuer.shutdown()


SERVICE = """
import os, sys, time
from se_forwarder.fleet.coordinator.config.limits import DEFAULT_LIMITS
from se_forwarder.fleet.coordinator.input.verifier import Verifier
verifier = Verifier(lambda batch: None, 2, DEFAULT_LIMITS, lambda vm: None, lambda event: False, lambda: None)
pids = {verifier._send(os.getpid, ()).result(timeout=60) for _ in range(8)}
print(" ".join(map(str, sorted(pids))), flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Running, not a zombie left for whoever adopted it to reap."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_workers_of_a_killed_service_exit_with_it():
    """SIGKILL leaves the service no chance to shut its pool down: its workers end by themselves."""
    service = subprocess.Popen([sys.executable, "-c", SERVICE], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in service.stdout.readline().split()]  # type: ignore[union-attr]
        assert workers and all(alive(pid) for pid in workers)
    finally:
        service.kill()
        service.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not [pid for pid in workers if alive(pid)]


def test_the_workers_start_with_the_verifier_before_any_batch_comes():
    """A cold start's first batch does not wait for the workers to start and import the verdicts' code."""
    verifier = Verifier(lambda batch: None, 2, DEFAULT_LIMITS, lambda vm: None, lambda event: False,
                        lambda: None)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(getattr(verifier._pool, "_processes", None) or {}) < 2:
            time.sleep(0.1)
        pool = verifier._pool
        assert pool is not None and len(pool._processes) == 2
        assert all(alive(pid) for pid in pool._processes)
        assert verifier.reports == verifier.registrations == 0  # nothing was put
    finally:
        verifier.close()


_TEXT = st.text(max_size=20)
_IDENTITIES = st.builds(Identity, _TEXT, _TEXT, st.floats(allow_nan=False), st.floats(allow_nan=False), _TEXT,
                        _TEXT, st.floats(allow_nan=False))
_VERDICTS = st.builds(trust.Verdict, st.booleans(), st.none() | _TEXT, _TEXT, st.none() | _TEXT,
                      st.none() | _TEXT, st.booleans(), st.none() | st.builds(Claim, _TEXT, _IDENTITIES),
                      st.none() | _TEXT)


@given(_VERDICTS)
def test_a_registrations_verdict_crosses_back_from_a_worker_as_plain_values_unchanged(verdict):
    sent = offload.answer(trust.Checked(verdict=verdict))
    assert all(isinstance(v, str | bool | float | type(None) | tuple) for v in sent)
    assert offload.answered(sent) == trust.Checked(verdict=verdict)
