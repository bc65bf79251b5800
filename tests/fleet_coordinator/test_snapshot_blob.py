"""The snapshot blob is sealed with the coordinator's key and taken only when it verifies
(snapshot_blob.py, trust.snapshot), on a real blob container (Azurite), also as the service saves and
loads it off its loop (keeper.py). Whoever can write the container (the account key, a role on it)
cannot write the fold: not a line of it, nor the seal, nor an older format."""

from __future__ import annotations

import copy
import gzip
import json
import os
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.approvals import signing
from se_forwarder.errors import ConfigError, StateError
from se_forwarder.fleet.coordinator import FleetState, evaluate, load_policy
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.azure import Reach
from se_forwarder.fleet.coordinator.decide.scopes import index
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot
from se_forwarder.fleet.coordinator.ha import Keeper, Loaded
from se_forwarder.fleet.coordinator.ha import SnapshotBlob as Snapshots
from se_forwarder.fleet.coordinator.ha.lease import Lease
from se_forwarder.fleet.coordinator.input import Position
from se_forwarder.fleet.coordinator.signer import Signer, signed_json
from se_forwarder.fleet.coordinator.view.digest import CACHED, Digest, Kept
from tests.azurite import Azurite, find_binary
from tests.coordinator.fleet import T0, AgentVm, heartbeat, report
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(find_binary("blob") is None, reason="Azurite is not installed")

KEY, STANDBY, OTHER = (signing.generate_private_key() for _ in range(3))
HUB = "ns/scheduled-events/coordinator"


def fold() -> FleetState:
    state = FleetState()
    a, b = AgentVm("web-0"), AgentVm("web-1")
    for event in (heartbeat(a, T0), heartbeat(b, T0), report("scheduled", a, "E1", T0, resources=["web-0"]),
                  report("scheduled", b, "E1", T0, resources=["web-0"])):
        fold_event(state, event)
    return state


STATE = fold()


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


def save(store: Snapshots, state: FleetState = STATE, positions: dict | None = None, instance: str = "a",
         ) -> None:
    store.save(store.pack(state, positions if positions is not None else {"0": Position(1, "1")}, instance))


def stored_lines(store: Snapshots) -> list[dict | list]:
    return [json.loads(line) for line in gzip.decompress(store.blob.download_blob().readall()).splitlines()]


def rewrite(store: Snapshots, change) -> None:
    """Change the stored lines the way someone with write access to the blob could."""
    changed = change(stored_lines(store))
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in changed)
    store.blob.upload_blob(gzip.compress(text.encode()), overwrite=True)


def resealed(lines: list, key) -> list:
    """The lines with a new seal over them, made with ``key``."""
    import hashlib

    body = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines[:-1]).encode()
    seal = {"sha256": hashlib.sha256(body).hexdigest(), "lines": len(lines) - 1}
    return [*lines[:-1], signing.sign(seal, key)]


def test_a_saved_snapshot_is_sealed_and_loads(container):
    store = snapshots(container, "saved")
    save(store, positions={"0": Position(41, "4096")})
    lines = stored_lines(store)
    header, seal = lines[0], lines[-1]
    assert header["format"] == 2 and header["hub"] == HUB and header["positions"] == {"0": {"sequence": 41,
                                                                                           "offset": "4096"}}
    assert seal["keyid"] == signing.keyid(KEY) and signing.verify(seal, [KEY.public_key()])
    assert header["coordinator"] == "saved" and (seal["lines"], seal["generation"]) == (len(lines) - 1, 0)
    found = store.load()
    assert found is not None and found.positions == {"0": Position(41, "4096")}
    assert snapshot(found.state) == snapshot(STATE)


def test_a_snapshot_signed_with_a_configured_coordinator_key_loads(container):
    save(snapshots(container, "standby", key=STANDBY), instance="b")
    assert snapshots(container, "standby").load() is not None


def test_a_snapshot_of_the_format_earlier_versions_wrote_still_loads(container):
    store = snapshots(container, "format-1")
    document = {"format": 1, "hub": HUB, "instance": "a", "writtenAt": T0,
                "positions": {"0": {"sequence": 5, "offset": "50"}}, "state": snapshot(STATE)}
    store.blob.upload_blob(gzip.compress(signed_json(document, KEY), compresslevel=5), overwrite=True)
    found = store.load()
    assert found is not None and snapshot(found.state) == snapshot(STATE)
    assert found.positions == {"0": Position(5, "50")}


def test_a_snapshot_of_the_earlier_format_that_does_not_verify_is_refused(container):
    store = snapshots(container, "format-1-forged")
    document = {"format": 1, "hub": HUB, "instance": "a", "writtenAt": T0, "positions": {},
                "state": snapshot(STATE)}
    store.blob.upload_blob(gzip.compress(signed_json(document, OTHER)), overwrite=True)
    with pytest.raises(StateError, match="^the snapshot blob is not the coordinator's: the snapshot does "):
        store.load()


