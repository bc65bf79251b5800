"""Approval messages sent until they are sent, each once (sending.py), against a real Azurite queue.

The coordinator's own Sender (signing with a key made here, the Azure SDK's queue client) puts the
messages in Azurite; a test stops Azurite's process (SIGSTOP) to make the queue service hang the
way a paused or overloaded one does, and counts the messages the queue holds afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator.azure import Queues, Reach
from se_forwarder.fleet.coordinator.config import Access, QueueSettings
from se_forwarder.fleet.coordinator.decide import VmRef
from se_forwarder.fleet.coordinator.output import ApprovalMessages as Sender
from se_forwarder.fleet.coordinator.output import QueueSender as Sending
from se_forwarder.fleet.coordinator.output.queue_sender import DEADLINE
from se_forwarder.fleet.coordinator.signer import Approval, Signer
from tests.azurite import Azurite, find_binary
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(find_binary("queue") is None,
                                reason="Azurite is not installed (scripts/test installs it)")

SOURCE = "urn:se-forwarder:coordinator:test"
ENV = "SENDING_TEST_QUEUES"


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    with tempfile.TemporaryDirectory(prefix="azurite-") as workdir, \
            Azurite("queue", workdir=Path(workdir)) as server:
        yield server


class Scene:
    """A Sending over the real queue; ``sent`` records every on_sent call."""

    def __init__(self, azurite: Azurite, folder: Path, vm: str) -> None:
        key = folder / "signing.key"
        key.write_bytes(signing.private_key_pem(signing.generate_private_key()))
        access = Access("connection-string", connection_string_env=ENV)  # the test sets it
        queues = Queues(QueueSettings(azurite.endpoint, "se-approvals-{vm_name}", access))
        self.queue = azurite.client(f"se-approvals-{vm}")
        self.queue.create_queue()
        self.sent: list[tuple[str, str, int]] = []
        self.published = threading.Event()
        self.published.set()
        self.reach = Reach("queues")
        sender = Sender(queues, Signer(str(key), SOURCE), "se-approvals-{vm_name}", 900)
        self.sending = Sending(sender, self.reach, lambda _term: True, self.on_sent,
                               lambda _id: self.published.is_set())
        self.sending.start()
        self.approval = Approval(f"E-{vm}/coordinator/approve/1", f"E-{vm}", VmRef(vm, "", "g"), "fits")

    def on_sent(self, approval: Approval, queue: str, _when: float, term: int) -> None:
        self.sent.append((approval.id, queue, term))

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(m.content) for m in self.queue.peek_messages(max_messages=32)]

    def close(self) -> None:
        self.sending.close()


@pytest.fixture
def scene(azurite: Azurite, tmp_path: Path, request: pytest.FixtureRequest,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    monkeypatch.setenv(ENV, azurite.connection_string)
    made = Scene(azurite, tmp_path, f"vm-{request.node.name[-20:].replace('_', '-').strip('-')}")
    yield made
    made.close()


def test_a_message_is_sent_under_its_decision_id_and_reported_sent(scene: Scene) -> None:
    scene.sending.want([scene.approval], 1)
    wait_for(lambda: scene.sent, 10, "the message to be sent")
    assert scene.sent == [(scene.approval.id, scene.queue.queue_name, 1)]
    (message,) = scene.messages()
    assert message["id"] == scene.approval.id and message["data"]["EventId"] == scene.approval.event_id


def test_a_queue_that_hangs_gets_the_message_once_when_it_answers_again(scene: Scene,
                                                                        azurite: Azurite) -> None:
    assert azurite.proc is not None
    os.kill(azurite.proc.pid, signal.SIGSTOP)
    try:
        scene.sending.want([scene.approval], 1)
        wait_for(lambda: scene.reach.overdue, DEADLINE + 10, "the attempt to be overdue")
        assert not scene.reach.reachable and scene.sent == []
        time.sleep(4)  # long past the first retry's backoff: a second copy would be under way by now
    finally:
        os.kill(azurite.proc.pid, signal.SIGCONT)
    wait_for(lambda: scene.sent, 30, "the message to be reported sent")
    assert [m["id"] for m in scene.messages()] == [scene.approval.id]
    assert scene.reach.reachable and len(scene.sent) == 1


def test_nothing_is_sent_before_the_decision_is_on_the_hub(scene: Scene) -> None:
    scene.published.clear()
    scene.sending.want([scene.approval], 1)
    time.sleep(1.5)
    assert scene.messages() == [] and scene.sent == []
    scene.published.set()
    scene.sending.wake()
    wait_for(lambda: scene.sent, 10, "the message to be sent once published")
    assert len(scene.messages()) == 1


def test_an_approval_no_longer_wanted_is_not_sent(scene: Scene) -> None:
    scene.published.clear()
    scene.sending.want([scene.approval], 1)
    scene.sending.want([], 1)  # held, paused, echoed ... before it could go out
    scene.published.set()
    scene.sending.wake()
    time.sleep(1.5)
    assert scene.messages() == [] and scene.sending.pending() == 0


def test_an_approval_sent_in_an_earlier_term_is_reported_again_not_sent_again(scene: Scene) -> None:
    scene.sending.want([scene.approval], 1)
    wait_for(lambda: scene.sent, 10, "the message to be sent")
    scene.sending.want([scene.approval], 2)  # the sent record of term 1 never reached the hub
    assert [term for _, _, term in scene.sent] == [1, 2]
    assert len(scene.messages()) == 1


def test_a_message_sent_as_its_term_ended_is_reported_in_the_next_though_not_wanted(scene: Scene) -> None:
    scene.sending.want([scene.approval], 1)
    wait_for(lambda: scene.sent, 10, "the message to be sent")
    scene.sending.want([], 2)  # echoed by its agent before the next term's first pass
    scene.sending.want([], 2)
    assert [term for _, _, term in scene.sent] == [1, 2]
    assert len(scene.messages()) == 1


def test_a_sent_record_not_published_while_the_instance_paused_acting_is_reported_again_in_its_term(
        scene: Scene) -> None:
    scene.sending.want([scene.approval], 1)
    wait_for(lambda: scene.sent, 10, "the message to be sent")
    scene.sending.unreported(scene.approval.id)  # the lease was not renewed for a moment: not published
    scene.sending.want([], 1)  # acting again in the same term, the agent having echoed meanwhile
    scene.sending.want([], 1)
    assert [term for _, _, term in scene.sent] == [1, 1]
    assert len(scene.messages()) == 1


def test_a_sent_record_not_published_twice_after_its_event_ended_is_reported_until_it_is(
        scene: Scene) -> None:
    scene.sending.want([scene.approval], 1)
    wait_for(lambda: scene.sent, 10, "the message to be sent")
    scene.sending.unreported(scene.approval.id)  # the lease lapsed as the message went out
    scene.sending.want([], 2)  # the event ended meanwhile: no longer wanted
    scene.sending.unreported(scene.approval.id)  # not acting yet in term 2 either
    scene.sending.want([], 2)
    scene.sending.want([], 2)  # published this time: not reported a third time
    assert [term for _, _, term in scene.sent] == [1, 2, 2]
    assert len(scene.messages()) == 1
