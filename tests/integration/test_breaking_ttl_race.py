"""Breaking tests of the keys' TTLs and of the live index under races (docs/durability.md, "Every
key has a TTL from the moment it is written"; "To stop a job, cancel it ... when it is waiting ...
at once"; docs/children.md, "A cancel reaches the whole tree at once"), written from the docs.

The workers sweep often here (``TANDEM_LEASE_SECONDS`` 2: a sweep every 0.25 s), so jobs end while
the reconcilers sweep. A watcher ``SCAN``s the database all along and notes every ``tandem:*`` key
it sees without a TTL (``TTL`` -1): a key must have one from the moment it is written. After each
scenario every ``tandem:*`` key must have a TTL, and no ended job may be in the live index
(``tandem:live:<n>``) after a few more sweeps.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis import Redis

from tandem.client.handle import JobHandle
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_children import spawned_children
from tests.integration.test_durability import wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
AT_ONCE = 15.0
"""How long a cancelled parked job may take to end (docs: "at once")."""
SWEEPS = 3.0
"""Long enough for a dozen regular sweeps (one every 0.25 s here)."""
ASK = goal_with_plan("book a trip", [[{"name": "book_trip", "args": {}}]])


def steps(rounds: int) -> str:
    """A goal of ``rounds`` rounds of one short sleep each: a job that ends by itself in about a
    second or two, so a cancel sent within 3 s may come before, during or after its end."""
    return goal_with_plan("steps", [[{"name": "sleep_tool", "args": {"seconds": 0.3}}]] * rounds)


def fan(*goals: str) -> str:
    return goal_with_plan("fan out", [[{"name": "fan_out", "args": {"goals": list(goals), "max_rounds": 4}}]])


class TtlWatcher:
    """SCANs ``prefix:*`` in a loop and remembers every key it saw without a TTL (-1)."""

    def __init__(self, url: str, prefix: str) -> None:
        self.redis = Redis.from_url(url)
        self.prefix = prefix
        self.untimed: dict[str, str] = {}
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for key in self.redis.scan_iter(match=f"{self.prefix}:*", count=500):
                if self.redis.ttl(key) == -1:
                    # -1: the key exists without a TTL (-2 would be a key gone since the SCAN)
                    self.untimed.setdefault(key.decode(), self.evidence(key))
            self.scans += 1

    def evidence(self, key: bytes) -> str:
        """What the key held when seen without a TTL, and its TTL 0.2 s later."""
        kind = self.redis.type(key).decode()
        held = ""
        if kind == "hash":
            record = {k.decode(): v.decode()[:60] for k, v in self.redis.hgetall(key).items()}
            wanted = ("state", "step", "round", "epoch", "holder", "deadline", "pause_kind")
            held = json.dumps({k: record[k] for k in wanted if k in record} | {"fields": sorted(record)})
        time.sleep(0.2)
        return f"{kind} {held} at {time.time():.3f}; TTL 0.2 s later: {self.redis.ttl(key)}"

    def __enter__(self) -> TtlWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.breaking_wake_tools:toolkit",
        TANDEM_LEASE_SECONDS="2",
        TANDEM_STALL_SECONDS="2",
    )
    hosts = next(clusters)
    hosts[0].start("thinker", "actor", "tools", concurrency={"tools": 8, "actor": 8, "thinker": 8})
    hosts[0].start("thinker", "actor", "tools", concurrency={"tools": 8}, name="second")
    yield hosts
    next(clusters, None)


def shards(c: Cluster) -> list[str]:
    """The live index's shards (``tandem:live:<n>``) that exist now."""
    prefix = c.settings.prefix
    found = [k.decode() for k in c.redis.scan_iter(match=f"{prefix}:live:*")]
    return sorted(k for k in found if k.rsplit(":", 1)[1].isdigit())


def live_shard(c: Cluster, job_id: str) -> str | None:
    """The live shard that holds ``job_id``, or None."""
    for shard in shards(c):
        if c.redis.type(shard) == b"zset" and c.redis.zscore(shard, job_id) is not None:
            return shard
    return None


def state(c: Cluster, job_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in c.redis.hgetall(c.store.key(job_id, "state")).items()}


def wait_state(c: Cluster, job_id: str, want: str) -> None:
    wait_for(lambda: state(c, job_id).get("state") == want, EVENT_SECONDS, f"{job_id} to be {want}")


