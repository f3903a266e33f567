"""The image, without Docker: the Dockerfile's install line and command, run as the image runs them.

There is no Docker engine here, so the test lays out what the Dockerfile's ``COPY`` lines put in
``/app`` (``tests/dockerfile.py``), runs its ``pip install`` arguments against that copy into a
fresh virtual environment (once per test session, shared with test_breaking_image.py), and starts
its ``CMD`` (``tandem worker all``) from there:

- with the Dockerfile's ``ENV`` and the ``OTEL_*`` settings docker-compose.yml gives a worker
  (docs/tracing.md#docker-compose-and-kubernetes: the collector's endpoint set, each role its own
  service name), and no variable of this test process;
- on a root file system that is read-only but for an empty ``/tmp``, as the Kubernetes manifests
  run it (``readOnlyRootFilesystem`` and an emptyDir on ``/tmp``): a private mount namespace
  (``unshare``) in which ``/`` is remounted read-only and a fresh tmpfs covers ``/tmp``;
- against the real Redis; the test waits for the worker's answer to a ping, runs a job with the
  built-in demo model and tools, stops the worker warm (SIGTERM: it exports what it holds), and
  finds the job's spans at a local OTLP receiver under the service name compose gives (steps and
  tool calls; the demo model calls no host, so there is no ``chat`` span).

pip's ``--no-cache-dir`` keeps the image small; here pip's cache is kept, so the install is quick
on a machine that installed the dev environment before (PyPI is reached for what is missing).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from redis import Redis

from tandem.broker_config import Settings
from tandem.client import submit
from tandem.tasks.app import create_app
from tandem.tasks.state.store import JobStore
from tests import dockerfile
from tests.integration import installs
from tests.integration.conftest import _exclusive_db
from tests.integration.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
READ_ONLY_ROOT = 'mount -o remount,bind,ro / && mount -t tmpfs -o mode=1777,size=256m tmpfs /tmp && exec "$@"'
"""Run inside ``unshare --mount``: ``/`` read-only, ``/tmp`` a fresh writable tmpfs, then the command."""


def _run(*cmd: str | Path, cwd: Path = ROOT, timeout: float = 900) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{[str(c) for c in cmd]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def image() -> tuple[dockerfile.Dockerfile, Path, Path]:
    """The Dockerfile read, its ``/app`` and the virtual environment its install line made: the test
    session's (``tests/integration/installs.py``: test_breaking_image.py runs the same line on the
    same files), under /var/tmp (the root file system), not /tmp: the worker's /tmp is an empty tmpfs."""
    spec = dockerfile.read()
    where = Path(tempfile.mkdtemp(prefix="tandem-image-", dir="/var/tmp"))
    try:
        context = dockerfile.build_context(spec, where / "app")
        args = [a for a in spec.pip_install if a != "--no-cache-dir"]
        app_dir, made = installs.image(context, args)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    assert made.returncode == 0, f"`{made.line}` failed:\n{made.log[-4000:]}"
    assert "Successfully installed" in made.log, made.log[-2000:]
    return spec, app_dir, made.venv


def test_the_install_line_brings_the_otlp_exporter(image: tuple[dockerfile.Dockerfile, Path, Path]) -> None:
    spec, _, venv = image
    extras = [set(re.findall(r"\[(.*)\]", a)[0].split(",")) for a in spec.pip_install if a.startswith(".[")]
    assert extras and {"worker", "otlp"} <= extras[0], spec.pip_install
    where = _run(
        venv / "bin" / "python",
        "-c",
        "import tandem, opentelemetry.exporter.otlp.proto.http.trace_exporter as e;"
        "print(tandem.__file__, e.__file__)",
        cwd=Path("/"),
    )
    assert all(path.startswith(str(venv)) for path in where.split()), where


