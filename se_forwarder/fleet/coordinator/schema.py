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
                  "confirm", "settle")
TRANSITIONS = (Kind.SCHEDULED, Kind.STARTED, Kind.CANCELED, Kind.COMPLETED)  # what a VM saw of an event
AGENT_TYPES = (*TRANSITIONS, Kind.APPROVED, Kind.PREPARED, Kind.PREPARE_FAILED, Kind.APPROVAL_REJECTED,
               Kind.HEARTBEAT, Kind.RECOVERED)  # the reports the fold reads (suffixes after PREFIX)
REPORT_TYPES = frozenset(PREFIX + t for t in AGENT_TYPES)
IDENTITY_TYPE = Kind.IDENTITY.type  # an agent's registration
COORDINATOR_SOURCE = "urn:se-forwarder:coordinator:"  # + the coordinator's name
#: Azure's own types (prefixes, lower case): only its feed hub carries them.
AZURE_TYPES = ("microsoft.resourcenotifications.", "microsoft.maintenance/")
FEED_EVENT_TYPE = "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted"
#: Both spellings Microsoft's Event Grid page gives a scheduled event's type (its sample's, its field
#: table's): the feed's edge tells a scheduled event by ``data.resourceInfo.type``, not by this.
FEED_EVENT_TYPES = (FEED_EVENT_TYPE, "microsoft.maintenance/scheduledevents/write")
SCHEDULED_EVENT_RESOURCE = "microsoft.maintenance/scheduledevents"  # data.resourceInfo.type (any case)
#: The other Resource Notifications topic on the same feed: Resource Health. Its availability changes
#: are read (edge/azure_facts.py); its other kinds (annotations) are ``unread``.
HEALTH_TYPES = "microsoft.resourcenotifications.healthresources."
AVAILABILITY_EVENT_TYPE = "Microsoft.ResourceNotifications.HealthResources.AvailabilityStatusChanged"
AVAILABILITY_RESOURCE = "microsoft.resourcehealth/availabilitystatuses"  # data.resourceInfo.type (any case)
