"""Every CloudEvent type the coordinator reads or writes, by its string: one place for the schema.

The agents' reports are ``com.azure.scheduledevents.<kind>`` (``se_forwarder.model.Kind``); their
registrations ``...identity``; the coordinator's own decisions and records
``com.azure.scheduledevents.coordinator.<kind>`` from the source ``urn:se-forwarder:coordinator:<name>``;
Azure's own feed ``Microsoft.ResourceNotifications.*`` (never from a VM). The fold, the edge, the
decision events, the chat notifications and the demo read these names from here, not from each other.
"""

from __future__ import annotations

from ...model import TYPE_PREFIX, Kind

PREFIX = TYPE_PREFIX  # every report and decision type starts so
DECISION_PREFIX = PREFIX + "coordinator."
DECISION_KINDS = ("approve", "sent", "defer", "breach", "pause", "resume", "hold", "release", "acknowledge",
                  "settle")
TRANSITIONS = (Kind.SCHEDULED, Kind.STARTED, Kind.CANCELED, Kind.COMPLETED)  # what a VM saw of an event
AGENT_TYPES = (*TRANSITIONS, Kind.APPROVED, Kind.PREPARED, Kind.PREPARE_FAILED, Kind.APPROVAL_REJECTED,
               Kind.HEARTBEAT)  # the reports the fold reads (suffixes after PREFIX)
REPORT_TYPES = frozenset(PREFIX + t for t in AGENT_TYPES)
IDENTITY_TYPE = Kind.IDENTITY.type  # an agent's registration
COORDINATOR_SOURCE = "urn:se-forwarder:coordinator:"  # + the coordinator's name
AZURE_TYPES = "microsoft.resourcenotifications."  # Azure's own types (lower case): only its feed hub
FEED_EVENT_TYPE = "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted"
