"""What the simulated IMDS puts on the wire: api-versions, event fields, rendering, instance metadata.

Everything version-dependent lives here, so that "which field appears in which api-version" is
answered in one place (see ``../shared/docs/scheduled-events-contract.md``).
"""

from __future__ import annotations

import email.utils
import json
import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

#: Scheduled Events api-versions IMDS knows, oldest first. ``{latest}`` is retired (400).
SCHEDULED_EVENTS_VERSIONS: tuple[str, ...] = (
    "2017-03-01",
    "2017-08-01",
    "2017-11-01",
    "2019-01-01",
    "2019-04-01",
    "2019-08-01",
    "2020-07-01",
)
LATEST_VERSION = SCHEDULED_EVENTS_VERSIONS[-1]

#: Instance metadata api-versions IMDS knows (the agent reads compute with 2021-02-01).
INSTANCE_VERSIONS: tuple[str, ...] = (
    "2017-03-01",
    "2017-04-02",
    "2017-08-01",
    "2017-10-01",
    "2017-12-01",
    "2018-02-01",
    "2018-04-02",
    "2018-10-01",
    "2019-02-01",
    "2019-03-11",
    "2019-04-30",
    "2019-06-01",
    "2019-06-04",
    "2019-08-01",
    "2019-08-15",
    "2019-11-01",
    "2020-06-01",
    "2020-07-15",
    "2020-09-01",
    "2020-10-01",
    "2020-12-01",
    "2021-01-01",
    "2021-02-01",
    "2021-03-01",
    "2021-05-01",
    "2021-08-01",
    "2021-10-01",
    "2021-11-01",
    "2021-11-15",
    "2021-12-13",
    "2022-02-01",
    "2022-03-01",
    "2022-07-01",
    "2022-08-01",
    "2022-09-01",
    "2022-11-01",
    "2023-07-01",
    "2023-11-15",
)

EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
EVENT_STATUSES = ("Scheduled", "Started")
EVENT_SOURCES = ("Platform", "User")

#: Field order of an event on the wire (as in the documentation's examples).
EVENT_FIELDS = (
    "EventId",
    "EventType",
    "ResourceType",
    "Resources",
    "EventStatus",
    "NotBefore",
    "Description",
    "EventSource",
    "DurationInSeconds",
)
#: Fields that appeared after the first version, with the version that added them.
FIELD_SINCE: dict[str, str] = {
    "Description": "2019-04-01",
    "EventSource": "2019-08-01",
    "DurationInSeconds": "2020-07-01",
}
#: Event types that appeared after the first version; older versions do not show such events.
TYPE_SINCE: dict[str, str] = {"Preempt": "2017-11-01", "Terminate": "2019-01-01"}
#: Before this version, IaaS resource names carried a leading underscore.
UNDERSCORE_REMOVED_IN = "2017-08-01"

#: Minimum notice per event type, in (simulated) seconds: the default NotBefore distance.
MIN_NOTICE_SECONDS: dict[str, float] = {
    "Freeze": 900,
    "Reboot": 900,
    "Redeploy": 600,
    "Preempt": 30,
    "Terminate": 300,
}
DEFAULT_STARTED_SECONDS = 600.0

DEFAULT_DESCRIPTIONS: dict[str, str] = {
    "Freeze": "Host server is undergoing maintenance.",
    "Reboot": "Virtual machine is going to be restarted for host server maintenance.",
    "Redeploy": "Virtual machine is going to be moved to another host server.",
    "Preempt": "Spot virtual machine is going to be evicted.",
    "Terminate": "Virtual machine is going to be deleted from its scale set.",
}


#: How NotBefore is written: ``rfc1123`` as IMDS does, ``iso8601`` as Microsoft's mock server does.
NOT_BEFORE_FORMATS = ("rfc1123", "iso8601")


def not_before_format_setting(value: Any) -> str:
    """``value`` if it is one of NOT_BEFORE_FORMATS; ValueError naming it otherwise."""
    if value not in NOT_BEFORE_FORMATS:
        raise ValueError(f"not_before_format must be one of {', '.join(NOT_BEFORE_FORMATS)}, "
                         f"got {value!r}")
    return str(value)


