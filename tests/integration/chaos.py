"""The chaos run shared by the chaos test and ``python -m bench.chaos``: dual jobs with tools on
2 workers per role, a random worker SIGKILLed and replaced every few seconds, one Redis restart
with AOF, and the checks of every job at the end. Only the workers the run kills are replaced: one
that exits by itself ends the run as a failure.

Redis is a server of our own (``OwnRedis``, on a free port, AOF on), never the shared one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from tandem.client.handle import JobHandle
from tandem.tasks.spec import FINAL_STATES
from tandem.workers.embedded import WorkerGroup, free_port, redis_answers, stop_process
from tests.integration.conftest import Cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.takeover import Watch, at_kill

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
CHAOS_ENV = {
    "TANDEM_LEASE_SECONDS": "2",
    "TANDEM_STALL_SECONDS": "4",
    "TANDEM_TOOL_TIMEOUT": "30",
    "TANDEM_TOOLKIT": "tests.integration.tools:durable_toolkit",
}
PLAN = [
    [
        {"name": "charge_card", "args": {"amount": 1, "seconds": 1.5}},
        {"name": "add", "args": {"a": 1, "b": 2}},
    ],
    [{"name": "sleep_tool", "args": {"seconds": 1.0}}],
    [{"name": "add", "args": {"a": 3, "b": 4}}],
]
"""Each job: three rounds with tools (one call ``at_most_once``), then the round that delivers."""
EXPECTED_MEMORY = [(r, role) for r in range(len(PLAN)) for role in ("thinker", "actor", "tool")] + [
    (len(PLAN), "thinker"),
    (len(PLAN), "actor"),
]


class OwnRedis:
    """A ``redis-server`` of this run on a free port, with AOF (``appendfsync everysec``, as in
    docker compose); ``restart`` is a clean shutdown and a start on the same port and files."""

    def __init__(self, *, appendonly: bool = True) -> None:
        self.port = free_port()
        self.base = f"redis://127.0.0.1:{self.port}"
        self.dir = tempfile.mkdtemp(prefix="tandem-chaos-redis-")
        self.appendonly = appendonly
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> OwnRedis:
        """Start the server and wait until it answers."""
        cmd = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "everysec",
            "--dir", self.dir,
            "--loglevel", "warning",
        ]  # fmt: skip
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not redis_answers(f"{self.base}/0", 0.2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def restart(self, down_for: float = 1.0) -> None:
        """Shut down cleanly (SIGTERM writes the AOF), stay down ``down_for`` s, start again."""
        stop_process(self.process, 20)
        time.sleep(down_for)
        self.start()

    def crash(self, down_for: float = 1.0) -> None:
        """SIGKILL the server (no clean shutdown: AOF keeps what ``appendfsync everysec`` had
        written), stay down ``down_for`` s, start again on the same port and files."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        time.sleep(down_for)
        self.start()

    def pause(self) -> None:
        """SIGSTOP: Redis is unreachable (connections hang) until ``resume``."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server by pid and remove its files."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
        stop_process(self.process, 10)
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class ChaosStats:
    """What a chaos run saw."""

    jobs: int = 0
    kills: int = 0
    redis_restarts: int = 0
    completed: int = 0
    wrong_deliverable: int = 0
    duplicate_tool_runs: int = 0
    duplicate_messages: int = 0
    stuck: int = 0
    lost_celery_results: int = 0
    """Jobs that ended but whose Celery result (what a bare client reads) is not in the backend."""
    keys_without_ttl: list[str] = field(default_factory=list)
    recoveries: list[float] = field(default_factory=list)
    """For every kill and every job live then, the time to that job's next progress."""
    takeovers: Watch = field(default_factory=Watch)
    """The jobs whose work a killed worker held or had reserved, and when it was taken over."""
    seconds: float = 0.0
    started: float = 0.0
    """When the chaos began (``time.monotonic``)."""
    failures: list[str] = field(default_factory=list)


def _is_ready(group: WorkerGroup, role: str) -> bool:
    try:
        return b" ready." in (group.log_dir / f"{role}.log").read_bytes()
    except OSError:
        return False


def _progress_marks(redis: Redis, store_key: Any, jobs: list[str]) -> dict[str, str]:
    pipe = redis.pipeline(transaction=False)
    for job in jobs:
        pipe.hmget(store_key(job, "state"), ["updated_at", "state"])
    marks: dict[str, str] = {}
    for job, (updated, state) in zip(jobs, pipe.execute(), strict=True):
        if state is not None and state.decode() not in FINAL_STATES:
            marks[job] = (updated or b"").decode()
    return marks