@pytest.mark.parametrize(("name", "change", "why"), [
    ("unsigned", lambda ls: [*ls[:-1], {k: v for k, v in ls[-1].items() if k not in ("keyid", "signature")}],
     "message has no signature"),
    ("another key", lambda ls: resealed([ls[0], ["gone", {"x": 1.0}], *ls[1:]], OTHER),
     f"keyid {signing.keyid(OTHER)} is not a configured verify key"),
    ("changed", lambda ls: [{**ls[0], "positions": {"0": {"sequence": 10**6, "offset": "1"}}}, *ls[1:]],
     "its lines are not the ones its signature seals"),
    ("line added", lambda ls: [*ls[:-1], ["gone", {"x": 1.0}], ls[-1]],
     "its lines are not the ones its signature seals"),
    ("line dropped", lambda ls: [ls[0], *ls[2:]], "its lines are not the ones its signature seals"),
    ("seal changed", lambda ls: [*ls[:-1], {**ls[-1], "lines": 3}], "signature does not verify"),
], ids=["unsigned", "another key", "changed", "line added", "line dropped", "seal changed"])
def test_a_snapshot_that_does_not_verify_is_refused_in_one_line(container, name, change, why):
    store = snapshots(container, name.replace(" ", "-"))
    save(store)
    rewrite(store, change)
    with pytest.raises(StateError) as refused:
        store.load()
    text = str(refused.value)
    assert text.startswith("the snapshot blob is not the coordinator's: the snapshot does not verify (")
    assert why in text and "\n" not in text


def test_a_snapshot_without_a_seal_or_not_gzip_or_a_bomb_is_refused_in_one_line(container):
    store = snapshots(container, "damaged")
    save(store)
    rewrite(store, lambda ls: ls[:1])
    with pytest.raises(StateError, match="^the snapshot blob is not the coordinator's: it has no seal$"):
        store.load()
    store.blob.upload_blob(b"{}", overwrite=True)
    with pytest.raises(StateError, match=r"^the snapshot blob is damaged \(ValueError: not gzip\)$"):
        store.load()
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = b"".join([bomb.compress(b"x" * (1 << 20)) for _ in range(80)] + [bomb.flush()])  # one 80 MB line
    store.blob.upload_blob(body, overwrite=True)
    with pytest.raises(StateError, match=r"^the snapshot blob is damaged \(ValueError: a line is too long"):
        store.load()


def test_the_trusted_keys_are_every_key_the_signing_file_held_and_the_configured_ones(tmp_path: Path):
    file = tmp_path / "signing.key"
    file.write_bytes(signing.private_key_pem(KEY))
    signer = Signer(str(file), "urn:se-forwarder:coordinator:x", [OTHER.public_key()])
    assert set(signer.verify_keys().ids) == {signing.keyid(KEY), signing.keyid(OTHER)}
    file.write_bytes(signing.private_key_pem(STANDBY))
    os.utime(file, ns=(1, 1))  # a new mtime even on a coarse clock
    assert set(signer.verify_keys().ids) == {signing.keyid(k) for k in (KEY, STANDBY, OTHER)}
    assert signing.keyid(signer.key()) == signing.keyid(STANDBY)


def keeper_for(store: Snapshots) -> Keeper:
    return Keeper(store, Reach("storage"), "a")


def loaded(keeper: Keeper) -> Loaded:
    keeper.load()
    return wait_for(keeper.poll, 30, "the keeper to load the snapshot")


def test_the_keeper_saves_the_signed_snapshot_off_the_loop_and_loads_it(container):
    store = snapshots(container, "kept")
    keeper = keeper_for(store)
    assert keeper.save(keeper.pack(STATE, {"0": Position(7, "70")}))
    wait_for(lambda: keeper.poll() is None and keeper.last_snapshot is not None, 30, "the save to end")
    assert signing.verify(stored_lines(store)[-1], [KEY.public_key()])
    got = loaded(keeper)
    assert got.found is not None and got.positions == {"0": Position(7, "70")} and not got.refused
    assert snapshot(got.state) == snapshot(STATE)


def test_a_clean_stop_during_a_save_waits_for_it_then_saves_the_fold_as_it_is(container, monkeypatch):
    store = snapshots(container, "stopping")
    keeper = keeper_for(store)
    upload = store.save

    def slow(packed: Any, generation: int = 0) -> int:  # the real save, begun a second late
        time.sleep(1)
        return upload(packed, generation)

    monkeypatch.setattr(store, "save", slow)
    assert keeper.save(keeper.pack(STATE, {"0": Position(7, "70")}))
    keeper.save_now(keeper.pack(STATE, {"0": Position(8, "80")}), 20)
    assert keeper.generation == 2 and keeper.last_snapshot is not None
    assert loaded(keeper).positions == {"0": Position(8, "80")}


def test_the_fold_the_keeper_loads_comes_with_its_digest_made_off_the_loop(container):
    store = snapshots(container, "digested")
    keeper = keeper_for(store)
    assert keeper.save(keeper.pack(STATE, {"0": Position(7, "70")}))
    wait_for(lambda: keeper.poll() is None and keeper.last_snapshot is not None, 30, "the save to end")
    got = loaded(keeper)
    assert isinstance(got.state.cache.get(CACHED), Kept) and got.state.journal is not None
    assert Digest().of(got.state) == Digest().of(copy.deepcopy(STATE))


