"""Every module of the package stays small enough to read in one sitting: at most 400 lines."""

from __future__ import annotations

from tests.support.paths import ROOT

PACKAGE = ROOT / "se_forwarder"
MAX_LINES = 400


def test_no_module_of_the_package_is_over_400_lines():
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not too_long, f"over {MAX_LINES} lines (split along its concerns): {too_long}"
