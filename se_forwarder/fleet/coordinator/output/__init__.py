"""The way out: decisions published to the hub, approval messages put in the VMs' queues, chat.

``publish.Output`` signs and publishes decisions in order through ``hub_producer.HubProducer``
while the term lasts, then wants their messages: ``queue_sender.QueueSender`` retries each approval
until ``messages.ApprovalMessages`` has put it in its VM's queue once, and reports it ``sent``.
``chat`` posts one Teams or Slack message per fleet event (``chat_stages``: each maintenance
event's stages once, however many VMs report it). Every call has a deadline, off the loop.
"""