def check_every_key_timed(c: Cluster) -> None:
    """Every ``tandem:*`` key now has a TTL > 0 (after asserting there are keys to check)."""
    keys = [k.decode() for k in c.redis.scan_iter(match=f"{c.settings.prefix}:*", count=1000)]
    assert keys, "no tandem key at all: the scan checks nothing"
    untimed = {k: c.redis.ttl(k) for k in keys}
    untimed = {k: t for k, t in untimed.items() if t != -2 and t <= 0}
    assert untimed == {}, f"tandem keys without a positive TTL: {untimed}"


def check_shards_outlive_their_jobs(c: Cluster, jobs: list[str]) -> None:
    """A shard holding a live job must not expire before that job's deadline (else the reconciler
    loses the job); the job's own state key lives until its deadline plus TANDEM_MEMORY_TTL."""
    for job_id in jobs:
        shard = live_shard(c, job_id)
        assert shard is not None, f"the live job {job_id} is in no live shard: {shards(c)}"
        shard_ttl = c.redis.ttl(shard)
        state_ttl = c.redis.ttl(c.store.key(job_id, "state"))
        assert shard_ttl > 0, f"{shard} (holding live job {job_id}) has TTL {shard_ttl}"
        assert shard_ttl >= state_ttl - c.settings.memory_ttl - 5, (
            f"{shard} (TTL {shard_ttl}) expires before live job {job_id}'s deadline "
            f"(its state key's TTL {state_ttl}, TANDEM_MEMORY_TTL {c.settings.memory_ttl})"
        )


def test_many_parked_jobs_cancelled_at_once_during_sweeps_leave_the_index_and_keep_ttls(
    cluster: Hosts,
) -> None:
    """24 jobs parked on a question, cancelled all at once from 24 threads while both workers'
    reconcilers sweep; a control job stays parked. Every cancelled job ends at once, leaves the live
    index and stays out across many sweeps; the control stays in; no key ever lacks a TTL."""
    c, _, _ = cluster
    with TtlWatcher(c.url, c.settings.prefix) as watcher:
        control = c.submit(goal=ASK, reasoner="mono", max_rounds=4, answer_timeout_s=3600, timeout_s=7200)
        handles = [
            c.submit(goal=ASK, reasoner="mono", max_rounds=4, answer_timeout_s=3600, timeout_s=7200)
            for _ in range(24)
        ]
        for h in [control, *handles]:
            wait_state(c, h.id, "awaiting_approval")
        ids = [h.id for h in handles]
        # each parked job is in the live index, in a shard that outlives its deadline
        check_shards_outlive_their_jobs(c, [control.id, *ids])
        with ThreadPoolExecutor(len(handles)) as pool:
            list(pool.map(lambda h: h.cancel(), handles))
        assert c.redis.exists(f"{c.settings.prefix}:live:wake") in (0, 1)
        wait_for(lambda: all(c.store.result(x) is not None for x in ids), AT_ONCE, "the cancelled jobs' ends")
        statuses = {x: c.store.result(x).status for x in ids}  # type: ignore[union-attr]
        assert statuses == dict.fromkeys(ids, "cancelled")
        time.sleep(SWEEPS)
        assert {x: state(c, x).get("state") for x in ids} == dict.fromkeys(ids, "cancelled")
        back = {x: live_shard(c, x) for x in ids if live_shard(c, x) is not None}
        assert back == {}, f"ended jobs in the live index after {SWEEPS} s of sweeps: {back}"
        assert live_shard(c, control.id) is not None  # the check above can see a job in the index
        assert state(c, control.id)["state"] == "awaiting_approval"
        check_shards_outlive_their_jobs(c, [control.id])
        check_every_key_timed(c)
        control.cancel()
        assert control.result(timeout=AT_ONCE).status == "cancelled"
    assert watcher.scans > 0
    assert watcher.untimed == {}, f"tandem keys seen without a TTL while written: {watcher.untimed}"
    time.sleep(SWEEPS)
    assert live_shard(c, control.id) is None
    check_every_key_timed(c)


