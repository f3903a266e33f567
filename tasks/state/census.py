"""``JobCensus``: how many live jobs are in each state, and why the parked ones wait, read at a
metrics scrape.

Counting by state could be kept by the state machine's scripts (one counter per state, moved at
every transition), but such counters would be keys outside the job's ``{<job_id>}`` hash tag on every
step's path, which the Redis Cluster contract forbids, and they would drift for good whenever a
record expires or a script is interrupted. The census reads what is already there instead: the
reconciler's live-job index (``LIVE_SHARDS`` sorted sets; every queued, running, waiting or
approval-awaiting job, and ended ones until their Celery result is stored) gives the exact number of
live jobs (one ``ZCARD`` per shard), and the records of at most ``limit`` of them (the same share of
each shard, pipelined ``HMGET``) give the split by state. Up to ``limit`` live jobs the counts are
exact; beyond, they are the sample's split scaled to the exact total (an estimate, so a scrape of a
fleet with a million jobs costs the same as one with ``limit``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tandem.tasks.spec import FINAL_STATES
from tandem.tasks.state.keys import LIVE_SHARDS, job_key, live_shard_key

PARK_REASONS = ("in_flight", "rpm", "tpm", "backoff", "probe")
"""The capacity waits of a parked step, kept as they are (``tandem.tasks.hosts.capacity``)."""

LIVE_STATES = ("queued", "running", "waiting", "awaiting_approval", "waiting_for_children")
"""The states of a job that has not ended (the ``state`` label, with ``ended`` and ``unknown``)."""

DEFAULT_LIMIT = 2000
"""Records read per census at most."""


def park_reason(state: str, wait_for: str) -> str | None:
    """The ``reason`` label of a parked job: ``approval`` for one awaiting a person, a capacity
    wait's own reason, ``retry`` for a step waiting out a transient failure (a model host's 429/5xx,
    Redis or the broker), ``None`` for a job that is not parked. A bounded set: never free text."""
    if state == "awaiting_approval":
        return "approval"
    if state == "waiting_for_children":
        return "children"
    if state != "waiting":
        return None
    return wait_for if wait_for in PARK_REASONS else "retry"


@dataclass(frozen=True)
class Census:
    """Live jobs by state and parked jobs by reason; ``live`` is exact, the rest estimated when
    ``sampled < live``."""

    live: int = 0
    sampled: int = 0
    states: dict[str, float] = field(default_factory=dict)
    parked: dict[str, float] = field(default_factory=dict)


class JobCensus:
    """Counts the live jobs of the store under ``prefix`` on ``redis`` (see the module docstring)."""

    def __init__(self, redis: Any, prefix: str, limit: int = DEFAULT_LIMIT) -> None:
        self.redis = redis
        self.prefix = prefix
        self.limit = max(LIVE_SHARDS, limit)

    def read(self) -> Census:
        """One census: ``LIVE_SHARDS`` ``ZCARD``s and ``ZRANGE``s in one pipeline, then the sampled
        records' ``state`` and ``wait_for`` in another."""
        per_shard = self.limit // LIVE_SHARDS
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(LIVE_SHARDS):
            pipe.zcard(live_shard_key(self.prefix, shard))
        for shard in range(LIVE_SHARDS):
            pipe.zrange(live_shard_key(self.prefix, shard), 0, per_shard - 1)
        replies = pipe.execute()
        live = sum(int(n) for n in replies[:LIVE_SHARDS])
        ids = [
            raw.decode() if isinstance(raw, bytes) else str(raw)
            for chunk in replies[LIVE_SHARDS:]
            for raw in chunk
        ]
        if not ids:
            return Census(live=live)
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(job_key(self.prefix, job_id, "state"), "state", "wait_for")
        states: Counter[str] = Counter()
        parked: Counter[str] = Counter()
        for state_raw, wait_raw in pipe.execute():
            if state_raw is None:  # its record expired; the reconciler drops it from the index
                continue
            state = state_raw.decode() if isinstance(state_raw, bytes) else str(state_raw)
            wait_for = wait_raw.decode() if isinstance(wait_raw, bytes) else str(wait_raw or "")
            if state in FINAL_STATES:  # ended, its Celery result not stored yet: counted as ended
                state = "ended"
            elif state not in LIVE_STATES:  # written by a newer worker: a bounded label all the same
                state = "unknown"
            states[state] += 1
            reason = park_reason(state, wait_for)
            if reason is not None:
                parked[reason] += 1
        scale = live / len(ids) if len(ids) < live else 1.0
        return Census(
            live=live,
            sampled=len(ids),
            states={s: n * scale for s, n in states.items()},
            parked={r: n * scale for r, n in parked.items()},
        )
