"""The snapshot blob is signed with the coordinator's key and taken only when it verifies (blobs.py,
trust.snapshot), on a real blob container (Azurite). Whoever can write the container (the account
key, a role on it) cannot write the fold."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from se_forwarder.approvals import signing
from se_forwarder.errors import StateError
from se_forwarder.fleet.coordinator.blobs import Snapshots
from se_forwarder.fleet.coordinator.hub import Position
from se_forwarder.fleet.coordinator.sender import Signer
from tests.azurite import Azurite, find_binary

pytestmark = pytest.mark.skipif(find_binary("blob") is None, reason="Azurite is not installed")

KEY, STANDBY, OTHER = (signing.generate_private_key() for _ in range(3))
HUB = "ns/scheduled-events/coordinator"
STATE = {"format": 1, "vms": [], "events": [], "groups": [], "decisions": [], "gone": {}}


@pytest.fixture(scope="module")
def container() -> Iterator[object]:
    from azure.storage.blob import ContainerClient

    with Azurite("blob") as azurite:
        client = ContainerClient.from_connection_string(azurite.connection_string, "snapshots")
        client.create_container()
        yield client


def snapshots(container: object, name: str, key: object = KEY, trusted: tuple = (KEY, STANDBY)) -> Snapshots:
    keys = signing.VerifyKeys([k.public_key() for k in trusted])
    return Snapshots(container, name, HUB, lambda: key, lambda: keys)


def rewrite(store: Snapshots, change) -> None:
    """Change the stored document the way someone with write access to the blob could."""
    document = json.loads(gzip.decompress(store.blob.download_blob().readall()))
    document = change(document)
    store.blob.upload_blob(gzip.compress(json.dumps(document).encode()), overwrite=True)


def test_a_saved_snapshot_is_signed_and_loads(container):
    store = snapshots(container, "saved")
    store.save(STATE, {"0": Position(41, "4096")}, "a")
    document = json.loads(gzip.decompress(store.blob.download_blob().readall()))
    assert document["keyid"] == signing.keyid(KEY) and signing.verify(document, [KEY.public_key()])
    found = store.load()
    assert found is not None and found.state == STATE and found.positions == {"0": Position(41, "4096")}


def test_a_snapshot_signed_with_a_configured_coordinator_key_loads(container):
    snapshots(container, "standby", key=STANDBY).save(STATE, {}, "b")
    assert snapshots(container, "standby").load() is not None


@pytest.mark.parametrize(("name", "change", "why"), [
    ("unsigned", lambda d: {k: v for k, v in d.items() if k not in ("keyid", "signature")},
     "message has no signature"),
    ("another key", lambda d: signing.sign({**d, "state": {**d["state"], "gone": {"x": 1.0}}}, OTHER),
     f"keyid {signing.keyid(OTHER)} is not a configured verify key"),
    ("changed", lambda d: {**d, "positions": {"0": {"sequence": 10**6, "offset": "1"}}},
     "signature does not verify"),
], ids=["unsigned", "another key", "changed"])
def test_a_snapshot_that_does_not_verify_is_refused_in_one_line(container, name, change, why):
    store = snapshots(container, name.replace(" ", "-"))
    store.save(STATE, {"0": Position(1, "1")}, "a")
    rewrite(store, change)
    with pytest.raises(StateError) as refused:
        store.load()
    text = str(refused.value)
    assert text.startswith("the snapshot blob is not the coordinator's: the snapshot does not verify (")
    assert why in text and "\n" not in text


def test_the_trusted_keys_are_every_key_the_signing_file_held_and_the_configured_ones(tmp_path: Path):
    file = tmp_path / "signing.key"
    file.write_bytes(signing.private_key_pem(KEY))
    signer = Signer(str(file), "urn:se-forwarder:coordinator:x", [OTHER.public_key()])
    assert set(signer.verify_keys().ids) == {signing.keyid(KEY), signing.keyid(OTHER)}
    file.write_bytes(signing.private_key_pem(STANDBY))
    os.utime(file, ns=(1, 1))  # a new mtime even on a coarse clock
    assert set(signer.verify_keys().ids) == {signing.keyid(k) for k in (KEY, STANDBY, OTHER)}
    assert signing.keyid(signer.key()) == signing.keyid(STANDBY)
