"""Fixtures for the deployment tests: the tools venv, the parsed Bicep files, an installed prefix.

checkov, pycep-parser and a wheelhouse for building the project's wheel live in their own venv
(their pins conflict with the project's), made by scripts/install-deploy-tools.sh; systemd-analyze
comes from Debian's systemd.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL_SH = REPO / "deploy" / "linux" / "install.sh"
UNIT_SRC = REPO / "deploy" / "linux" / "se-forwarder.service"
TOOLS = Path(os.environ.get("SE_DEPLOY_TOOLS", REPO / ".cache" / "deploy-tools"))
NOT_INSTALLED = "deploy tools missing: run scripts/install-deploy-tools.sh first"

_PARSE_BICEP = r"""
import json, sys
from pathlib import Path
from pycep import BicepParser
out = {}
for path in sorted(Path(sys.argv[1]).rglob("*.bicep")):
    key = path.relative_to(sys.argv[1]).as_posix()
    try:
        out[key] = BicepParser().parse(file_path=path)
    except Exception as exc:  # reported per file by the test
        out[key] = {"__error__": f"{type(exc).__name__}: {exc}"}
json.dump(out, sys.stdout, default=str)
"""


def tool(name: str) -> Path:
    """A command of the tools venv, or skip the test when the tools were never installed."""
    path = TOOLS / "bin" / name
    if not path.exists():
        pytest.skip(NOT_INSTALLED)
    return path


@pytest.fixture(scope="session")
def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip(NOT_INSTALLED + " (it installs the systemd package)")
    return path


@pytest.fixture(scope="session")
def bicep_docs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every .bicep file under bicep/, parsed by pycep-parser, keyed by its path under bicep/.

    Parsing them all costs about ten seconds of a core, so the test workers of one run share it:
    the first parses (holding a lock) and leaves the result in the run's temporary folder, the
    others read it."""
    python = tool("python")
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # one folder for every worker of this run
    with (shared / "bicep-parsed.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        parsed = shared / "bicep-parsed.json"
        if parsed.exists():
            return json.loads(parsed.read_text())
        proc = subprocess.run([str(python), "-c", _PARSE_BICEP, str(REPO / "bicep")],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        written = shared / "bicep-parsed.json.part"
        written.write_text(proc.stdout)
        written.replace(parsed)
        return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built offline (no dependencies; setuptools from the tools' wheelhouse)."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")  # a copy: builds in other workers share REPO/build
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "se_forwarder", source / "se_forwarder",
                    ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [str(tool("python")), "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-index", "--find-links", str(TOOLS / "wheelhouse"),
         "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (built,) = out.glob("se_forwarder-*.whl")
    return built


def run_install(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """deploy/linux/install.sh with these arguments, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return subprocess.run(
        ["bash", str(INSTALL_SH), *map(str, args)],
        capture_output=True, text=True, timeout=timeout, check=False, env=env,
    )


@pytest.fixture(scope="session")
def installed_prefix(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A tree laid down by `install.sh --prefix` with the project's wheel (its deps not needed)."""
    prefix = tmp_path_factory.mktemp("prefix") / "root"
    proc = run_install("--prefix", prefix, "--wheel", wheel, "--no-deps")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return prefix


@pytest.fixture()
def prefix_copy(installed_prefix: Path, tmp_path: Path) -> Path:
    """A private copy of the installed prefix, for tests that change it.

    The venv is hard-linked (fast): these tests may delete it but never write into it.
    """
    copy = tmp_path / "root"
    shutil.copytree(installed_prefix, copy, symlinks=True, ignore=shutil.ignore_patterns("opt"))
    shutil.copytree(installed_prefix / "opt", copy / "opt", symlinks=True, copy_function=os.link)
    return copy

