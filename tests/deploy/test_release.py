"""scripts/release and what install.sh makes of its artifacts: a wheel fetched by URL from a local
HTTP server (standing in for the storage account or web server that hosts a release) is installed
only when its SHA-256 is the release's, and nothing is ever resolved by a bare name."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from .conftest import REPO, TOOLS, run_install, tool

VENV_PYTHON = Path("opt/se-forwarder/venv/bin/python")


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scripts/release run as a maintainer would, offline: setuptools from the tools' wheelhouse."""
    out = tmp_path_factory.mktemp("dist")
    env = {**{k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(TOOLS / "wheelhouse")}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "release"), "--out", str(out),
                           "--python", str(tool("python"))],
                          capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def sums(release: Path) -> dict[str, str]:
    out = {}
    for line in (release / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ", 1)
        out[name] = digest
    return out


def wheel_of(release: Path) -> str:
    (name,) = [n for n in sums(release) if n.endswith(".whl")]
    return name


@pytest.fixture()
def served(release: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A copy of the release served over HTTP on 127.0.0.1 (the copy may be tampered with)."""
    root = tmp_path / "www"
    shutil.copytree(release, root)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_release_holds_the_wheel_and_installer_files_with_their_sums(release: Path) -> None:
    listed = sums(release)
    assert set(listed) == {
        wheel_of(release), "linux/install.sh", "linux/se-forwarder.service",
        "linux/10-restart-backoff.conf", "linux/se-forwarder-coordinator.service",
        "linux/coordinator.toml", "windows/install.ps1",
    }
    for name, digest in listed.items():
        assert hashlib.sha256((release / name).read_bytes()).hexdigest() == digest, name
    assert (release / "linux/install.sh").read_bytes() == (REPO / "deploy/linux/install.sh").read_bytes()
    check = subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=release,
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    params = json.loads((release / "release.parameters.json").read_text())["parameters"]
    assert params["wheelFile"]["value"] == wheel_of(release)
    assert params["releaseSums"]["value"] == (release / "SHA256SUMS").read_text()


def test_installer_installs_the_release_wheel_by_url_with_its_sha256(
        release: Path, served: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = served
    name = wheel_of(release)
    prefix = tmp_path / "root"
    proc = run_install("--prefix", prefix, "--wheel", f"{base}/{name}?sv=2024&sig=SECRET",
                       "--sha256", sums(release)[name], "--no-deps")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version = subprocess.run([str(prefix / VENV_PYTHON), "-c",
                              "import importlib.metadata as m; print(m.version('se-forwarder'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == name.split("-")[1]
    assert "SECRET" not in proc.stdout + proc.stderr  # a SAS token in the URL is never printed
    again = run_install("--prefix", prefix, "--wheel", f"{base}/{name}?sv=2024&sig=SECRET",
                        "--sha256", sums(release)[name], "--no-deps")
    assert again.returncode == 0 and "nothing to change" in again.stdout


def test_a_tampered_wheel_is_refused_with_one_line_and_nothing_installed(
        release: Path, served: tuple[str, Path], tmp_path: Path) -> None:
    base, root = served
    name = wheel_of(release)
    with (root / name).open("ab") as f:
        f.write(b"\0")  # one byte more: the same name, another file
    prefix = tmp_path / "root"
    proc = run_install("--prefix", prefix, "--wheel", f"{base}/{name}", "--sha256", sums(release)[name],
                       "--no-deps")
    assert proc.returncode != 0
    (last,) = proc.stderr.strip().splitlines()
    assert last.startswith(f"install.sh: error: {name}: SHA-256 is ")
    assert last.endswith(f"not {sums(release)[name]} (--sha256): refusing to install it")
    assert not (prefix / "opt").exists()


def test_a_local_wheel_that_does_not_match_its_sha256_is_refused(release: Path, tmp_path: Path) -> None:
    proc = run_install("--prefix", tmp_path / "root", "--wheel", release / wheel_of(release),
                       "--sha256", "0" * 64, "--no-deps")
    assert proc.returncode != 0
    assert "refusing to install it" in proc.stderr.strip().splitlines()[-1]


def test_nothing_is_resolved_by_a_bare_name_from_the_public_index(tmp_path: Path) -> None:
    cases = {
        (): "install.sh: error: nothing to install: give --wheel FILE|URL --sha256 HEX",
        ("--package", "se-forwarder[eventhubs,queue]==0.1.0"):
            "install.sh: error: --package se-forwarder[eventhubs,queue]==0.1.0 would be resolved on the "
            "public index",
        ("--wheel", "https://example.com/se_forwarder-0.1.0-py3-none-any.whl"):
            "install.sh: error: --wheel https://example.com/se_forwarder-0.1.0-py3-none-any.whl needs "
            "--sha256 HEX",
        ("--wheel", "http://example.com/w.whl", "--sha256", "0" * 64):
            "install.sh: error: --wheel http://example.com/w.whl: only https:// URLs",
        ("--package", "se-forwarder==0.1.0", "--index-url", "http://pypi.internal/simple"):
            "install.sh: error: --index-url must be https://",
        ("--wheel", "w.whl", "--sha256", "abc"): "install.sh: error: --sha256 needs 64 hex digits, not 3",
    }
    for args, message in cases.items():
        proc = run_install("--prefix", tmp_path / "root", *args)
        assert proc.returncode != 0, args
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(message), (args, line)
    assert not (tmp_path / "root").exists()


def test_a_private_index_is_the_only_index_pip_is_given(served: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = served  # no index is served there: pip must fail without trying any other
    proc = run_install("--prefix", tmp_path / "root", "--dry-run", "--package", "se-forwarder==0.1.0",
                       "--index-url", f"{base}/simple/?token=SECRET")
    assert proc.returncode == 0, proc.stderr
    (pip,) = [line for line in proc.stdout.splitlines() if "would pip install" in line]
    assert f"--index-url {base}/simple/ " in pip + " " and "SECRET" not in proc.stdout


def test_a_machine_without_python_311_gets_one_line_saying_what_to_install(
        release: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    old = bin_dir / "python3"  # a Python 3.9, as on an old image
    old.write_text("#!/bin/sh\ncase \"$2\" in *platform*) echo 3.9.18 ;; *) exit 1 ;; esac\n")
    old.chmod(0o755)
    for command in ("dirname", "id", "awk", "sha256sum", "cut", "tr", "mktemp", "cat", "rm", "install",
                    "stat", "cmp", "basename", "head"):
        if shutil.which(command):
            (bin_dir / command).symlink_to(shutil.which(command))
    env = {"PATH": str(bin_dir)}
    proc = subprocess.run([shutil.which("bash"), str(REPO / "deploy/linux/install.sh"), "--prefix",
                           str(tmp_path / "root"), "--wheel", str(release / wheel_of(release)), "--no-deps"],
                          capture_output=True, text=True, timeout=60, check=False, env=env)
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert line == ("install.sh: error: se-forwarder needs Python >= 3.11 and this machine has none "
                    "(python3 is 3.9.18): install one (Debian 12, Ubuntu 24.04: python3; RHEL 9, "
                    "Ubuntu 22.04: the python3.11 package) or give --python PATH")