def format_rfc1123(epoch: float) -> str:
    """``Mon, 11 Apr 2022 22:26:58 GMT`` for a Unix time (floored to the second, so the event
    never starts before the time shown)."""
    return email.utils.formatdate(math.floor(epoch), usegmt=True)


def format_not_before(epoch: float, not_before_format: str = "rfc1123") -> str:
    """NotBefore in RFC 1123, or in ISO 8601 (``2026-11-25T19:05:25Z``); floored to the second."""
    if not_before_format == "iso8601":
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(math.floor(epoch)))
    return format_rfc1123(epoch)


def parse_rfc1123(text: str) -> float:
    """The Unix time of an RFC 1123 date (or of an ISO 8601 one with a zone, as Microsoft's mock
    server writes NotBefore); ValueError naming the text when it is neither."""
    iso = text[:4].isdigit()
    try:
        parsed = datetime.fromisoformat(text) if iso else email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"NotBefore {text!r} is not an RFC 1123 or ISO 8601 date") from exc
    if parsed.tzinfo is None:
        raise ValueError(f"NotBefore {text!r} has no time zone (expected {'Z' if iso else 'GMT'})")
    return parsed.timestamp()


def version_error(version: str | None, known: Sequence[str]) -> str | None:
    """The 400 message for a missing or unknown api-version, or None when it is known."""
    if not version:
        return "Bad request. api-version was not specified in the request."
    if version not in known:
        return f"Bad request. api-version {version!r} is invalid."
    return None


def newest_versions(known: Sequence[str]) -> list[str]:
    """The three newest versions, as IMDS lists them in a 400 answer."""
    return list(reversed(known[-3:]))


def render_event(event: Mapping[str, Any], version: str) -> dict[str, Any] | None:
    """One event as ``version`` shows it, or None when that version does not know its type."""
    since = TYPE_SINCE.get(event["EventType"])
    if since is not None and version < since:
        return None
    out: dict[str, Any] = {}
    for name in EVENT_FIELDS:
        added = FIELD_SINCE.get(name)
        if added is not None and version < added:
            continue
        out[name] = event[name]
    if version < UNDERSCORE_REMOVED_IN:
        out["Resources"] = ["_" + r for r in event["Resources"]]
    return out


def render_document(incarnation: int, events: Iterable[Mapping[str, Any]], version: str) -> dict[str, Any]:
    """The scheduled-events document as ``version`` shows it."""
    shown = [r for r in (render_event(e, version) for e in events) if r is not None]
    return {"DocumentIncarnation": incarnation, "Events": shown}


# --- instance metadata -------------------------------------------------------------------------

_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/se-forwarder/simulator")
DEFAULT_SUBSCRIPTION_ID = str(uuid.uuid5(_ID_NAMESPACE, "subscription"))
DEFAULT_RESOURCE_GROUP = "se-forwarder-sim"
DEFAULT_LOCATION = "westeurope"


def vm_id_for(name: str) -> str:
    """The stable vmId the simulator gives a VM name (uuid5, the same in every run)."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"vm:{name}"))


def compute_metadata(name: str, index: int, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``/metadata/instance/compute`` for the ``index``-th VM of the simulated availability set."""
    sub = DEFAULT_SUBSCRIPTION_ID
    rg = DEFAULT_RESOURCE_GROUP
    compute: dict[str, Any] = {
        "azEnvironment": "AzurePublicCloud",
        "location": DEFAULT_LOCATION,
        "name": name,
        "offer": "0001-com-ubuntu-server-jammy",
        "osType": "Linux",
        "placementGroupId": "",
        "platformFaultDomain": str(index % 3),
        "platformUpdateDomain": str(index % 5),
        "provider": "Microsoft.Compute",
        "publisher": "Canonical",
        "resourceGroupName": rg,
        "resourceId": (
            f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{name}"
        ),
        "sku": "22_04-lts-gen2",
        "subscriptionId": sub,
        "tags": "environment:simulator",
        "tagsList": [{"name": "environment", "value": "simulator"}],
        "version": "22.04.202401010",
        "vmId": vm_id_for(name),
        "vmScaleSetName": "",
        "vmSize": "Standard_D2s_v5",
        "zone": "",
    }
    if overrides:
        compute.update(overrides)
        # keep resourceId consistent when the group or subscription was overridden
        if "resourceId" not in overrides:
            compute["resourceId"] = (
                f"/subscriptions/{compute['subscriptionId']}/resourceGroups/"
                f"{compute['resourceGroupName']}/providers/Microsoft.Compute/virtualMachines/{name}"
            )
    return compute


