"""``docs/architecture.md`` matches the tree: every module of the package is named there.

A module counts as named when the page gives its path under ``se_forwarder/`` (``outbox/store.py``),
or when one paragraph or table row names both its package (``fleet/coordinator/``, or just
``coordinator/``) and the module (`` `access.py` `` or `` `access` ``). A package's ``__init__.py``
counts as named with its package; a top-level module by its file name (`` `poller.py` ``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGE = ROOT / "se_forwarder"
PAGE = ROOT / "docs" / "architecture.md"
MODULES = sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def blocks(text: str) -> list[str]:
    """Paragraphs, and each table row on its own."""
    found: list[str] = []
    for chunk in re.split(r"\n\s*\n", text):
        rows = [line for line in chunk.splitlines() if line.lstrip().startswith("|")]
        found += rows or [chunk]
    return found


def named(module: Path, text: str, parts: list[str]) -> bool:
    path = module.as_posix()
    if module.parent == Path("."):
        return module.name == "__init__.py" or f"`{module.name}`" in text or f"`{path}`" in text
    if path in text:
        return True
    package = module.parent.as_posix()
    spellings = {f"{package}/", f"`{module.parent.name}/`"}
    for block in parts:
        if not any(s in block for s in spellings):
            continue
        if module.name == "__init__.py" or f"`{module.name}`" in block or f"`{module.stem}`" in block:
            return True
    return False


@pytest.mark.parametrize("module", MODULES, ids=str)
def test_every_module_is_named_in_the_architecture_page(module: Path) -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert named(module, text, blocks(text)), (
        f"se_forwarder/{module.as_posix()} is not named in docs/architecture.md: add it with its one concern")
