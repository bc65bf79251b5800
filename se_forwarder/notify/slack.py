"""Notice -> the JSON body for a Slack *incoming webhook*, in Block Kit.

Per Slack's reference (docs.slack.dev, Block Kit "Blocks" and "Composition objects"; "Sending
messages using incoming webhooks"): the body is ``{"text": ..., "blocks": [...]}``; ``text`` is the
fallback shown in notifications; at most 50 blocks. Blocks used here:

- ``section`` with a ``text`` object (``mrkdwn``, at most 3000 characters), or with ``fields``
  (at most 10 text objects of at most 2000 characters each);
- ``context`` with at most 10 ``elements`` (text objects).

Text objects are ``{"type": "mrkdwn", "text": ...}``; ``&``, ``<`` and ``>`` are escaped as Slack
asks, so an event's text can never mention ``<!channel>`` or forge a link (``<url|text>``; Slack
makes no link of Markdown's ``[text](url)``), and control characters become spaces. Limits are
applied after escaping.
"""

from __future__ import annotations

from typing import Any

from ..printable import strip_controls
from .describe import Notice

MAX_BLOCKS = 50
SECTION_TEXT_CHARS = 3000
FIELD_CHARS = 2000
MAX_FIELDS = 10
CONTEXT_ELEMENTS = 10
FALLBACK_CHARS = 3000


def escape(text: str) -> str:
    """Slack's three control characters, escaped as its formatting reference says (and any control
    character, a line break among them, as a space: text from a VM stays on its line)."""
    return strip_controls(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(notice: Notice) -> dict[str, Any]:
    """``{"text": <fallback>, "blocks": [section, (section), (fields), (context)]}``."""
    title = escape(notice.title)
    headline = f"*{title}*" if "*" not in title else title
    blocks: list[dict[str, Any]] = [_section(headline)]
    if notice.detail:
        blocks.append(_section(escape(notice.detail)))
    facts = notice.facts
    for start in range(0, len(facts), MAX_FIELDS):
        fields = [_mrkdwn(f"*{escape(name)}*\n{escape(value)}", FIELD_CHARS)
                  for name, value in facts[start:start + MAX_FIELDS]]
        blocks.append({"type": "section", "fields": fields})
    if notice.footer:
        blocks.append({"type": "context", "elements": [_mrkdwn(escape(notice.footer), SECTION_TEXT_CHARS)]})
    return {"text": _fit(title, FALLBACK_CHARS), "blocks": blocks[:MAX_BLOCKS]}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text, SECTION_TEXT_CHARS)}


def _mrkdwn(text: str, limit: int) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": _fit(text, limit) or " ", "verbatim": True}


def _fit(text: str, limit: int) -> str:
    """At most ``limit`` characters, never cutting an ``&amp;``-style escape in half."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"