def _compose_env(service: str, values: dict[str, str]) -> dict[str, str]:
    """The ``OTEL_*`` settings docker-compose.yml gives ``service``, ``${VAR:-default}`` filled in
    from ``values`` (what a user's ``.env`` holds)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = compose["services"][service]["environment"]

    def fill(match: re.Match[str]) -> str:
        return values.get(match.group(1)) or (match.group(3) if match.group(2) == ":-" else "")

    return {
        k: re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", fill, str(v))
        for k, v in env.items()
        if k.startswith("OTEL_")
    }


def _unshare_available() -> str | None:
    """Why the read-only root cannot be made here, or None when it can."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", READ_ONLY_ROOT, "sh", "true"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return None if done.returncode == 0 else f"a private read-only mount namespace: {done.stderr.strip()}"


def test_the_images_worker_traces_a_job_on_a_read_only_root(
    image: tuple[dockerfile.Dockerfile, Path, Path], redis_base: str, tmp_path: Path
) -> None:
    spec, app_dir, venv = image
    problem = _unshare_available()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs as root and needs {problem}")
        pytest.skip(f"cannot make {problem}")
    assert spec.cmd[:3] == ["tandem", "worker", "all"], spec.cmd

    with _exclusive_db() as db, OtlpReceiver() as receiver:
        url = f"{redis_base}/{db}"
        Redis.from_url(url).flushdb()
        otel = _compose_env("thinker", {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
        assert otel["OTEL_EXPORTER_OTLP_ENDPOINT"] == receiver.endpoint, otel
        assert otel["OTEL_SERVICE_NAME"] == "tandem-thinker", otel
        env = {
            "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(app_dir),  # read-only, as /home/tandem is under readOnlyRootFilesystem
            **spec.env,
            "TANDEM_BROKER_URL": url,
            "TANDEM_RESULT_BACKEND": url,
            "TANDEM_REDIS_URL": url,
            "TANDEM_METRICS_PORT": "0",  # the manifests serve metrics; 0: a free port here
            **otel,
        }
        settings = Settings.from_env(env)
        app = create_app(settings)
        log_path = tmp_path / "worker.log"
        with open(log_path, "wb") as log:
            worker = subprocess.Popen(
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "sh",
                    "-c",
                    READ_ONLY_ROOT,
                    "sh",
                    *spec.cmd,
                ],
                cwd=app_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def tail() -> str:
            return log_path.read_text(errors="replace")[-4000:]

        try:
            _wait_ready(app, worker, tail)
            store = JobStore(Redis.from_url(url), settings.prefix)
            handle = submit({"goal": "What is (17 * 23) + 4?", "max_rounds": 8}, app=app, store=store)
            result = handle.result(timeout=120)
            assert result.status == "completed", (result, tail())
            assert worker.poll() is None, f"the worker exited with {worker.returncode}:\n{tail()}"
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)  # warm shutdown: the worker exports what it holds
            code = worker.wait(60)
            app.close()
            Redis.from_url(url).flushdb()
        assert code == 0, f"the worker's warm shutdown exited with {code}:\n{tail()}"
        assert "Read-only file system" not in tail(), tail()

        steps = [s for s in receiver.spans() if s.attributes.get("tandem.job_id") == handle.id]
        traces = {s.trace_id for s in steps}
        assert len(traces) == 1, f"the job is not one trace: {traces}"
        spans = [s for s in receiver.spans() if s.trace_id in traces]  # tool and model calls too
        kinds = {str(s.attributes["tandem.step.kind"]) for s in steps if s.name == "tandem.step"}
        assert {"intake", "thinker", "actor", "tools", "finalize"} <= kinds, (kinds, tail())
        names = {s.name for s in spans}
        assert "tandem.job" in names and any(n.startswith("execute_tool ") for n in names), names
        assert {s.service for s in spans} == {"tandem-thinker"}


def _wait_ready(app: object, worker: subprocess.Popen[bytes], tail: object) -> None:
    """Until the worker answers a ping (it consumes its queues), failing at once if it exits."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            pytest.fail(f"the image's worker exited with code {worker.returncode}:\n{tail()}")  # type: ignore[operator]
        replies = app.control.ping(timeout=0.5) or []  # type: ignore[attr-defined]
        if any(name.startswith("all@") for reply in replies for name in reply):
            return
    pytest.fail(f"the image's worker did not answer a ping in 120 s:\n{tail()}")  # type: ignore[operator]
