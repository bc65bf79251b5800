"""``[trust]``: more public keys whose decisions and snapshots the coordinator takes (a previous
key while rotating, a standby's), as a list, a file and/or an environment variable, base64 or PEM
like the agents' verify keys; the attestation anchors and the rule for unsigned reports; anything
else is one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from se_forwarder.approvals import signing
from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator.config import from_dict

BASE = {"signing": {"key_file": "/k"},
        "eventhub": {"fully_qualified_namespace": "ns.servicebus.windows.net"},
        "storage": {"account_url": "https://a.blob.core.windows.net"},
        "queues": {"account_url": "https://a.queue.core.windows.net"},
        "api": {"token_file": "/t"}}
ONE, TWO, THREE = (signing.generate_private_key() for _ in range(3))


def pem(key) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def trust(section: dict, env: dict | None = None) -> tuple[str, ...]:
    return from_dict({**BASE, "trust": section}, environ=env or {}).coordinator_keys


def test_no_trust_section_trusts_only_the_signing_key():
    assert from_dict(BASE, environ={}).coordinator_keys == ()


def test_keys_come_from_the_list_the_file_and_the_variable_together(tmp_path: Path):
    file = tmp_path / "coordinator-keys"
    file.write_text(f"# the standby\n{pem(TWO)}")
    keys = trust({"coordinator_keys": [signing.public_key_line(ONE)], "coordinator_keys_file": str(file),
                  "coordinator_keys_env": "OLD_KEYS"}, {"OLD_KEYS": signing.public_key_line(THREE)})
    assert keys == tuple(signing.public_key_line(k) for k in (ONE, TWO, THREE))


@pytest.mark.parametrize(("section", "env", "says"), [
    ({"coordinator_keys": ["bm90IGEga2V5"]}, {}, "trust.coordinator_keys: key #1 is 9 bytes"),
    ({"coordinator_keys": "AAAA"}, {}, "trust.coordinator_keys: must be a list"),
    ({"coordinator_keys_file": "/nonexistent/keys"}, {}, "trust.coordinator_keys_file: /nonexistent/keys "
                                                         "cannot be read"),
    ({"coordinator_keys_env": "MISSING"}, {}, "the environment variable MISSING is not set"),
    ({"coordinator_keys_env": "KEYS"}, {"KEYS": signing.private_key_pem(ONE).decode()},
     "holds a PRIVATE key"),
    ({"coordinator_key": []}, {}, "coordinator_key"),
])
def test_a_bad_trust_entry_is_one_line_naming_it(section, env, says):
    with pytest.raises(ConfigError) as refused:
        trust(section, env)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def settings_of(section: dict):
    return from_dict({**BASE, "trust": section}, environ={}).trust


def test_by_default_reports_must_be_signed_and_documents_chain_to_azures_documented_roots():
    ts = settings_of({})
    assert ts.require_signed_reports and ts.fetch_intermediates and ts.subscriptions is None
    assert "http://www.microsoft.com/pkiops/certs/" in ts.intermediate_paths and ts.report_skew == 60
    hosts = ("www.microsoft.com/", "cacerts.digicert.com/")
    assert all(p.endswith("/") and any(h in p for h in hosts) for p in ts.intermediate_paths)
    assert ts.verify_workers >= 1
    names = {c.subject.rfc4514_string() for c in ts.anchors().roots}
    assert any("DigiCert Global Root G2" in n for n in names)


def test_the_attestation_settings_are_read(tmp_path: Path):
    from se_forwarder.simulator.attestation import AttestationAuthority

    ca = AttestationAuthority(directory=tmp_path)
    sub = "11111111-2222-3333-4444-555555555555"
    ts = settings_of({"attestation_roots": [str(ca.ca_file)],
                      "attestation_intermediates": [str(ca.intermediate_file)], "fetch_intermediates": False,
                      "subscriptions": [sub.upper()], "require_signed_reports": False, "report_skew": "30s",
                      "intermediate_paths": ["http://PKI.example/certs/"], "verify_workers": 0})
    anchors = ts.anchors()
    assert (len(anchors.roots), len(anchors.intermediates)) == (1, 1)
    assert (ts.fetch_intermediates, ts.require_signed_reports, ts.report_skew) == (False, False, 30)
    assert ts.subscriptions == (sub,) and ts.intermediate_paths == ("http://pki.example/certs/",)
    assert ts.verify_workers == 0


@pytest.mark.parametrize(("section", "says"), [
    ({"attestation_roots": ["/nonexistent/root.pem"]},
     "trust.attestation_roots: /nonexistent/root.pem cannot be read"),
    ({"attestation_intermediates": "x.pem"}, "trust.attestation_intermediates: must be a list of strings"),
    ({"subscriptions": ["prod"]}, "trust.subscriptions: 'prod' is not a subscription id"),
    ({"intermediate_paths": ["www.microsoft.com"]}, "trust.intermediate_paths: 'www.microsoft.com' is not an "
                                                    "http(s) URL prefix"),
    ({"intermediate_hosts": ["www.microsoft.com"]},
     "trust.intermediate_hosts: replaced by intermediate_paths"),
    ({"verify_workers": 100}, "trust.verify_workers"),
    ({"require_signed_reports": "no"}, "trust.require_signed_reports"),
    ({"report_skew": "2h"}, "trust.report_skew"),
])
def test_a_bad_attestation_entry_is_one_line_naming_it(section, says):
    with pytest.raises(ConfigError) as refused:
        settings_of(section)
    assert says in str(refused.value) and "\n" not in str(refused.value)
