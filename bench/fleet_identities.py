"""The bench fleets as registered agents: what the coordinator verifies in production, played here.

Each VM has its own Ed25519 identity key and registers it with an identity CloudEvent built by the
agent's own code (``cloudevents.identity``) around an attested document with the key's nonce
(``identity/attested.nonce_for``). The documents are signed by a per-run CA (the simulator's
``AttestationAuthority``, as in the tests), which the coordinator trusts through
``[trust] attestation_roots`` as a real coordinator trusts Azure's. Every report is then signed
with its VM's key (``approvals/signing``), so the coordinator's default
``require_signed_reports = true`` holds and its figures include verification.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from se_forwarder import cloudevents as ce
from se_forwarder.approvals import signing
from se_forwarder.identity.attested import nonce_for
from se_forwarder.model import VmIdentity
from se_forwarder.simulator.attestation import AttestationAuthority


class Identities:
    """Keys, registrations and signatures of the bench's VMs (module docstring)."""

    def __init__(self, vms: list[dict[str, Any]], directory: Path) -> None:
        self.vms = vms
        self.authority = AttestationAuthority(directory=directory / "attestation-ca")
        self.keys = {v["vmId"]: signing.generate_private_key() for v in vms}

    def trust_config(self) -> str:
        """The coordinator.toml section that trusts this run's attestation CA (no fetching)."""
        return ("[trust]\n"
                f'attestation_roots = ["{self.authority.ca_file}"]\n'
                f'attestation_intermediates = ["{self.authority.intermediate_file}"]\n'
                "fetch_intermediates = false\n")

    def registration(self, vm: dict[str, Any]) -> str:
        """``vm``'s identity event, signed by the key it registers, as JSON text."""
        key = self.keys[vm["vmId"]]
        raw = signing.raw_public(key)
        nonce = nonce_for(raw)
        document = self.authority.document({"vmId": vm["vmId"], "subscriptionId": vm["subscriptionId"]},
                                           nonce)
        now = datetime.now(UTC)
        cloud = ce.identity(VmIdentity.from_compute(vm), now, vm_id=vm["vmId"],
                            public_key=signing.public_key_line(key), key_id=signing.keyid(key),
                            nonce=nonce, document=document, created=now)
        return json.dumps(signing.sign(json.loads(ce.to_json(cloud)), key))

    def sign(self, text: str) -> str:
        """A report (JSON text) signed with the key of the VM it names in ``vmid``."""
        event = json.loads(text)
        return json.dumps(signing.sign(event, self.keys[event["vmid"]]))
