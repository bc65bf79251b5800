"""The coordinator's house stays as its flow: small folders, short functions, and no import circle,
not even one that only type annotations make (``TYPE_CHECKING`` imports, which lint-imports leaves
out). The layers and the pure core's forbidden imports are pyproject.toml's import-linter contracts."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from tests.support.paths import ROOT

COORDINATOR = ROOT / "se_forwarder" / "fleet" / "coordinator"
PACKAGE = "se_forwarder.fleet.coordinator"
MAX_MODULES = 16
MAX_FUNCTION_LINES = 80


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(COORDINATOR.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The coordinator's modules ``name`` imports, at run time or under TYPE_CHECKING."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith(PACKAGE + ".") and target != name and not target.startswith(name + "."):
                out.add(target)
    return out


def test_no_import_circle_among_the_coordinators_modules_even_under_type_checking():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            raise AssertionError("import circle: " + " -> ".join([*trail[trail.index(name):], name]))
        if name in done:
            return
        for target in sorted(graph[name]):
            if not name.startswith(target + "."):  # a package's face importing its own modules
                visit(target, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_no_coordinator_folder_holds_more_than_16_modules():
    count = Counter(path.parent.relative_to(ROOT).as_posix() for path in modules().values()
                    if path.name != "__init__.py")
    assert not {folder: n for folder, n in count.items() if n > MAX_MODULES}


def test_no_coordinator_function_is_over_80_lines():
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in modules().values()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (node.end_lineno or 0) - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"over {MAX_FUNCTION_LINES} lines (split into named parts): {long}"
