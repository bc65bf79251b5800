"""The documented payload shapes of a Teams Workflows webhook and a Slack incoming webhook, as checks.

Written from the services' documentation, not from our formatter:

Teams (learn.microsoft.com, "Create and send messages": "Send Adaptive Cards using an incoming
webhook", whose checklist Workflows' "When a Teams webhook request is received" trigger follows;
adaptivecards.io schema explorer):
- ``type`` must be ``"message"``; ``attachments`` is an array of card objects; each has
  ``contentType`` ``application/vnd.microsoft.card.adaptive`` and ``content``, the card;
- the card: ``type`` ``"AdaptiveCard"``, ``version`` (Teams renders up to 1.5), ``body`` an array of
  elements; ``TextBlock`` needs a string ``text``; ``FactSet`` needs ``facts``, each with string
  ``title`` and ``value``; enumerations (``weight``, ``size``, ``color``) take the schema's values;
  ``Action.Submit`` is not supported through webhooks.

Slack (docs.slack.dev, "Sending messages using incoming webhooks", Block Kit "Blocks" and
"Composition objects: text object"):
- the body has ``text`` (the notification fallback, a string) and ``blocks``, at most 50;
- ``section``: ``text`` (a text object, at most 3000 characters) and/or ``fields`` (at most 10 text
  objects of at most 2000 characters); one of the two is required; ``block_id`` at most 255;
- ``context``: ``elements``, 1 to 10, text objects or images;
- ``header``: a ``plain_text`` object of at most 150 characters; ``divider``: nothing else;
- a text object is ``{"type": "plain_text" | "mrkdwn", "text": <at least 1 character>}``;
  ``emoji`` only on ``plain_text``, ``verbatim`` only on ``mrkdwn``.
"""

from __future__ import annotations

from typing import Any

TEAMS_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
TEAMS_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5")
TEXTBLOCK_ENUMS = {
    "weight": {"default", "lighter", "bolder"},
    "size": {"default", "small", "medium", "large", "extralarge"},
    "color": {"default", "dark", "light", "accent", "good", "warning", "attention"},
}
CARD_ELEMENTS = {"TextBlock", "FactSet", "Image", "ImageSet", "Container", "ColumnSet", "RichTextBlock",
                 "Table", "ActionSet", "Media"}
SLACK_BLOCKS = {"section", "context", "header", "divider", "actions", "image", "rich_text", "markdown"}


def teams_problems(body: Any) -> list[str]:
    """Every way ``body`` departs from the documented Teams webhook shape; [] when it fits."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = []
    if body.get("type") != "message":
        problems.append(f'type must be "message", not {body.get("type")!r}')
    attachments = body.get("attachments")
    if not isinstance(attachments, list) or not attachments:
        return [*problems, "attachments must be a non-empty array"]
    for i, attachment in enumerate(attachments):
        where = f"attachments[{i}]"
        if not isinstance(attachment, dict):
            problems.append(f"{where} is not an object")
            continue
        if attachment.get("contentType") != TEAMS_CONTENT_TYPE:
            problems.append(f"{where}.contentType must be {TEAMS_CONTENT_TYPE}")
        problems += _card_problems(attachment.get("content"), f"{where}.content")
    return problems


def _card_problems(card: Any, where: str) -> list[str]:
    if not isinstance(card, dict):
        return [f"{where} is not an object"]
    problems = []
    if card.get("type") != "AdaptiveCard":
        problems.append(f'{where}.type must be "AdaptiveCard"')
    if card.get("version") not in TEAMS_VERSIONS:
        problems.append(f"{where}.version {card.get('version')!r} is not one Teams renders")
    if "fallbackText" in card and not isinstance(card["fallbackText"], str):
        problems.append(f"{where}.fallbackText must be a string")
    body = card.get("body")
    if not isinstance(body, list) or not body:
        return [*problems, f"{where}.body must be a non-empty array"]
    for j, element in enumerate(body):
        problems += _element_problems(element, f"{where}.body[{j}]")
    for k, action in enumerate(card.get("actions") or []):
        if isinstance(action, dict) and action.get("type") == "Action.Submit":
            problems.append(f"{where}.actions[{k}]: Action.Submit is not supported in webhooks")
    return problems


def _element_problems(element: Any, where: str) -> list[str]:
    if not isinstance(element, dict):
        return [f"{where} is not an object"]
    kind = element.get("type")
    if kind not in CARD_ELEMENTS:
        return [f"{where}.type {kind!r} is not an Adaptive Card element"]
    problems = []
    if kind == "TextBlock":
        if not isinstance(element.get("text"), str):
            problems.append(f"{where}.text must be a string")
        for key, allowed in TEXTBLOCK_ENUMS.items():
            if key in element and str(element[key]).lower() not in allowed:
                problems.append(f"{where}.{key} {element[key]!r} is not one of {sorted(allowed)}")
        for key in ("wrap", "isSubtle"):
            if key in element and not isinstance(element[key], bool):
                problems.append(f"{where}.{key} must be true or false")
    if kind == "FactSet":
        facts = element.get("facts")
        if not isinstance(facts, list) or not facts:
            problems.append(f"{where}.facts must be a non-empty array")
        else:
            for n, fact in enumerate(facts):
                if not (isinstance(fact, dict) and isinstance(fact.get("title"), str)
                        and isinstance(fact.get("value"), str)):
                    problems.append(f"{where}.facts[{n}] needs string title and value")
    return problems


def slack_problems(body: Any) -> list[str]:
    """Every way ``body`` departs from Slack's documented incoming-webhook Block Kit shape."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = []
    if not isinstance(body.get("text"), str) or not body["text"]:
        problems.append("text (the notification fallback) must be a non-empty string")
    blocks = body.get("blocks")
    if not isinstance(blocks, list) or not blocks:
        return [*problems, "blocks must be a non-empty array"]
    if len(blocks) > 50:
        problems.append(f"{len(blocks)} blocks; at most 50")
    for i, block in enumerate(blocks):
        problems += _block_problems(block, f"blocks[{i}]")
    return problems


