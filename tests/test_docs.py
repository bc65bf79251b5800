"""The documentation a user navigates: a README that fits on a few screens, links that lead somewhere,
configuration examples that load as copied, and nothing addressed to someone other than the reader.

Links are checked as GitHub renders them: a relative link must name a file of the tree, and a
``#anchor`` a heading of that file, slugged as GitHub does (lower case; punctuation other than
``-`` and ``_`` dropped; each space a ``-``; a repeated heading gets ``-1``, ``-2``...).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from urllib.parse import unquote

import pytest

from se_forwarder import config, metrics
from tests.support.paths import ROOT

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCUMENTS = [README, ROOT / "CONTRIBUTING.md", *PAGES]
MAX_README_LINES = 350

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...
# What a note to a reviewer, a lead or oneself looks like; the docs speak to users and maintainers.
ADDRESSED = re.compile(
    r"\bnotes? (?:for|to) (?:the )?(?:lead|reviewers?|maintainers?)\b"
    r"|\bfor the (?:lead|reviewers?)\b|^\s*(?:[-*]\s*)?(?:lead|reviewers?)\s*:"
    r"|\b(?:TODO|FIXME|XXX)\b",
    re.I | re.M,
)


def doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (as github-slugger makes it)."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link outside code."""
    out = []
    for number, line in prose_lines(path.read_text()):
        line = INLINE_CODE.sub("code", line)
        out += [(number, m.group(1)) for m in LINK.finditer(line)]
    return out


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        where = f"{doc_id(path)}:{number}: {target}"
        linked = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{where}: no such file")
        elif anchor and linked.suffix == ".md" and unquote(anchor) not in anchors(linked):
            problems.append(f"{where}: no heading with the anchor #{anchor} in {doc_id(linked)}")
    return problems


def toml_blocks(path: Path) -> list[str]:
    return re.findall(r"^```toml\n(.*?)^```", path.read_text(), re.S | re.M)


def test_the_slugs_are_githubs() -> None:
    assert slug("`se-forwarder check`") == "se-forwarder-check"
    assert slug("Endpoint discovery (VMs outside a virtual network)") == (
        "endpoint-discovery-vms-outside-a-virtual-network")
    assert slug("OpenTelemetry (OTLP/HTTP): metrics and traces") == (
        "opentelemetry-otlphttp-metrics-and-traces")
    assert slug("cloudevents 2.2 and standardwebhooks 1.1") == "cloudevents-22-and-standardwebhooks-11"
    assert slug("Built-in scenarios (`se-forwarder simulate --list-scenarios`)") == (
        "built-in-scenarios-se-forwarder-simulate---list-scenarios")


def test_the_readme_fits_in_350_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


@pytest.mark.parametrize("path", DOCUMENTS, ids=doc_id)
def test_every_relative_link_and_anchor_leads_somewhere(path: Path) -> None:
    assert not broken_links(path)


@pytest.mark.parametrize("path", DOCUMENTS, ids=doc_id)
def test_nothing_is_addressed_to_a_reviewer_or_lead(path: Path) -> None:
    found = [f"{doc_id(path)}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
             if ADDRESSED.search(line)]
    assert not found


def test_every_page_of_docs_is_linked_from_the_readme_and_links_back() -> None:
    from_readme = {(README.parent / t.partition("#")[0]).resolve() for _, t in links(README)}
    assert PAGES
    assert [doc_id(p) for p in PAGES if p.resolve() not in from_readme] == []
    for page in PAGES:
        if page.name == "architecture.md":
            continue  # the contributors' map of the modules; it has its own way of linking
        targets = {(page.parent / t.partition("#")[0]).resolve() for _, t in links(page)}
        assert README.resolve() in targets, f"{doc_id(page)} has no link back to the README"


@pytest.mark.parametrize("path", DOCUMENTS, ids=doc_id)
def test_every_toml_example_is_valid_toml(path: Path) -> None:
    for block in toml_blocks(path):
        tomllib.loads(block)


@pytest.mark.parametrize("name", ["README.md", "docs/configuration.md", "docs/webhook.md",
                                  "docs/teams-slack.md", "docs/eventhubs.md",
                                  "docs/azure-monitor-logs.md", "docs/monitoring.md",
                                  "docs/coordinator.md"])
def test_the_configuration_examples_load_as_copied(tmp_path: Path, name: str) -> None:
    """An agent's example loads as the agent's configuration; a coordinator's (it has a
    ``[coordinator]`` table) as the coordinator's."""
    from se_forwarder.fleet.coordinator.config import load as load_coordinator

    blocks = toml_blocks(ROOT / name)
    assert blocks
    for number, block in enumerate(blocks):
        path = tmp_path / f"example-{number}.toml"
        path.write_text(block)
        if "coordinator" in tomllib.loads(block):
            load_coordinator(path)
        else:
            config.load(path, env={})


def test_the_metrics_table_lists_every_metric_with_its_type_and_labels() -> None:
    text = (ROOT / "docs" / "monitoring.md").read_text()
    rows = {m.group(1): (m.group(2), m.group(3))
            for m in re.finditer(r"^\| `(se_forwarder_\w+)` \| (\w+) \| [^|]* \| ([^|]*) \|", text, re.M)}
    expected = {m.prometheus_name: (m.kind, ", ".join(f"`{label}`" for label in m.labels) or "-")
                for m in metrics.METRICS}
    assert {name: (kind, labels.strip()) for name, (kind, labels) in rows.items()} == expected