def run_chaos(
    cluster: Cluster,
    redis_server: OwnRedis,
    *,
    jobs: int = 30,
    limit: float = 170.0,
    kill_every: tuple[float, float] = (3.0, 5.0),
    restart_after: float = 12.0,
    seed: int = 11,
) -> ChaosStats:
    """Run the chaos scenario on ``cluster`` (no workers started yet) and check every job."""
    rng = random.Random(seed)
    stats = ChaosStats(jobs=jobs)
    live: list[tuple[WorkerGroup, str]] = []
    for _ in range(2):
        group = cluster.start("thinker", "actor", "tools", **CHAOS_ENV)
        live.extend((group, role) for role in group.roles)
    handles: list[JobHandle] = [
        cluster.submit(goal=goal_with_plan(f"chaos job {i}", PLAN), max_rounds=8) for i in range(jobs)
    ]
    ids = [h.id for h in handles]
    started = stats.started = time.monotonic()
    next_kill = started + rng.uniform(*kill_every)
    restarted = False
    watching: list[tuple[float, dict[str, str]]] = []  # (kill time, progress marks of live jobs then)
    last_kill = time.time() - 3600
    while time.monotonic() - started < limit:
        now = time.monotonic()
        gone = cluster.exited()
        if gone:  # a worker that exits by itself is a failure, never one to replace
            stats.failures.extend(gone)
            break
        try:
            marks = _progress_marks(cluster.redis, cluster.store.key, ids)
            stats.takeovers.poll(cluster.redis, cluster.store)
        except Exception:
            marks = None  # Redis is restarting
        if marks is not None:
            if not marks:
                break
            still = []
            for killed_at, before in watching:
                waiting = {j: m for j, m in before.items() if j in marks and marks[j] == m}
                for job in before:
                    if job not in waiting:
                        stats.recoveries.append(now - killed_at)
                if waiting:
                    still.append((killed_at, waiting))
            watching = still
        if not restarted and now - started > restart_after:
            stats.takeovers.restarted()
            redis_server.restart()
            stats.redis_restarts += 1
            restarted = True
            continue
        ready = [i for i, (group, role) in enumerate(live) if _is_ready(group, role)]
        per_role = {r: sum(1 for i in ready if live[i][1] == r) for r in ("thinker", "actor", "tools")}
        # Any worker may die, starting or ready, except a role's last ready one: on a loaded
        # 2-core machine a replacement takes up to a minute to import LiteLLM, and a role with no
        # worker left would measure the machine's speed, not tandem.
        victims = [i for i in range(len(live)) if not (i in ready and per_role[live[i][1]] == 1)]
        if now >= next_kill and victims:
            group, role = live.pop(rng.choice(victims))
            proc = group.processes[role]
            if marks is not None:
                watching.append((time.monotonic(), dict(marks)))
            killed_at, since = time.monotonic(), last_kill
            assert proc.poll() is None, f"the {role} worker (pid {proc.pid}) exited by itself"
            cluster.killed.add(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            last_kill = time.time()
            stats.kills += 1
            try:  # after the kill: what the dead process held is frozen until its lease runs out
                stats.takeovers.add(at_kill(cluster.redis, cluster.store, ids, proc.pid, killed_at, since))
            except Exception:
                stats.failures.append("could not read what a killed worker held")
            replacement = WorkerGroup([role], env={**cluster.env, **CHAOS_ENV}, loglevel="INFO")
            replacement.start()
            cluster.groups.append(replacement)
            live.append((replacement, role))
            next_kill = time.monotonic() + rng.uniform(*kill_every)
        time.sleep(0.1)
    stats.seconds = time.monotonic() - started
    stats.takeovers.settle(cluster.redis)
    check(cluster, handles, stats)
    return stats


def check(cluster: Cluster, handles: list[JobHandle], stats: ChaosStats) -> None:
    """Count completed jobs, wrong deliverables, duplicate tool runs and messages, stuck jobs,
    Celery results missing from the backend, and keys without a TTL."""
    calls = cluster.tool_calls()
    for h in handles:
        result = cluster.store.result(h.id)
        if result is None:
            stats.stuck += 1
            stats.failures.append(f"{h.id}: not ended ({cluster.store.machine.record(h.id)})")
            continue
        meta = cluster.app.backend.get_task_meta(h.id)
        if (meta["status"], meta.get("result")) != ("SUCCESS", result.model_dump(mode="json")):
            stats.lost_celery_results += 1
            stats.failures.append(f"{h.id}: Celery result {meta}")
        if result.status == "completed":
            stats.completed += 1
        else:
            stats.failures.append(f"{h.id}: {result.status}: {result.error}")
        if result.status == "completed" and result.deliverable != "all planned calls ran":
            stats.wrong_deliverable += 1
        charges = [c for c in calls if c["job"] == h.id and c["name"] == "charge_card"]
        if len(charges) > 1:
            stats.duplicate_tool_runs += len(charges) - 1
            stats.failures.append(f"{h.id}: charge_card ran {len(charges)} times: {json.dumps(charges)}")
        keys = [(m.round, m.role) for m in cluster.store.memory(h.id).get_messages()]
        if result.status == "completed" and keys != EXPECTED_MEMORY:
            stats.duplicate_messages += 1
            stats.failures.append(f"{h.id}: memory {keys}")
    prefix = cluster.settings.prefix
    stats.keys_without_ttl = [
        k.decode() for k in cluster.redis.scan_iter(match=f"{prefix}:*") if cluster.redis.ttl(k) < 0
    ]
