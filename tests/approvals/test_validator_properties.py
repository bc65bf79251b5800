"""The approval-message validator under attack: malformed, forged (other Ed25519 keys, HMAC as
earlier versions signed, a wrong keyid) and mutated messages, and not one is accepted; a message
signed by a configured key is always accepted (so the property is not vacuous). And the bounds on a
message's life: ``future``, ``stale`` and ``too-long`` exactly where the rule puts them."""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from se_forwarder.approvals import signing
from se_forwarder.approvals.messages import APPROVE, REJECT, validate
from se_forwarder.model import parse_document
from se_forwarder.timestamps import rfc3339

KEY = signing.generate_private_key()
OLD_KEY = signing.generate_private_key()  # still configured (rotation)
VERIFY_KEYS = signing.VerifyKeys([KEY.public_key(), OLD_KEY.public_key()])
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SCHEDULED_ID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"
STARTED_ID = "0A1B2C3D-0000-4000-8000-000000000001"
GONE_ID = "0A1B2C3D-0000-4000-8000-000000000002"
USED_ID = "already-processed-message"
DOCUMENT = parse_document({
    "DocumentIncarnation": 7,
    "Events": [
        {"EventId": SCHEDULED_ID, "EventType": "Freeze", "ResourceType": "VirtualMachine",
         "Resources": ["vm0"], "EventStatus": "Scheduled", "NotBefore": "Sun, 01 Mar 2026 12:10:00 GMT",
         "EventSource": "Platform", "DurationInSeconds": 5},
        {"EventId": STARTED_ID, "EventType": "Reboot", "ResourceType": "VirtualMachine",
         "Resources": ["vm0"], "EventStatus": "Started", "NotBefore": "",
         "EventSource": "Platform", "DurationInSeconds": -1},
    ],
})


def verdict(body: str | bytes):
    return validate(body, keys=VERIFY_KEYS, now=NOW, document=DOCUMENT, vm_name="vm0",
                    seen_before=lambda mid: mid == USED_ID,
                    event_was_seen=lambda eid: eid in (SCHEDULED_ID, STARTED_ID, GONE_ID))


def good(**data: Any) -> dict[str, Any]:
    message = signing.new_message(SCHEDULED_ID, source="urn:coordinator", key=KEY,
                                  expires_at=NOW + timedelta(minutes=10), reason="maintenance",
                                  vm_name="vm0", now=NOW - timedelta(seconds=1), message_id="m-1")
    if data:
        message["data"].update(data)
        message = signing.sign(message, KEY)
    return message


def test_the_unmodified_message_is_accepted():
    assert verdict(signing.encode(good())).outcome == APPROVE


def test_a_message_signed_with_an_older_configured_key_is_accepted():
    assert verdict(signing.encode(signing.sign(good(), OLD_KEY))).outcome == APPROVE


def test_a_message_whose_keyid_names_no_configured_key_says_which_keys_are():
    result = verdict(signing.encode(signing.sign(good(), signing.generate_private_key())))
    assert result.code == "bad-signature"
    assert "is not a configured verify key" in result.detail
    assert signing.keyid(KEY) in result.detail


def test_member_order_and_whitespace_do_not_matter():
    message = good()
    text = json.dumps(dict(reversed(list(message.items()))), indent=3)
    assert verdict(text).outcome == APPROVE


# -- strategies -------------------------------------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers() | st.text(max_size=40)
                | st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)

garbage = st.one_of(
    st.binary(max_size=600),
    st.text(max_size=600),
    st.sampled_from(['{"data": NaN}', '{"id": Infinity}', '{"a": 1, "a": 2}', "[" * 5000, "{}",
                     '{"signature": "' + "A" * 44 + '"}', "1" * 5000]),
    json_values.map(json.dumps),
    st.dictionaries(st.sampled_from(["specversion", "type", "id", "source", "time", "data",
                                     "signature", "datacontenttype"]), json_values)
    .map(json.dumps),
)


other_keys = st.binary(min_size=32, max_size=32).map(Ed25519PrivateKey.from_private_bytes).filter(
    lambda k: signing.keyid(k) not in VERIFY_KEYS)


