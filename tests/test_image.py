"""The image's recipe and the deployment files, read without Docker or a cluster.

- The Dockerfile copies every file its install reads (the folders ``pyproject.toml`` maps into
  ``tandem``, the README, the license), installs the ``worker`` and ``otlp`` extras, and runs as
  the uid the Kubernetes manifests run as. (tests/integration/test_image.py runs its install line
  and its command.)
- Every section of the README or ``docs/`` that docker-compose.yml, the Dockerfile or a file under
  ``deploy/`` names exists: ``docs/x.md#anchor`` (or ``docs/x.md, "Heading"``) must be a heading of
  that page, and no file names a README section by its title.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from tests import dockerfile
from tests.test_readme import _anchors

ROOT = Path(__file__).resolve().parent.parent
DEPLOY_FILES = sorted(
    [ROOT / "docker-compose.yml", ROOT / "Dockerfile", ROOT / ".dockerignore"]
    + [p for p in (ROOT / "deploy").rglob("*") if p.is_file()]
)
REFERENCE = re.compile(r"\b(README\.md|docs/[\w.-]+\.md)(?:#([\w-]+)|,? \"([^\"]+)\")?")


def test_the_dockerfile_copies_every_file_the_install_reads() -> None:
    image = dockerfile.read()
    copied = {source for sources, _ in image.copies for source in sources}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = {path.split("/")[0] for path in project["tool"]["setuptools"]["package-dir"].values()}
    assert "tandem" in folders and "reasoner" in folders
    needed = folders | {"pyproject.toml", project["project"]["readme"], "LICENSE"}
    for link in (ROOT / "tandem").iterdir():  # tandem/reasoner -> ../reasoner, for tools reading the tree
        if link.is_symlink():
            needed.add(Path(link.readlink()).name)
    assert needed <= copied, f"the Dockerfile does not COPY {sorted(needed - copied)}"


def test_the_image_installs_the_worker_stack_and_the_exporter_and_runs_as_the_manifests_user() -> None:
    image = dockerfile.read()
    [target] = [a for a in image.pip_install if a.startswith(".")]
    assert set(re.fullmatch(r"\.\[(.*)\]", target).group(1).split(",")) >= {"worker", "otlp"}  # type: ignore[union-attr]
    assert image.cmd[:2] == ["tandem", "worker"] and image.user == "tandem"
    users = set()
    for path in sorted((ROOT / "deploy" / "kubernetes" / "base").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Deployment":
                users.add(doc["spec"]["template"]["spec"]["securityContext"]["runAsUser"])
    assert users == {image.uid}


def test_every_section_the_deploy_files_name_exists() -> None:
    broken = []
    named = 0
    for path in DEPLOY_FILES:
        text = path.read_text()
        where = path.relative_to(ROOT)
        for stale in re.findall(r"README(?!\.md\b)[^\n]{0,40}", text):
            broken.append(f"{where}: {stale!r} names a README section by title: link docs/<page>.md#<anchor>")
        for page, anchor, title in REFERENCE.findall(text):
            named += 1
            target = ROOT / page
            if not target.exists():
                broken.append(f"{where}: {page} does not exist")
                continue
            wanted = anchor or (title and re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-"))
            if wanted and wanted not in _anchors(target):
                broken.append(f"{where}: {page} has no heading #{wanted}")
    assert named >= 15
    assert not broken, "\n".join(broken)