def test_cancels_racing_natural_ends_leave_no_ended_job_in_the_index(cluster: Hosts) -> None:
    """40 jobs of 1 to 4 short rounds, each cancelled after a random delay (0 to 3 s) that straddles
    its natural end, while the sweeps run. Each ends once (completed or cancelled, its record
    agreeing), no ended job is in the live index after many sweeps, and every key has a TTL."""
    c, _, _ = cluster
    rng = random.Random(7)
    with TtlWatcher(c.url, c.settings.prefix) as watcher:
        control = c.submit(goal=ASK, reasoner="mono", max_rounds=4, answer_timeout_s=3600)
        handles = [c.submit(goal=steps(1 + i % 4), reasoner="mono", max_rounds=8) for i in range(40)]

        def cancel_later(h: JobHandle) -> None:
            time.sleep(rng.uniform(0, 3))
            h.cancel()

        with ThreadPoolExecutor(len(handles)) as pool:
            list(pool.map(cancel_later, handles))
        ids = [h.id for h in handles]
        wait_for(lambda: all(c.store.result(x) is not None for x in ids), RESULT_SECONDS, "every job's end")
        wait_state(c, control.id, "awaiting_approval")
        time.sleep(SWEEPS)
        outcome = {x: c.store.result(x).status for x in ids}  # type: ignore[union-attr]
        assert set(outcome.values()) <= {"completed", "cancelled"}, outcome
        records = {x: state(c, x).get("state") for x in ids}
        assert records == outcome, "a job's record disagrees with its result"
        finals = {x: [e.type for e in c.store.read_events(x)].count("final") for x in ids}
        assert finals == dict.fromkeys(ids, 1), f"jobs without exactly one final event: {finals}"
        back = {x: live_shard(c, x) for x in ids if live_shard(c, x) is not None}
        assert back == {}, f"ended jobs in the live index after {SWEEPS} s of sweeps: {back} ({outcome})"
        assert live_shard(c, control.id) is not None
        check_every_key_timed(c)
        control.cancel()
        assert control.result(timeout=AT_ONCE).status == "cancelled"
    cancelled = list(outcome.values()).count("cancelled")
    print("outcomes:", json.dumps({"cancelled": cancelled, "of": len(ids)}))
    assert 0 < cancelled < len(ids), f"the cancels raced nothing: {cancelled} of {len(ids)} cancelled"
    assert watcher.scans > 0
    assert watcher.untimed == {}, f"tandem keys seen without a TTL while written: {watcher.untimed}"


def test_trees_cancelled_mid_sweep_end_at_once_and_leave_the_index(cluster: Hosts) -> None:
    """Three parked trees (a parent waiting for a child that asks and a child that fans out to two
    askers) cancelled at once, from three threads, while the sweeps run: every job of every tree
    ends cancelled at once, none stays or comes back in the live index, every key has a TTL."""
    c, _, _ = cluster
    with TtlWatcher(c.url, c.settings.prefix) as watcher:
        roots = [
            c.submit(goal=fan(ASK, fan(ASK, ASK)), reasoner="mono", max_rounds=4, answer_timeout_s=3600)
            for _ in range(3)
        ]
        every: list[str] = []
        for root in roots:
            wait_state(c, root.id, "waiting_for_children")
            asker, fanner = spawned_children(c, root.id)
            wait_state(c, asker, "awaiting_approval")
            wait_state(c, fanner, "waiting_for_children")
            grand = spawned_children(c, fanner)
            assert len(grand) == 2, grand
            for g in grand:
                wait_state(c, g, "awaiting_approval")
            every += [root.id, asker, fanner, *grand]
        check_shards_outlive_their_jobs(c, every)
        with ThreadPoolExecutor(len(roots)) as pool:
            list(pool.map(lambda h: h.cancel(), roots))
        wait_for(lambda: all(c.store.result(x) is not None for x in every), AT_ONCE, "every tree's end")
        assert {x: c.store.result(x).status for x in every} == dict.fromkeys(every, "cancelled")  # type: ignore[union-attr]
        time.sleep(SWEEPS)
        assert {x: state(c, x).get("state") for x in every} == dict.fromkeys(every, "cancelled")
        back = {x: live_shard(c, x) for x in every if live_shard(c, x) is not None}
        assert back == {}, f"ended jobs of the trees in the live index after {SWEEPS} s: {back}"
        wake = f"{c.settings.prefix}:live:wake"
        if c.redis.exists(wake):
            assert c.redis.ttl(wake) > 0, f"{wake} has TTL {c.redis.ttl(wake)}"
        check_every_key_timed(c)
    assert watcher.scans > 0
    assert watcher.untimed == {}, f"tandem keys seen without a TTL while written: {watcher.untimed}"