def network_metadata(index: int) -> dict[str, Any]:
    """A plausible ``network`` section for ``/metadata/instance``."""
    return {
        "interface": [
            {
                "ipv4": {
                    "ipAddress": [{"privateIpAddress": f"10.0.0.{4 + index}", "publicIpAddress": ""}],
                    "subnet": [{"address": "10.0.0.0", "prefix": "24"}],
                },
                "ipv6": {"ipAddress": []},
                "macAddress": f"000D3A00{index:04X}",
            }
        ]
    }


# --- validation of event fields (control API, scenario files) ---------------------------------

#: Keys the control API and scenario files accept besides the IMDS fields.
CONTROL_KEYS = ("NotBeforeInSeconds", "StartedSeconds")
EVENT_INPUT_KEYS = (*EVENT_FIELDS, *CONTROL_KEYS)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_event_fields(fields: Any) -> dict[str, Any]:
    """A validated copy of event ``fields`` (any subset of EVENT_INPUT_KEYS).

    Raises ValueError with one line naming the offending key; the checks are those of the wire
    format, so that nothing the simulator serves could be rejected by a strict parser.
    """
    if not isinstance(fields, Mapping):
        raise ValueError("event fields must be a JSON object")
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key not in EVENT_INPUT_KEYS:
            raise ValueError(f"unknown event field {key!r} (known: {', '.join(EVENT_INPUT_KEYS)})")
        out[key] = _check_one(key, value)
    if "NotBefore" in out and "NotBeforeInSeconds" in out:
        raise ValueError("give NotBefore or NotBeforeInSeconds, not both")
    return out


def _check_one(key: str, value: Any) -> Any:
    choices = {"EventType": EVENT_TYPES, "EventStatus": EVENT_STATUSES, "EventSource": EVENT_SOURCES}
    if key in choices:
        if value not in choices[key]:
            raise ValueError(f"{key} must be one of {', '.join(choices[key])}, got {value!r}")
        return value
    if key in ("EventId", "ResourceType"):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{key} must be a non-empty string, got {value!r}")
        return value
    if key == "Description":
        if not isinstance(value, str):
            raise ValueError(f"Description must be a string, got {value!r}")
        return value
    if key == "Resources":
        if (
            not isinstance(value, list | tuple)
            or not value
            or not all(isinstance(r, str) and r for r in value)
        ):
            raise ValueError(f"Resources must be a non-empty list of VM names, got {value!r}")
        return list(value)
    if key == "DurationInSeconds":
        if not isinstance(value, int) or isinstance(value, bool) or value < -1:
            raise ValueError(f"DurationInSeconds must be an integer >= -1, got {value!r}")
        return value
    if key == "NotBefore":
        if not isinstance(value, str):
            raise ValueError(f"NotBefore must be an RFC 1123 date string, got {value!r}")
        if value:
            parse_rfc1123(value)
        return value
    # NotBeforeInSeconds, StartedSeconds
    if not _is_number(value) or value < 0:
        raise ValueError(f"{key} must be a number of seconds >= 0, got {value!r}")
    return float(value)


class ApprovalError(ValueError):
    """A StartRequests body that IMDS answers with 400 (malformed, or an unknown EventId)."""


def parse_start_requests(body: bytes) -> list[str]:
    """The EventIds of a POST body ``{"StartRequests": [{"EventId": ...}, ...]}``.

    ApprovalError (IMDS answers 400) when the body is not exactly that shape.
    """
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApprovalError(f"Bad request. The body is not JSON: {exc}") from None
    requests_ = data.get("StartRequests") if isinstance(data, dict) else None
    if not isinstance(requests_, list):
        raise ApprovalError("Bad request. The body needs a StartRequests list.")
    ids: list[str] = []
    for item in requests_:
        event_id = item.get("EventId") if isinstance(item, dict) else None
        if not isinstance(event_id, str) or not event_id:
            raise ApprovalError("Bad request. Every StartRequests entry needs an EventId string.")
        ids.append(event_id)
    return ids