def _block_problems(block: Any, where: str) -> list[str]:
    if not isinstance(block, dict):
        return [f"{where} is not an object"]
    kind = block.get("type")
    if kind not in SLACK_BLOCKS:
        return [f"{where}.type {kind!r} is not a Block Kit block"]
    problems = []
    if "block_id" in block and (not isinstance(block["block_id"], str) or len(block["block_id"]) > 255):
        problems.append(f"{where}.block_id must be a string of at most 255 characters")
    if kind == "section":
        if "text" not in block and "fields" not in block:
            problems.append(f"{where}: a section needs text or fields")
        if "text" in block:
            problems += _text_problems(block["text"], f"{where}.text", 3000)
        if "fields" in block:
            fields = block["fields"]
            if not isinstance(fields, list) or not 1 <= len(fields) <= 10:
                problems.append(f"{where}.fields must hold 1 to 10 text objects")
            else:
                for n, item in enumerate(fields):
                    problems += _text_problems(item, f"{where}.fields[{n}]", 2000)
    elif kind == "context":
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= 10:
            problems.append(f"{where}.elements must hold 1 to 10 elements")
        else:
            for n, item in enumerate(elements):
                if not (isinstance(item, dict) and item.get("type") == "image"):
                    problems += _text_problems(item, f"{where}.elements[{n}]", 3000)
    elif kind == "header":
        problems += _text_problems(block.get("text"), f"{where}.text", 150, plain_only=True)
    return problems


def _text_problems(obj: Any, where: str, limit: int, plain_only: bool = False) -> list[str]:
    if not isinstance(obj, dict):
        return [f"{where} is not a text object"]
    kinds = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
    problems = []
    if obj.get("type") not in kinds:
        problems.append(f"{where}.type must be one of {kinds}")
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        problems.append(f"{where}.text must be a non-empty string")
    elif len(text) > limit:
        problems.append(f"{where}.text has {len(text)} characters; at most {limit}")
    if "emoji" in obj and obj.get("type") != "plain_text":
        problems.append(f"{where}.emoji is only for plain_text")
    if "verbatim" in obj and (obj.get("type") != "mrkdwn" or not isinstance(obj["verbatim"], bool)):
        problems.append(f"{where}.verbatim is a boolean, only for mrkdwn")
    return problems


def texts(body: dict) -> list[str]:
    """Every text a person would read in a Teams or Slack body, in order."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("text", "title", "value", "fallbackText") and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(body)
    return found
