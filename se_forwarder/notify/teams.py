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

Every text is inert: a TextBlock and a fact render a subset of Markdown (bold, italic, lists and
``[title](url)`` links), and a VM's name or an event's description is whatever an agent sent, so
``escape`` writes each character that can start markup (the backslash and ``* _ ~ ` [ ] < > &``,
and a list, quote or heading marker that begins the text) with a CommonMark backslash escape, and
turns control characters (line breaks among them) into spaces. A VM named
``[Re-approve](https://...)`` is shown as typed, never as a link.
"""

from __future__ import annotations

import re
from typing import Any

from ..printable import strip_controls
from .describe import Notice

CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
VERSION = "1.4"


_MARKUP = re.compile(r"([\\`*_~\[\]<>&])")
_LEADING = re.compile(r"^(\d{1,9}(?=[.)])|(?=[-+#>]))")


def escape(text: str) -> str:
    """``text`` as Adaptive Card Markdown that renders it literally (the module docstring)."""
    text = _MARKUP.sub(r"\\\1", strip_controls(text).strip(" "))
    return _LEADING.sub(r"\1\\", text, count=1)


def payload(notice: Notice) -> dict[str, Any]:
    """``{"type": "message", "attachments": [{"contentType": ..., "content": <AdaptiveCard>}]}``."""
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": escape(notice.title), "weight": "Bolder", "size": "Medium",
         "color": notice.tone, "wrap": True},
    ]
    if notice.detail:
        body.append({"type": "TextBlock", "text": escape(notice.detail), "wrap": True})
    if notice.facts:
        body.append({"type": "FactSet", "facts": [{"title": escape(name), "value": escape(value)}
                                                  for name, value in notice.facts]})
    if notice.footer:
        body.append({"type": "TextBlock", "text": escape(notice.footer), "size": "Small", "isSubtle": True,
                     "wrap": True})
    card = {
        "$schema": SCHEMA,
        "type": "AdaptiveCard",
        "version": VERSION,
        "fallbackText": strip_controls(notice.title),
        "msteams": {"width": "Full"},
        "body": body,
    }
    return {
        "type": "message",
        "attachments": [{"contentType": CONTENT_TYPE, "contentUrl": None, "content": card}],
    }
