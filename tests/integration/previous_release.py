"""The previous release of tandem, run beside this one on the same Redis (issue 36's rolling upgrade).

The release is a git tag of this repository (``PREVIOUS_RELEASE``): ``git archive`` extracts its
tree (``tandem/`` there holds symlinks to the top-level folders, which the archive keeps), and its
workers and its client run from that tree with this venv (``PYTHONPATH`` and the working directory
both name the tree, so ``tandem`` and ``tests.integration.tools`` are the old ones). A clone without
the tag fails the test, saying how to fetch it: a rolling upgrade test that skipped would pass
having tested nothing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tandem.workers.embedded import WorkerGroup

PREVIOUS_RELEASE = "v0.35.0"
"""The tag of main before issue 36 (and 33-35): the release a deploy upgrades from."""
PREVIOUS_COMMIT = "7a314b5000740412f0fdd5c33e10daaceaafb2de"
"""The tag's commit: an ancestor of main, so a full clone without tags still has it."""
REPO = Path(__file__).resolve().parents[2]

_PROBE = "import tandem.tasks.app, tandem.workers.cli, tests.integration.tools; print(tandem.__file__)"

_SUBMIT = """
import json, sys
from tandem.tasks import submit
print(json.dumps([submit(spec).id for spec in json.load(sys.stdin)]))
"""

_APPROVE = """
import json, sys
from tandem.tasks import job
for job_id in json.load(sys.stdin):
    job(job_id).approve()
"""


def _known(name: str) -> bool:
    """Whether ``name`` names a commit in this clone."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
        capture_output=True,
    )
    return found.returncode == 0


def extract(into: Path) -> Path:
    """The previous release's tree, extracted under ``into``; fails the test when the tag is not in
    this clone (a shallow one), saying how to fetch it, or when the tree does not import here."""
    release = next((name for name in (PREVIOUS_RELEASE, PREVIOUS_COMMIT) if _known(name)), None)
    if release is None:
        pytest.fail(
            f"the previous release {PREVIOUS_RELEASE} ({PREVIOUS_COMMIT}) is not in this clone ({REPO}), "
            "so the rolling upgrade from it cannot be tested: fetch it with "
            f"`git fetch origin tag {PREVIOUS_RELEASE}` "
            "(a shallow clone: `git fetch --unshallow --tags origin`; CI: checkout with fetch-depth: 0)",
            pytrace=False,
        )
    archive = subprocess.run(["git", "-C", str(REPO), "archive", release], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=into, env=environment({}, into), capture_output=True, text=True
    )
    assert probe.returncode == 0, (
        f"the previous release does not import with this venv:\n{probe.stderr[-3000:]}"
    )
    assert probe.stdout.strip().startswith(str(into)), (
        f"the old tree's tandem was not the one imported: {probe.stdout}"
    )
    return into


def environment(env: Mapping[str, str], tree: Path) -> dict[str, str]:
    """``env`` over this process's environment, for a process of the old release in ``tree``."""
    return {**os.environ, **env, "PYTHONPATH": str(tree)}


class OldWorkerGroup(WorkerGroup):
    """Workers of the previous release (``tandem worker ROLE`` from its tree). That release has no
    ``--ready-file``: a worker is ready once it answers a ping."""

    def __init__(self, tree: Path, roles: Sequence[str], *, env: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(roles, env=environment(env, tree), **kwargs)
        self.tree = tree
        self.cwd = tree  # ``python -m`` puts the working directory first on the import path

    def command(self, role: str) -> list[str]:
        cmd = super().command(role)
        at = cmd.index("--ready-file")
        return cmd[:at] + cmd[at + 2 :]

    def wait_ready(self, app: object | None = None, timeout: float = 300.0) -> float:
        assert app is not None, "the previous release's workers are ready once they answer a ping"
        started = time.monotonic()
        self._wait_for_pings(app, started + timeout, timeout)
        return time.monotonic() - started

    def _node(self, role: str) -> str:
        return f"{role}-{self.name}@{socket.gethostname()}"


def run(tree: Path, env: Mapping[str, str], code: str, payload: Any) -> str:
    """Run ``code`` with the old release's client, ``payload`` as JSON on its stdin; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env=environment(env, tree),
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"the previous release's client failed:\n{done.stderr[-3000:]}"
    return done.stdout


def submit(tree: Path, env: Mapping[str, str], specs: list[dict[str, Any]]) -> list[str]:
    """Submit ``specs`` with the previous release's client (one process); their job ids."""
    ids = json.loads(run(tree, env, _SUBMIT, specs).strip().splitlines()[-1])
    assert len(ids) == len(specs)
    return list(ids)


def approve(tree: Path, env: Mapping[str, str], job_ids: list[str]) -> None:
    """Approve every waiting call of each job with the previous release's client (one process)."""
    run(tree, env, _APPROVE, job_ids)
