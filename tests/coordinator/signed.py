"""Agents that sign, as docs/identity.md describes them byte for byte, and a gate to feed them to.

``SignedVm`` is an independent agent written from the docs: an Ed25519 key, the nonce derived from
it, an identity event carrying an attested document that the simulator's authority signs as IMDS
does, and reports signed over their canonical form. ``Edge`` is a coordinator's gate (gate.py)
with the simulator's CA as its attestation anchors.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator import Policy, evaluate, to_dict
from se_forwarder.fleet.coordinator.config.anchors import anchors
from se_forwarder.fleet.coordinator.edge import Edge, Gate, trust
from se_forwarder.fleet.coordinator.fold import FleetState
from se_forwarder.identity.attested import nonce_for
from se_forwarder.simulator.attestation import AttestationAuthority

from .fleet import SOURCE, AgentVm, iso

COORDINATOR_KEY = signing.generate_private_key()
_AUTHORITY: list[AttestationAuthority] = []


def authority() -> AttestationAuthority:
    """The simulator's signer of attested documents, made once for the test process."""
    if not _AUTHORITY:
        _AUTHORITY.append(AttestationAuthority())
    return _AUTHORITY[0]


@dataclass
class SignedVm:
    """An agent with its own identity key (docs/identity.md)."""

    vm: AgentVm
    key: Ed25519PrivateKey = field(default_factory=signing.generate_private_key)

    @property
    def public(self) -> str:
        return signing.public_key_line(self.key)

    @property
    def nonce(self) -> str:
        return nonce_for(base64.b64decode(self.public))

    def document(self, *, created: float | None = None, nonce: str | None = None,
                 vm_id: str | None = None, signer: AttestationAuthority | None = None,
                 subscription: str | None = None) -> dict[str, str]:
        compute = {"vmId": vm_id or self.vm.vm_id, "subscriptionId": subscription or self.vm.sub}
        return (signer or authority()).document(compute, nonce or self.nonce, now=created)

    def identity(self, document: dict[str, str] | None = None, *, t: float | None = None,
                 key: Ed25519PrivateKey | None = None, vm_id: str | None = None) -> dict[str, Any]:
        """The identity event, signed by ``key`` (default: the key it registers)."""
        t = time.time() if t is None else t
        ident = vm_id or self.vm.vm_id
        event = {
            "specversion": "1.0", "type": "com.azure.scheduledevents.identity",
            "source": self.vm.source, "id": f"identity/{ident}/{signing.keyid(self.key)}/{int(t)}",
            "subject": ident, "time": iso(t), "datacontenttype": "application/json", "vmid": ident,
            "data": {"PublicKey": self.public, "Nonce": self.nonce,
                     "AttestedDocument": document if document is not None else self.document(),
                     "AgentVersion": "0.1.0", "Vm": self.vm.data()},
        }
        return signing.sign(event, key or self.key)

    def sign(self, event: dict[str, Any]) -> dict[str, Any]:
        return signing.sign(event, self.key)


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Coordinator:
    """A coordinator's fold behind its gate, fed by hand at hub time ``t`` (enqueued)."""

    policy: Policy = field(default_factory=Policy)
    state: FleetState = field(default_factory=FleetState)
    require_signed: bool = True
    subscriptions: tuple[str, ...] | None = None
    fetched: Any = None  # the intermediates lookup: the intermediate is then not configured
    signer: AttestationAuthority | None = None  # default: authority()
    gate: Gate = field(init=False)

    def __post_init__(self) -> None:
        auth = self.signer or authority()
        given = [] if self.fetched else [auth.intermediate_file]
        attested = trust.Attestation(anchors([auth.ca_file], given), self.subscriptions, self.fetched)
        keys = signing.VerifyKeys([COORDINATOR_KEY.public_key()])
        self.gate = Gate(Edge(SOURCE, lambda: keys, attested, self.require_signed))

    def admit(self, *events: dict[str, Any], t: float | None = None) -> list[str]:
        return [self.gate.admit(self.state, e, time.time() if t is None else t) for e in events]

    def register(self, *vms: SignedVm) -> None:
        outcomes = self.admit(*(vm.identity() for vm in vms))
        assert set(outcomes) <= {"registered"}, outcomes

    def decide(self, now: float):
        result = evaluate(self.state, self.policy, now)
        for decision in result.decisions:
            self.gate.admit(self.state, signing.sign(to_dict(decision, SOURCE), COORDINATOR_KEY), now)
        return result