def test_the_fold_the_keeper_loads_comes_with_what_the_service_makes_of_it_made_off_the_loop(container):
    store = snapshots(container, "indexed")
    policy = load_policy({"budgets": [{"scope": "group", "max_unavailable": 1}]})
    threads: list[str] = []

    def made(state: FleetState) -> None:  # the service's: a pass whose decisions it drops (service.py)
        threads.append(threading.current_thread().name)
        evaluate(state, policy, T0)

    keeper = Keeper(store, Reach("storage"), "a", made=made)
    assert keeper.save(keeper.pack(STATE, {"0": Position(7, "70")}))
    wait_for(lambda: keeper.poll() is None and keeper.last_snapshot is not None, 30, "the save to end")
    got = loaded(keeper)
    kept = got.state.cache.get("index")
    assert threads and threads[0] != threading.main_thread().name
    assert kept is not None and index(got.state, policy) is kept  # nothing left to bring up to date
    whole = index(copy.deepcopy(STATE), policy)
    assert (kept.group_of, kept.budget_scopes_of) == (whole.group_of, whole.budget_scopes_of)


def test_the_keeper_reads_the_hub_from_the_start_after_a_snapshot_that_does_not_verify(container, caplog):
    store = snapshots(container, "refused-by-keeper")
    save(store)
    rewrite(store, lambda ls: [*ls[:-1], {k: v for k, v in ls[-1].items() if k != "signature"}])
    got = loaded(keeper_for(store))
    assert (got.found, got.positions, got.refused) == (None, {}, True)
    said = [r.getMessage() for r in caplog.records if "snapshot" in r.getMessage()]
    assert len(said) == 1 and "not the coordinator's" in said[0]


def test_a_snapshot_not_saved_for_an_unreadable_key_is_no_storage_outage(container, caplog):
    def no_key() -> Any:
        raise ConfigError("signing.key_file /k cannot be read: No such file or directory")

    store = Snapshots(container, "no-key", HUB, no_key, lambda: signing.VerifyKeys([KEY.public_key()]))
    keeper = keeper_for(store)
    assert keeper.save(keeper.pack(FleetState(), {}))
    wait_for(lambda: keeper.poll() is None and any("snapshot not saved: signing.key_file /k cannot be read"
                                                    in r.getMessage() for r in caplog.records), 30,
             "the keeper to say why the snapshot was not saved")
    assert keeper.storage.reachable and keeper.storage.failures == 0 and keeper.last_snapshot is None


def test_another_coordinator_s_snapshot_is_refused_even_signed_with_a_shared_key(container):
    theirs = snapshots(container, "theirs")
    save(theirs)
    ours = snapshots(container, "ours")
    ours.blob.upload_blob(theirs.blob.download_blob().readall(), overwrite=True)  # copied across
    with pytest.raises(StateError, match="^the snapshot belongs to coordinator 'theirs', not 'ours'$"):
        ours.load()


def leader(container: object, name: str) -> Lease:
    lease = Lease(container, name, "a", "http://127.0.0.1:1", 15)
    wait_for(lambda: lease.try_acquire(), 30, "the lease")  # the first call makes the blob
    return lease


def saved(keeper: Keeper) -> None:
    assert keeper.save(keeper.pack(FleetState(), {"0": Position(7, "70")}))
    wait_for(lambda: keeper.poll() is None and keeper._saving is None, 30, "the save to end")


def test_each_save_is_one_generation_more_and_is_recorded_on_the_leader_blob(container):
    store, lease = snapshots(container, "generations"), leader(container, "generations")
    keeper = Keeper(store, Reach("storage"), "a", generations=lease)
    saved(keeper)
    saved(keeper)
    assert store.load().generation == 2
    assert lease.blob.get_blob_properties().metadata == {"instance": "a", "api": "http://127.0.0.1:1",
                                                         "generation": "2"}
    lease.give_up(release=True)
    again = leader(container, "generations")  # another term: the generation is kept
    assert again.blob.get_blob_properties().metadata["generation"] == "2" and again.generation == 2


def test_an_older_signed_snapshot_put_back_is_refused_and_the_instance_must_not_act(container, caplog):
    store, lease = snapshots(container, "rolled-back"), leader(container, "rolled-back")
    keeper = Keeper(store, Reach("storage"), "a", generations=lease)
    saved(keeper)
    old = store.blob.download_blob().readall()  # generation 1, signed: what an attacker kept
    saved(keeper)
    saved(keeper)
    store.blob.upload_blob(old, overwrite=True)  # put back
    got = loaded(Keeper(store, Reach("storage"), "b", generations=lease))
    assert (got.found, got.positions, got.refused) == (None, {}, True)
    assert got.blocked.startswith("the snapshot blob holds generation 1, older than generation 3 recorded")
    assert any(r.levelname == "ERROR" and "an older snapshot was put back" in r.getMessage()
               for r in caplog.records)
