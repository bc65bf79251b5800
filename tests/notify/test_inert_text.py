"""Text from VMs is inert in chat messages: a VM named like a Markdown or Slack link shows as typed.

The Teams card's text is rendered with a CommonMark parser (markdown-it-py; Adaptive Cards render a
CommonMark subset), the Slack body is read as Slack's mrkdwn rules say: neither has a link.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from se_forwarder.notify import render
from se_forwarder.notify.teams import escape
from se_forwarder.printable import strip_controls

from .events import NOW, agent_event, vm
from .shapes import slack_problems, teams_problems

LINK = "[Re-approve](https://evil.example/approve)"
SLACK_LINK = "<https://evil.example/approve|Re-approve>"
COMMONMARK = MarkdownIt("commonmark")


def card_texts(body: dict[str, Any]) -> list[str]:
    out = []
    for block in body["attachments"][0]["content"]["body"]:
        if block["type"] == "TextBlock":
            out.append(block["text"])
        else:
            out += [part for fact in block["facts"] for part in (fact["title"], fact["value"])]
    return out


def inline_tokens(text: str) -> list[Any]:
    return [child for token in COMMONMARK.parse(text) for child in token.children or []]


def rendered_text(text: str) -> str:
    return "".join(t.content for t in inline_tokens(text) if t.type in ("text", "code_inline"))


def test_a_vm_named_like_a_markdown_link_is_no_link_in_a_teams_card() -> None:
    body = render("teams", agent_event("scheduled", machine=vm(name=LINK)), NOW)
    assert body is not None and not teams_problems(body)
    texts = card_texts(body)
    assert any(rendered_text(t).startswith(LINK) for t in texts)
    assert not [t for text in texts for t in inline_tokens(text) if t.type.startswith("link")]


def test_control_characters_in_a_teams_card_become_spaces() -> None:
    body = render("teams", agent_event("scheduled", machine=vm(name="web-3\r\n- [x](https://e)\x1b]8;;")),
                  NOW)
    assert body is not None
    assert all("\n" not in t and "\r" not in t and "\x1b" not in t for t in card_texts(body))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_renders_as_itself_and_never_as_markup(text: str) -> None:
    blocks = COMMONMARK.parse(escape(text))
    assert [b.type for b in blocks] in ([], ["paragraph_open", "inline", "paragraph_close"])
    assert all(t.type == "text" for t in inline_tokens(escape(text)))
    assert rendered_text(escape(text)).strip() == strip_controls(text).strip()


def test_a_vm_named_like_a_link_is_no_link_in_a_slack_message() -> None:
    name = f"{LINK} {SLACK_LINK} <!channel>\r\nfake line"
    body = render("slack", agent_event("scheduled", machine=vm(name=name)), NOW)
    assert body is not None and not slack_problems(body)
    assert "\n" not in body["blocks"][0]["text"]["text"] and "\n" not in body["text"]
    text = str(body)
    assert "<https://" not in text and "<!channel>" not in text
    assert "&lt;https://evil.example/approve|Re-approve&gt;" in text
