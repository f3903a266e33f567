"""What the benchmarks share: the model hosts, a tandem cluster on the local Redis, the raw
Celery worker, and small statistics helpers.

Everything runs on 127.0.0.1. Redis is the system server (``BENCH_REDIS_URL``, default
``redis://127.0.0.1:6379``) in database ``BENCH_REDIS_DB`` (default 4), which is flushed (that
database only) before and after a run. Every process started here is stopped by its pid.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from redis import Redis

from bench import models
from tandem.broker_config import Settings
from tandem.broker_config.job_redis import job_store_client
from tandem.tasks.app import create_app
from tandem.tasks.intake_message import send_intake
from tandem.tasks.spec import FINAL_STATES, JobResult, JobStatus
from tandem.tasks.state.store import JobStore
from tandem.workers.embedded import WorkerGroup, stop_process
from tests.openai_server import OpenAIServer

REDIS_BASE = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "4"))
TOOLKIT = "bench.tools:toolkit"
ROLES = ("thinker", "actor", "tools")


def redis_url(db: int = REDIS_DB) -> str:
    """The URL of the benchmark database."""
    return f"{REDIS_BASE}/{db}"


# -- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between the closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Iterable[float]) -> float:
    """The median (``nan`` for no values)."""
    data = list(values)
    return statistics.median(data) if data else float("nan")


# -- model hosts -----------------------------------------------------------------------------


class ModelHosts:
    """The Thinker's and the Actor's OpenAI-compatible hosts, following the plan in the job's goal
    (``bench.models``), with ``latency`` seconds before every reply."""

    def __init__(self, latency: float = 0.0) -> None:
        self.thinker = OpenAIServer(models.thinker, latency=latency)
        self.actor = OpenAIServer(models.actor, latency=latency)

    @property
    def latency(self) -> float:
        """Seconds each host waits before replying."""
        return self.thinker.latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        self.thinker.latency = seconds
        self.actor.latency = seconds

    def env(self) -> dict[str, str]:
        """The ``TANDEM_*_MODEL`` settings that point the roles at these hosts."""
        return {
            "TANDEM_THINKER_MODEL": "openai/thinker-model",
            "TANDEM_THINKER_API_BASE": self.thinker.url,
            "TANDEM_THINKER_API_KEY": "bench-key",
            "TANDEM_ACTOR_MODEL": "openai/actor-model",
            "TANDEM_ACTOR_API_BASE": self.actor.url,
            "TANDEM_ACTOR_API_KEY": "bench-key",
        }

    def __enter__(self) -> ModelHosts:
        for server in (self.thinker, self.actor):
            server.start()  # it sets TCP_NODELAY, as real hosts (uvicorn) do
        return self

    def __exit__(self, *exc: object) -> None:
        self.thinker.stop()
        self.actor.stop()


# -- the tandem cluster ----------------------------------------------------------------------


def _rss_mb(pid: int) -> tuple[float, float]:
    """Current and peak resident memory of a process, in MB (``/proc/PID/status``)."""
    found = {"VmRSS": 0.0, "VmHWM": 0.0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in found:
            found[key] = float(value.split()[0]) / 1024.0
    return found["VmRSS"], found["VmHWM"]


class Cluster:
    """One tandem worker per role on the benchmark database, plus a client app and store."""

    def __init__(
        self,
        hosts: ModelHosts,
        concurrency: Mapping[str, int],
        *,
        url: str | None = None,
        pool: Mapping[str, str] | None = None,
        **extra_env: str,
    ) -> None:
        self.url = url or redis_url()
        self.env = {
            "TANDEM_BROKER_URL": self.url,
            "TANDEM_RESULT_BACKEND": self.url,
            "TANDEM_REDIS_URL": self.url,
            "TANDEM_TOOLKIT": TOOLKIT,
            "TANDEM_TOOL_TIMEOUT": "30",
            "TANDEM_PREFIX": "bench",
            **hosts.env(),
            **extra_env,
        }
        self.settings = Settings.from_env(self.env)
        self.app = create_app(self.settings)
        # The job store's client: on a cluster (``TANDEM_REDIS_URL=redis+cluster://...`` in
        # ``extra_env``) redis-py's cluster client, which sends each key to its node.
        self.redis: Redis = job_store_client(self.settings)
        self.store = JobStore.from_settings(self.redis, self.settings)
        self.concurrency = dict(concurrency)
        self.pool = dict(pool or {})
        self.group: WorkerGroup | None = None
        self.ready_s: dict[str, float] = {}

    def start(self, timeout: float = 60.0) -> dict[str, float]:
        """Start the workers together; return each role's seconds from launch to answering a ping."""
        self.group = WorkerGroup(ROLES, env=self.env, concurrency=self.concurrency, pool=self.pool)
        launched = time.monotonic()
        self.group.start()
        names = {f"{role}-{os.getpid()}": role for role in ROLES}
        while len(self.ready_s) < len(ROLES):
            if time.monotonic() - launched > timeout:
                raise RuntimeError(f"workers not ready after {timeout:g} s; logs in {self.group.log_dir}")
            for role, proc in self.group.processes.items():
                if proc.poll() is not None:
                    log = (self.group.log_dir / f"{role}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"the {role} worker exited with code {proc.returncode}:\n{log}")
            missing = len(ROLES) - len(self.ready_s)
            replies = self.app.control.ping(timeout=0.1, limit=missing) or []
            now = time.monotonic()
            for reply in replies:
                for name in reply:
                    ready_role = names.get(name.split("@", 1)[0])
                    if ready_role is not None and ready_role not in self.ready_s:
                        self.ready_s[ready_role] = now - launched
        return dict(self.ready_s)

    def rss_mb(self) -> dict[str, tuple[float, float]]:
        """Each worker's (current, peak) resident memory in MB."""
        assert self.group is not None
        return {role: _rss_mb(proc.pid) for role, proc in self.group.processes.items()}

    def submit(self, goal: str, max_rounds: int) -> tuple[str, float]:
        """Enqueue a dual job (its intake message as ``tandem.client.submission`` sends it, with the
        job's priority); its id and the wall-clock time it was sent."""
        spec = {"goal": goal, "reasoner": "dual", "max_rounds": max_rounds}
        job_id = str(uuid.uuid4())
        sent = time.time()
        send_intake(self.app, job_id, spec)
        return job_id, sent

    def wait(self, job_ids: Sequence[str], timeout: float, poll: float = 0.01) -> dict[str, JobStatus]:
        """Wait until every job ended; their final statuses (``updated_at`` is when it ended)."""
        pending = list(job_ids)
        ended: dict[str, JobStatus] = {}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} of {len(job_ids)} jobs had not ended after {timeout:g} s")
            pipe = self.redis.pipeline(transaction=False)
            for job_id in pending:
                pipe.hmget(self.store.key(job_id, "state"), ["state", "updated_at"])
            still = []
            for job_id, (state, updated) in zip(pending, pipe.execute(), strict=True):
                if state is not None and state.decode() in FINAL_STATES:
                    ended[job_id] = JobStatus(
                        job_id=job_id, state=state.decode(), updated_at=float(updated or 0)
                    )
                else:
                    still.append(job_id)
            pending = still
            if pending:
                time.sleep(poll)
        return ended

    def result(self, job_id: str) -> JobResult:
        """A finished job's result."""
        found = self.store.result(job_id)
        if found is None:
            raise RuntimeError(f"job {job_id} has no result")
        return found

    def run(self, goal: str, max_rounds: int, timeout: float = 120.0) -> tuple[float, JobResult]:
        """Run one job alone; seconds from sending it to its end, and its result."""
        job_id, sent = self.submit(goal, max_rounds)
        status = self.wait([job_id], timeout)[job_id]
        result = self.result(job_id)
        if result.status != "completed":
            raise RuntimeError(f"benchmark job ended {result.status}: {result.error}")
        return status.updated_at - sent, result

    def events(self, job_id: str) -> list[dict[str, Any]]:
        """A finished job's events (``type``, ``data``, ``at``)."""
        out = []
        for _id, fields in self.redis.xrange(self.store.key(job_id, "events")):
            decoded = {k.decode(): v.decode() for k, v in fields.items()}
            out.append(
                {"type": decoded["type"], "data": json.loads(decoded["data"]), "at": float(decoded["at"])}
            )
        return out

    def stop(self) -> None:
        """Stop the workers by pid."""
        if self.group is not None:
            self.group.stop()
            self.group = None
        self.app.close()


