"""Every file the deployment names exists: the modules and loaded files of each Bicep template, the
release files the VMs download (which scripts/release copies from deploy/), the files install.sh
looks for next to itself, and every repository path docs/deploy.md and the Bicep headers cite.
(Relative links of docs/*.md: tests/test_docs.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import REPO

BICEP = sorted((REPO / "bicep").rglob("*.bicep"))
RELEASE_SCRIPT = (REPO / "scripts/release").read_text()
# A path of this repository as the docs and comments cite it: `bicep/...`, `deploy/...`, `scripts/...`.
CITED = re.compile(r"(?<![\w/.-])((?:bicep|deploy|scripts|docs|tests|bench)/[\w./-]*\w)")


def ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(REPO)) for p in paths]


@pytest.mark.parametrize("template", BICEP, ids=ids(BICEP))
def test_every_module_and_loaded_file_of_a_template_exists(template: Path) -> None:
    text = template.read_text()
    named = re.findall(r"^module \w+ '([^']+)'", text, re.M)
    named += re.findall(r"load(?:Text|Json)Content\('([^']+)'\)", text)
    for name in named:
        assert (template.parent / name).is_file(), f"{template.name} names {name}"


def test_every_release_file_the_vms_download_is_made_by_the_release_script() -> None:
    downloaded = set()
    for template in BICEP:
        uris = re.findall(r"\$\{installerBaseUri\}/((?:linux|windows)/[\w.-]+)", template.read_text())
        downloaded |= set(uris)
    script = (REPO / "deploy/vm-extension/linux-extension.sh").read_text()
    downloaded |= set(re.findall(r"(linux/[\w.-]+)", script.split("set -eu", 1)[1]))
    assert downloaded >= {"linux/install.sh", "linux/se-forwarder.service", "linux/10-restart-backoff.conf",
                          "windows/install.ps1"}
    for path in downloaded:
        folder, name = path.split("/")
        assert (REPO / "deploy" / folder / name).is_file(), path
        assert name in RELEASE_SCRIPT, f"scripts/release does not copy {path}"


def test_every_file_install_sh_looks_for_next_to_itself_exists() -> None:
    text = (REPO / "deploy/linux/install.sh").read_text()
    names = set(re.findall(r"UNIT=([\w.-]+\.service)", text))
    names |= set(re.findall(r"BACKOFF=([\w.-]+\.conf)", text))
    names |= set(re.findall(r'"\$script_dir/([\w.-]+)"', text))
    assert names >= {"se-forwarder.service", "se-forwarder-coordinator.service", "10-restart-backoff.conf",
                     "coordinator.toml"}
    for name in names:
        found = (REPO / "deploy/linux" / name).is_file() or (REPO / "deploy" / name).is_file()
        assert found, f"install.sh looks for {name} next to itself"
        assert name in RELEASE_SCRIPT, f"scripts/release does not put {name} next to install.sh"
    for cited in CITED.findall(text):
        assert (REPO / cited).exists(), f"install.sh cites {cited}"


CITING = [REPO / "docs/deploy.md", REPO / "deploy/vm-extension/README.md", *BICEP,
          REPO / "deploy/linux/se-forwarder-coordinator.service", REPO / "deploy/cloud-init/user-data.yaml"]


@pytest.mark.parametrize("document", CITING, ids=ids(CITING))
def test_every_repository_path_a_deployment_document_cites_exists(document: Path) -> None:
    text = document.read_text()
    cited = {c for c in CITED.findall(text) if "*" not in c}
    missing = sorted(c for c in cited
                     if not (REPO / c).exists() and not (document.parent / c).exists())
    assert not missing, f"{document.relative_to(REPO)} cites {missing}"


def test_the_example_parameters_are_parameters_of_main_bicep(bicep_docs) -> None:
    import json

    example = json.loads((REPO / "bicep/main.parameters.example.json").read_text())["parameters"]
    declared = bicep_docs["main.bicep"]["parameters"]
    assert set(example) <= set(declared)
    # with the release's own file (release.parameters.json: wheelFile, releaseSums), every
    # parameter without a default is given
    required = {name for name, p in declared.items() if p.get("default") is None}
    assert required <= set(example) | {"wheelFile", "releaseSums"}
