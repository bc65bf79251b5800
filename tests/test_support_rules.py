"""The test tree's own rule: what tests share lives in tests/support/ (or a package's helper
module), so no test module imports another test module."""

from __future__ import annotations

import ast

from tests.support.paths import ROOT

TESTS = ROOT / "tests"


def imported_test_modules(source: str, package: str) -> list[str]:
    """The test modules (``test_*``) that code in ``package`` imports, as ``line N: dotted.name``.
    Relative imports are resolved against ``package``; ``from pkg import test_x`` counts too."""
    parts = package.split(".")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            modules = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for module in modules:
            names = module.split(".")
            if names[-1].startswith("test_") and not any(n.startswith("test_") for n in names[:-1]):
                found.append(f"line {node.lineno}: {module}")
    return found


def test_no_test_module_imports_another_test_module():
    offenders = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        package = ".".join(path.relative_to(ROOT).parts[:-1])
        if found := imported_test_modules(path.read_text(), package):
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}, "move what they share into tests/support/ or the package's helper module"


def test_the_rule_sees_relative_absolute_and_package_imports_of_test_modules():
    source = (
        "from .test_rolling import Timeline\n"
        "from tests.coordinator.test_decide import SET, avset\n"
        "from tests.deploy import test_systemd_unit\n"
        "from . import test_ha\n"
        "import tests.webhook.test_delivery\n"
        "from .fleet import Fleet\n"
        "from tests.support.waiting import wait_for\n"
        "from tests.support.cli import cli\n"
        "def helper():\n"
        "    from ..coordinator.test_fold import T0\n"
    )
    assert imported_test_modules(source, "tests.fleet_coordinator") == [
        "line 1: tests.fleet_coordinator.test_rolling",
        "line 2: tests.coordinator.test_decide",
        "line 3: tests.deploy.test_systemd_unit",
        "line 4: tests.fleet_coordinator.test_ha",
        "line 5: tests.webhook.test_delivery",
        "line 10: tests.coordinator.test_fold",
    ]
