"""The way out: decisions published to the hub, approval messages put in the VMs' queues, chat.

``publish.Output`` signs and publishes decisions in order through ``hub_producer.HubProducer``
while the term lasts, then wants their messages: ``queue_sender.QueueSender`` retries each approval
until ``messages.ApprovalMessages`` has put it in its VM's queue once, and reports it ``sent``.
``chat`` posts one Teams or Slack message per fleet event (``chat_stages``: each maintenance
event's stages once, however many VMs report it). Every call has a deadline, off the loop.
"""

from __future__ import annotations

from .chat import ChatHook, NewDecisions, Notifier
from .chat_stages import EventStages
from .hub_producer import HubProducer
from .messages import ApprovalMessages
from .publish import Outgoing, Output
from .queue_sender import QueueSender

__all__ = [
    "ApprovalMessages", "ChatHook", "EventStages", "HubProducer", "NewDecisions", "Notifier", "Outgoing",
    "Output", "QueueSender"
]
