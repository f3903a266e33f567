"""The repository's layout guards: one import package, ``tandem``, whatever the working directory.

- The wheel's package list (``[tool.setuptools] packages`` and ``package-dir`` in pyproject.toml,
  kept by hand) names exactly the folders that hold an ``__init__.py``: a new subpackage that is
  not listed would be missing from every installed copy.
- A bare ``import tasks`` (or ``reasoner``, ``toolkit``, ``client``, ``workers``, ``broker_config``)
  from the repository root is refused with an ImportError that says what to import: the bare name would load
  a second copy of the package, whose errors ``except tandem.….SomeError`` would not catch.
- ruff refuses the bare names in code (``TID251``).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CARD_FOLDERS = ("reasoner", "toolkit", "tasks", "client", "workers", "broker_config")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _packages_on_disk() -> dict[str, str]:
    """Every package the tree holds: its import name and its folder, relative to the root."""
    found = {"tandem": "tandem"}
    for folder in CARD_FOLDERS:
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(ROOT)
            if "__pycache__" in relative.parts:
                continue
            found["tandem." + ".".join(relative.parts)] = relative.as_posix()
    return found


def test_the_wheels_package_list_is_every_folder_with_an_init() -> None:
    setuptools = PYPROJECT["tool"]["setuptools"]
    on_disk = _packages_on_disk()
    assert sorted(setuptools["packages"]) == sorted(on_disk)
    # Each listed package's folder is its own, or under a mapped parent's.
    mapping = setuptools["package-dir"]
    for name, folder in on_disk.items():
        parent = max((p for p in mapping if name == p or name.startswith(p + ".")), key=len)
        rest = name[len(parent) :].lstrip(".").replace(".", "/")
        assert (Path(mapping[parent]) / rest).as_posix().rstrip("/") == folder, name


@pytest.mark.parametrize("name", [*CARD_FOLDERS, "reasoner.errors", "tasks.state.store"])
def test_a_bare_import_from_the_repository_root_is_refused(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    top = name.split(".")[0]
    assert f"ImportError: {top!r} is tandem's folder {top}/" in done.stderr
    assert f"import tandem.{top} instead" in done.stderr


def test_the_tandem_names_import_from_the_repository_root() -> None:
    code = "import tandem.reasoner.errors as e, tandem.tasks.errors as t; print(e.ReasonerError, t.JobError)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "tandem.reasoner.errors.ReasonerError" in done.stdout


def test_ruff_bans_the_bare_names() -> None:
    banned = PYPROJECT["tool"]["ruff"]["lint"]["flake8-tidy-imports"]["banned-api"]
    assert sorted(banned) == sorted(CARD_FOLDERS)
    assert "TID251" in PYPROJECT["tool"]["ruff"]["lint"]["select"]


MAX_MODULE_LINES = 600
"""The hard limit on a package module's length (400 is the guide)."""


def test_no_package_module_is_over_the_hard_limit() -> None:
    lengths = {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for folder in CARD_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
    }
    assert {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES} == {}


def test_importing_the_client_api_does_not_create_the_celery_app() -> None:
    """``import tandem.tasks`` reads no environment: the app (``tandem.tasks.app``, built from the
    settings at its import) comes only when a worker or a sender needs it, so that a program may set
    ``TANDEM_*`` after importing tandem (``tandem demo`` points them at its embedded Redis)."""
    code = "import sys, tandem, tandem.tasks; print(sorted(m for m in sys.modules if m.endswith('.app')))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "tandem.tasks.app" not in done.stdout