# -- the raw Celery worker -------------------------------------------------------------------


class RawWorker:
    """``celery -A bench.rawapp worker --pool threads -c 1`` for one configuration of the raw app
    (``plain`` or ``tandem``, see ``bench.rawapp``) on the benchmark database."""

    def __init__(self, config: str) -> None:
        from bench.rawapp import make_app

        self.config = config
        self.url = redis_url()
        self.app = make_app(config, self.url)
        self.process: subprocess.Popen[bytes] | None = None
        self.log = Path(tempfile.mkdtemp(prefix="tandem-bench-raw-")) / f"{config}.log"
        self.name = f"raw-{config}-{os.getpid()}"

    def start(self) -> RawWorker:
        """Start the worker (see ``wait_ready``)."""
        from bench.rawapp import queue

        cmd = [
            sys.executable, "-m", "celery", "-A", "bench.rawapp", "worker",
            "--pool", "threads", "-c", "1", "--without-mingle", "--without-gossip",
            "-Q", queue(self.config), "-n", f"{self.name}@%h", "--loglevel", "WARNING",
        ]  # fmt: skip
        env = {**os.environ, "BENCH_RAW_CONFIG": self.config, "BENCH_RAW_BROKER_URL": self.url}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def wait_ready(self, timeout: float = 60.0) -> RawWorker:
        """Wait until the worker answers a ping."""
        assert self.process is not None
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"the raw Celery worker exited: {self.log.read_text()[-2000:]}")
            for reply in self.app.control.ping(timeout=0.2) or []:
                if any(name.split("@", 1)[0] == self.name for name in reply):
                    return self
        raise RuntimeError(f"the raw Celery worker was not ready after {timeout:g} s; log: {self.log}")

    def stop(self) -> None:
        """Stop the worker by pid."""
        stop_process(self.process)
        self.process = None
        self.app.close()


def flush_db(db: int = REDIS_DB) -> None:
    """Empty the benchmark database (that database only)."""
    Redis.from_url(redis_url(db)).flushdb()
