"""``tandem.Client`` and ``tandem.AsyncClient`` from a bare virtual environment (httpx and pydantic,
no Celery, redis-py or LiteLLM) against a real ``tandem api`` process and real workers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.integration.conftest import _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "http-client-test-token-0123"
PLAN = [[{"name": "add", "args": {"a": 2, "b": 3}}]]

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from tandem import AsyncClient, Client
    from tandem.client.events import Final, ToolResult
    from tandem.client.http import Conflict, NotFound, Unauthorized

    url, token, goal = sys.argv[1:4]
    out = {}
    with Client(url, token) as api:
        job = api.submit(goal=goal, max_rounds=5)
        events = list(job.events())
        outcome = job.result(timeout=120)
        out["events"] = [e.type for e in events]
        out["typed"] = isinstance(events[-1], Final) and any(isinstance(e, ToolResult) for e in events)
        out["outcome"] = [outcome.status, outcome.deliverable]
        out["listed"] = job.id in [j.job_id for j in api.jobs()]
        try:
            api.cancel(job.id)
        except Conflict as exc:
            out["cancel"] = exc.code
        try:
            api.job("no-such-job")
        except NotFound as exc:
            out["unknown"] = exc.code
    try:
        Client(url, "a-wrong-token-0123456789").jobs()
    except Unauthorized as exc:
        out["wrong_token"] = exc.status

    async def main():
        async with AsyncClient(url, token) as api:
            job = await api.submit(goal=goal, max_rounds=5)
            kinds = [e.type async for e in job.events()]
            outcome = await job.result(timeout=120)
            return kinds, [outcome.status, outcome.deliverable]

    out["async_events"], out["async_outcome"] = asyncio.run(main())
    heavy = {"celery", "kombu", "redis", "litellm", "starlette", "aiohttp", "cryptography"}
    out["heavy_modules"] = sorted({m.split(".")[0] for m in sys.modules} & heavy)
    print(json.dumps(out))
    """
)


def _closure(names: list[str]) -> set[str]:
    """The distributions ``names`` need (their requirements, recursively; extras left out)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        dist = metadata.distribution(todo.pop())
        name = dist.metadata["Name"].lower()
        if name in seen:
            continue
        seen.add(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _link_distribution(name: str, site: Path) -> None:
    """Link the top-level modules and packages of an installed distribution into ``site``."""
    dist = metadata.distribution(name)
    tops = {f.parts[0] for f in dist.files or [] if not f.parts[0].endswith((".dist-info", "..", ".pth"))}
    for top in tops:
        source = Path(str(dist.locate_file(top)))
        if source.exists() and not (site / top).exists() and top != "__pycache__":
            (site / top).symlink_to(source)


@pytest.fixture(scope="module")
def bare_python() -> Iterator[Path]:
    """A virtual environment with tandem (installed without its dependencies), httpx and pydantic."""
    tmp = Path(tempfile.mkdtemp(prefix="tandem-bare-"))
    venv = [sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")]
    subprocess.run(venv, check=True, timeout=120)
    site = tmp / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(site), str(ROOT)], check=True, timeout=600, capture_output=True)
    for name in _closure(["httpx", "pydantic"]):
        _link_distribution(name, site)
    python = tmp / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "client-only.pth").write_text(f"{site}\n")
    yield python
    shutil.rmtree(tmp, ignore_errors=True)


def test_the_bare_venv_has_no_worker_stack(bare_python: Path) -> None:
    for name in ("celery", "redis", "litellm"):
        done = subprocess.run([str(bare_python), "-c", f"import {name}"], capture_output=True, timeout=60)
        assert done.returncode != 0, f"{name} is importable in the bare venv"


def test_a_client_with_only_httpx_and_pydantic_runs_a_job(bare_python: Path, redis_base: str) -> None:
    gen = _make_cluster(redis_base, TANDEM_API_TOKENS=TOKEN)
    cluster, _, _ = next(gen)
    server = None
    try:
        cluster.start("thinker", "actor", "tools")
        server = ApiProcess(cluster.env)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TANDEM_", "PYTHON"))}
        done = subprocess.run(
            [str(bare_python), "-c", SCRIPT, server.url, TOKEN, goal_with_plan("add", PLAN)],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            cwd=tempfile.gettempdir(),  # not the repository: only the installed copy is importable
        )
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["events"][0] == "job_started" and out["events"][-1] == "final"
        assert "tool_result" in out["events"] and out["typed"] is True
        assert out["outcome"] == ["completed", "all planned calls ran"]
        assert out["async_events"][0] == "job_started" and out["async_events"][-1] == "final"
        assert out["async_outcome"] == ["completed", "all planned calls ran"]
        assert out["listed"] is True
        assert (out["cancel"], out["unknown"], out["wrong_token"]) == ("job_ended", "unknown_job", 401)
        assert out["heavy_modules"] == []
        assert cluster.exited() == []
    finally:
        if server is not None:
            server.stop()
        gen.close()
