"""Notice -> the JSON body for a Microsoft Teams *Workflows* webhook ("Post to a channel when a webhook
request is received").

The shape is the one Microsoft documents for sending an Adaptive Card to a Teams webhook
(learn.microsoft.com, "Create and send messages" / "Send Adaptive Cards using an incoming webhook"):
``type`` must be ``"message"``; ``attachments`` is an array of card objects whose ``contentType`` is
``application/vnd.microsoft.card.adaptive`` and whose ``content`` is the card itself. Workflows only
take Adaptive Cards (not the old MessageCard format).

The card (adaptivecards.io schema) is version 1.4, which every Teams client renders, and uses only
1.0 elements: ``TextBlock`` (``text`` required) and ``FactSet`` (``facts`` of ``{title, value}``
strings), with ``fallbackText`` for clients that cannot render it and ``msteams.width = "Full"``.
"""

from __future__ import annotations

from typing import Any

from .describe import Notice

CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
VERSION = "1.4"


def payload(notice: Notice) -> dict[str, Any]:
    """``{"type": "message", "attachments": [{"contentType": ..., "content": <AdaptiveCard>}]}``."""
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": notice.title, "weight": "Bolder", "size": "Medium",
         "color": notice.tone, "wrap": True},
    ]
    if notice.detail:
        body.append({"type": "TextBlock", "text": notice.detail, "wrap": True})
    if notice.facts:
        body.append({"type": "FactSet",
                     "facts": [{"title": name, "value": value} for name, value in notice.facts]})
    if notice.footer:
        body.append({"type": "TextBlock", "text": notice.footer, "size": "Small", "isSubtle": True,
                     "wrap": True})
    card = {
        "$schema": SCHEMA,
        "type": "AdaptiveCard",
        "version": VERSION,
        "fallbackText": notice.title,
        "msteams": {"width": "Full"},
        "body": body,
    }
    return {
        "type": "message",
        "attachments": [{"contentType": CONTENT_TYPE, "contentUrl": None, "content": card}],
    }
