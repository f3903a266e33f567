"""Every distribution the package imports is declared in pyproject.toml; LICENSE is the Apache 2.0 text.

A module of the package that imports a third-party module whose distribution is neither a dependency
nor in a feature extra works here only because something else pulled the distribution in (LiteLLM
brings httpx, mcp brings starlette): an upgrade of that other package would break a fresh install.
The ``dev`` extra does not count: package code must not need test tools.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = ("reasoner", "toolkit", "tasks", "workers", "broker_config", "tandem")
FIRST_PARTY = {"tandem", *PACKAGE_FOLDERS}
NOT_RUNTIME_EXTRAS = {"dev"}


def _normalize(name: str) -> str:
    """A distribution name as PEP 503 compares (``PyYAML`` = ``pyyaml``, ``mcp_types`` = ``mcp-types``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, str]:
    """Each declared distribution (normalized) -> where: ``dependencies`` or ``extra 'viz'``, say."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lists = {"dependencies": project["dependencies"]}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        if extra not in NOT_RUNTIME_EXTRAS:
            lists[f"extra {extra!r}"] = requirements
    declared: dict[str, str] = {}
    for where, requirements in lists.items():
        for requirement in requirements:
            name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
            assert name, f"cannot read the requirement {requirement!r} in {where}"
            declared.setdefault(_normalize(name.group()), where)
    return declared


def _package_modules() -> list[Path]:
    """The package's source files, each once (``tandem/`` holds symbolic links to the other folders)."""
    files = []
    for folder in PACKAGE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if not any(p.is_symlink() for p in (path, *path.relative_to(ROOT).parents) if p != Path(".")):
                files.append(path)
    return files


def _third_party_imports() -> dict[str, list[str]]:
    """Top-level module name -> the package files that import it (``TYPE_CHECKING`` imports included)."""
    found: dict[str, list[str]] = {}
    for path in _package_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                    found.setdefault(top, []).append(str(path.relative_to(ROOT)))
    return found


def test_the_walk_finds_the_imports_it_must_judge() -> None:
    imports = _third_party_imports()
    # the walk sees module-level, function-level and TYPE_CHECKING imports alike
    assert {"celery", "pydantic", "litellm", "starlette", "matplotlib", "gevent"} <= imports.keys()
    assert "json" not in imports and "tandem" not in imports


def test_every_imported_distribution_is_declared() -> None:
    declared = _declared()
    providers = packages_distributions()
    undeclared = []
    for module, files in sorted(_third_party_imports().items()):
        # an extra's package need not be installed here (gevent): its distribution is named like it
        candidates = {_normalize(d) for d in providers.get(module, [])} | {_normalize(module)}
        if not candidates & declared.keys():
            named = ", ".join(sorted(providers.get(module, []))) or "not installed here"
            undeclared.append(f"{module} (distribution: {named}) imported by {', '.join(sorted(set(files)))}")
    assert not undeclared, (
        "package modules import distributions pyproject.toml does not declare; add each to "
        "[project] dependencies (or a feature extra) with a lower bound:\n  " + "\n  ".join(undeclared)
    )


def test_the_license_file_is_the_apache_license_2_0() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "END OF TERMS AND CONDITIONS" in text
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "Apache-2.0"