@st.composite
def forged(draw) -> str:
    """Well-formed messages signed with an Ed25519 key the agent does not have: with its own
    keyid, or claiming a configured key's keyid."""
    key = draw(other_keys)
    event_id = draw(st.sampled_from([SCHEDULED_ID, STARTED_ID, GONE_ID, "NOT-AN-EVENT"]))
    message = signing.new_message(event_id, source=draw(st.text(min_size=1, max_size=30)), key=key,
                                  expires_at=NOW + timedelta(minutes=5), now=NOW,
                                  message_id=draw(st.text(min_size=1, max_size=30)), vm_name="vm0")
    if draw(st.booleans()):  # claims to be the coordinator's key
        del message["signature"]
        message["keyid"] = draw(st.sampled_from(VERIFY_KEYS.ids))
        message["signature"] = base64.b64encode(key.sign(signing.canonical(message))).decode()
    return signing.encode(message)


@st.composite
def hmac_signed(draw) -> str:
    """The shared-key HMAC-SHA256 signatures of earlier versions, made with anything an attacker
    could know (the public keys, their keyids) or guess, with and without a keyid."""
    message = good()
    del message["signature"]
    if draw(st.booleans()):
        del message["keyid"]
    secret = draw(st.sampled_from([signing.raw_public(KEY), signing.raw_public(OLD_KEY),
                                   signing.keyid(KEY).encode(), b""]) | st.binary(max_size=64))
    digest = hmac.new(secret, signing.canonical(message), hashlib.sha256).digest()
    message["signature"] = base64.b64encode(digest if draw(st.booleans()) else digest * 2).decode()
    return signing.encode(message)


@st.composite
def wrong_keyid(draw) -> str:
    """Signed by a configured key, naming the other configured key (or no valid keyid)."""
    message = good()
    del message["signature"]
    message["keyid"] = draw(st.sampled_from([signing.keyid(OLD_KEY), signing.keyid(KEY).upper(),
                                             signing.keyid(KEY)[:15], ""]) | st.text(max_size=20))
    signer = KEY if message["keyid"] == signing.keyid(OLD_KEY) else draw(st.sampled_from([KEY, OLD_KEY]))
    message["signature"] = base64.b64encode(signer.sign(signing.canonical(message))).decode()
    return signing.encode(message)


PATHS = [("specversion",), ("type",), ("id",), ("source",), ("time",), ("datacontenttype",),
         ("data",), ("data", "EventId"), ("data", "ExpiresAt"), ("data", "Reason"),
         ("data", "VmName"), ("signature",), ("keyid",)]


@st.composite
def mutated(draw) -> str:
    """The accepted message with one change made after signing (value, removal, addition)."""
    message = good()
    kind = draw(st.sampled_from(["replace", "delete", "add", "signature", "truncate"]))
    if kind == "truncate":
        text = signing.encode(message)
        return text[: draw(st.integers(0, len(text) - 1))]
    if kind == "signature":
        raw = bytearray(base64.b64decode(message["signature"]))
        index = draw(st.integers(0, len(raw) - 1))
        raw[index] ^= draw(st.integers(1, 255))
        message["signature"] = base64.b64encode(bytes(raw)).decode()
        return signing.encode(message)
    if kind == "add":
        name = draw(st.text(min_size=1, max_size=12).filter(lambda n: n not in message))
        message[name] = draw(json_values)
        return signing.encode(message)
    path = draw(st.sampled_from(PATHS))
    parent = message if len(path) == 1 else message[path[0]]
    if kind == "delete":
        del parent[path[-1]]
    else:
        old = copy.deepcopy(parent[path[-1]])
        parent[path[-1]] = draw(json_values.filter(lambda v: v != old))
    return signing.encode(message)


