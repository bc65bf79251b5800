"""The simulator's routes depend on the server's interface (``simulator/host.py``), never on the
server itself, not even for type annotations: the server imports its routes, not the other way
round."""

from __future__ import annotations

import ast

import pytest

from se_forwarder.simulator.control_routes import ControlApi
from se_forwarder.simulator.host import SimulatorHost
from se_forwarder.simulator.server import SimulatorServer
from tests.support.paths import ROOT

ROUTES = ("imds_routes.py", "control_routes.py", "host.py")


def _imported_modules(path: str) -> set[str]:
    tree = ast.parse((ROOT / "se_forwarder" / "simulator" / path).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):  # every import, under TYPE_CHECKING too
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("path", ROUTES)
def test_routes_never_import_the_server(path: str) -> None:
    assert "se_forwarder.simulator.server" not in _imported_modules(path)


def test_the_server_is_the_interface_its_routes_are_written_against() -> None:
    server: SimulatorHost = SimulatorServer()  # mypy checks the members; this checks they run
    api = ControlApi(server)
    assert api.settings()["vm_names"] == ["vm0"]
    assert server.admit("127.0.0.1", "vm0")