@st.composite
def authentic_but_refused(draw) -> str:
    """Correctly signed, and still not approvable: expired, replayed, Started, gone, wrong VM..."""
    message = good()
    case = draw(st.sampled_from(["expired", "replayed", "started", "gone", "wrong-vm", "type",
                                 "specversion", "far-future", "no-data", "future-time"]))
    if case == "expired":
        seconds = draw(st.integers(0, 10**6))
        message["data"]["ExpiresAt"] = rfc3339(NOW - timedelta(seconds=seconds), milliseconds=True)
    elif case == "replayed":
        message["id"] = USED_ID
    elif case == "started":
        message["data"]["EventId"] = STARTED_ID
    elif case == "gone":
        message["data"]["EventId"] = GONE_ID
    elif case == "wrong-vm":
        message["data"]["VmName"] = draw(st.text(min_size=1, max_size=20).filter(lambda v: v != "vm0"))
    elif case == "type":
        message["type"] = draw(st.text(max_size=40).filter(lambda t: t != signing.APPROVE_TYPE))
    elif case == "specversion":
        message["specversion"] = draw(json_values.filter(lambda v: v != "1.0"))
    elif case == "far-future":
        days = draw(st.integers(2, 900))
        message["data"]["ExpiresAt"] = rfc3339(NOW + timedelta(days=days), milliseconds=True)
    elif case == "no-data":
        del message["data"]
    else:
        message["time"] = rfc3339(NOW + timedelta(minutes=draw(st.integers(6, 10**5))), milliseconds=True)
    message = signing.sign(message, KEY)
    text = signing.encode(message)
    if draw(st.booleans()):
        text = base64.b64encode(text.encode()).decode()  # the base64 form is read too
    return text


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(garbage, forged(), hmac_signed(), wrong_keyid(), mutated(), authentic_but_refused()))
def test_no_malformed_forged_or_mutated_message_is_accepted(body):
    result = verdict(body)
    assert result.outcome != APPROVE, (body, result)
    if result.outcome == REJECT:
        assert result.code and result.detail  # always a reason


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.text(max_size=12).filter(lambda k: k not in ("signature", "keyid")),
                       json_values, max_size=6),
       st.sampled_from([KEY, OLD_KEY]), other_keys)
def test_verification_accepts_exactly_what_a_configured_key_signed(members, configured, other):
    """Any content: signed by a configured key it verifies; by any other key it does not, not
    even under the configured key's keyid; and no change after signing survives."""
    signed = signing.sign(members, configured)
    assert signing.verify(signed, VERIFY_KEYS)
    assert not signing.verify(signing.sign(members, other), VERIFY_KEYS)
    impostor = {**members, "keyid": signing.keyid(configured)}
    impostor["signature"] = base64.b64encode(other.sign(signing.canonical(impostor))).decode()
    assert not signing.verify(impostor, VERIFY_KEYS)
    assert not signing.verify({**signed, "x-added": 1}, VERIFY_KEYS)


# -- the bounds on a message's life -------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(sent=st.integers(-3 * 86400, 2 * 86400), lifetime=st.integers(-3600, 3 * 86400))
def test_time_and_lifetime_bounds_refuse_exactly_what_the_rule_says(sent, lifetime):
    """``time`` more than 5 min ahead: future; older than 24 h: stale; ``ExpiresAt - time`` over
    24 h: too-long (in that order); inside the bounds none of these three."""
    made = NOW + timedelta(seconds=sent)
    message = signing.new_message(SCHEDULED_ID, source="urn:coordinator", key=KEY, vm_name="vm0",
                                  expires_at=made + timedelta(seconds=lifetime), now=made,
                                  message_id="m-life")
    result = verdict(signing.encode(message))
    if sent > 300:
        expected = "future"
    elif sent < -86400:
        expected = "stale"
    elif lifetime > 86400:
        expected = "too-long"
    else:
        assert result.code not in ("future", "stale", "too-long"), result
        if sent + lifetime > 0:  # not expired: approved
            assert result.outcome == APPROVE, result
        return
    assert (result.outcome, result.code) == (REJECT, expected), result
    assert result.authentic and result.message_id == "m-life"


def test_a_message_with_a_distant_expiry_is_refused_even_in_its_last_day():
    """Made long ago with an ExpiresAt far ahead: once a valid window, now refused."""
    made = NOW - timedelta(days=30)
    message = signing.new_message(SCHEDULED_ID, source="urn:coordinator", key=KEY, vm_name="vm0",
                                  expires_at=NOW + timedelta(hours=1), now=made)
    assert verdict(signing.encode(message)).code == "stale"
    made = NOW - timedelta(hours=1)
    message = signing.new_message(SCHEDULED_ID, source="urn:coordinator", key=KEY, vm_name="vm0",
                                  expires_at=made + timedelta(hours=24, seconds=1), now=made)
    assert verdict(signing.encode(message)).code == "too-long"
