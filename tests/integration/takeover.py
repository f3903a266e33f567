"""What a SIGKILLed worker left behind, and how long until other workers took it over.

At a kill the chaos run notes, for every live job, the work the killed process had:

- **held**: a step or a tool call whose lease names the killed process (claim tokens are
  ``host:pid:random``, ``tandem.tasks.state.machine.claim_token``);
- **reserved**: the job's current step (or an unclaimed call of it) whose message the broker had
  handed to a worker since the previous kill (it is in kombu's ``unacked`` set) without any worker
  claiming it: a message the killed process had taken from the queue but not started. A live
  worker may have been between delivery and claim at that moment: ``Watch.settle`` drops the
  units whose message was acknowledged after all (a dead worker acknowledges nothing).

A unit of work is *taken over* when another worker claims it (the step's epoch or the call's
attempt count grows) or the job moved past it. A job's **takeover time** is the time from the kill
until all of its units were taken over: the figure ``bench.chaos`` reports per affected job. A job
is *next to a Redis restart* when Redis restarted between its kill and its takeover, or less than
``RESTART_RECOVERY`` seconds before its kill.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from tandem.tasks.spec import FINAL_STATES
from tandem.tasks.state.claims import token_pid
from tandem.tasks.state.store import JobStore
from tandem.tasks.steps.messages import STEP_TASKS

_KIND_OF_TASK = {task: kind for kind, task in STEP_TASKS.items()}
RESTART_RECOVERY = 6.0
"""Seconds after a Redis restart's start during which workers are still reconnecting (the restart
takes 1.5–2 s, Celery's consumers retry after 2 s, then restore their unacknowledged messages)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


@dataclass(frozen=True)
class Unit:
    """One piece of a job's work at the kill: a step (``index`` 0) or call ``index`` of a tool step,
    with the step's epoch or the call's attempt count then."""

    round: int
    kind: str
    index: int
    seen: int
    reserved: bool
    tag: str = ""
    """The broker's delivery tag of a reserved unit's message."""
    lease_left: float = 0.0
    """Seconds the killed worker's lease on a held unit still had to run at the kill."""


@dataclass
class Affected:
    """A job the kill affected, and when (if yet) all its units were taken over."""

    job: str
    killed_at: float
    units: list[Unit]
    taken_over_at: float | None = None
    restart_between: bool = False

    @property
    def reserved(self) -> bool:
        """Whether any unit was only reserved (not started) by the killed worker."""
        return any(u.reserved for u in self.units)


def _unacked(redis: Redis, since: float) -> dict[tuple[str, int, str, int], str]:
    """(job, round, kind, call index) -> delivery tag of the step messages the broker handed out
    after ``since`` and not yet acknowledged."""
    delivered = [_text(tag) for tag in redis.zrangebyscore("unacked_index", since, "+inf")]
    found: dict[tuple[str, int, str, int], str] = {}
    if not delivered:
        return found
    for tag, raw in zip(delivered, redis.hmget("unacked", delivered), strict=True):
        if raw is None:
            continue
        message = json.loads(raw)[0]
        headers = message.get("headers") or {}
        kind = _KIND_OF_TASK.get(headers.get("task", ""))
        parts = str(headers.get("id", "")).split(".")
        if kind is None or len(parts) < 3:
            continue
        index = int(parts[2]) if kind == "tools" and len(parts) >= 4 else 0
        found[(parts[0], int(parts[1]), kind, index)] = tag
    return found


def at_kill(
    redis: Redis, store: JobStore, jobs: list[str], pid: int, killed_at: float, since: float
) -> list[Affected]:
    """The jobs whose work the process ``pid`` held or had reserved (read just before its kill)."""
    pipe = redis.pipeline(transaction=False)
    for job in jobs:
        pipe.hgetall(store.key(job, "state"))
        pipe.hgetall(store.key(job, "calls"))
        pipe.hgetall(store.key(job, "tools"))
    replies = pipe.execute()
    clock = redis.time()
    now = clock[0] + clock[1] / 1e6
    reserved = _unacked(redis, since)
    affected: list[Affected] = []
    for n, job in enumerate(jobs):
        rec = {_text(k): _text(v) for k, v in replies[3 * n].items()}
        calls = {_text(k): _text(v) for k, v in replies[3 * n + 1].items()}
        results = {_text(k) for k in replies[3 * n + 2]}
        if not rec or rec.get("state") in FINAL_STATES:
            continue
        round_no, kind = int(rec.get("round") or 0), rec.get("kind", "")
        units: list[Unit] = []
        if kind == "tools":
            for i in range(1, int(rec.get("calls") or 0) + 1):
                if f"{round_no}:{i}" in results:
                    continue
                holder, attempts = calls.get(f"{i}:holder", ""), int(calls.get(f"{i}:attempts") or 0)
                if holder and token_pid(holder) == pid:
                    left = float(calls.get(f"{i}:until") or 0) - now
                    units.append(Unit(round_no, kind, i, attempts, reserved=False, lease_left=left))
                elif not holder and (job, round_no, kind, i) in reserved:
                    tag = reserved[(job, round_no, kind, i)]
                    units.append(Unit(round_no, kind, i, attempts, reserved=True, tag=tag))
        else:
            holder, epoch = rec.get("holder", ""), int(rec.get("epoch") or 0)
            if holder and token_pid(holder) == pid:
                left = float(rec.get("lease_until") or 0) - now
                units.append(Unit(round_no, kind, 0, epoch, reserved=False, lease_left=left))
            elif not holder and (job, round_no, kind, 0) in reserved:
                tag = reserved[(job, round_no, kind, 0)]
                units.append(Unit(round_no, kind, 0, epoch, reserved=True, tag=tag))
        if units:
            affected.append(Affected(job, killed_at, units))
    return affected


def _taken_over(unit: Unit, rec: dict[str, str], calls: dict[str, str], done: bool) -> bool:
    if not rec or rec.get("state") in FINAL_STATES:
        return True
    if (int(rec.get("round") or 0), rec.get("kind", "")) != (unit.round, unit.kind):
        return True
    if unit.index == 0:
        return int(rec.get("epoch") or 0) > unit.seen
    return done or int(calls.get(f"{unit.index}:attempts") or 0) > unit.seen


@dataclass
class Watch:
    """The affected jobs of every kill so far, checked on each ``poll``."""

    pending: list[Affected] = field(default_factory=list)
    ended: list[Affected] = field(default_factory=list)
    restart_at: float = float("-inf")
    """When Redis last restarted (``time.monotonic``)."""

    def add(self, affected: list[Affected]) -> None:
        """Watch these jobs from now on (a kill within ``RESTART_RECOVERY`` s of a Redis restart
        counts as next to it: the workers are still reconnecting)."""
        for a in affected:
            a.restart_between = a.killed_at - self.restart_at < RESTART_RECOVERY
        self.pending.extend(affected)

    def restarted(self) -> None:
        """Redis restarted: every job still waiting for its takeover was waiting through it."""
        self.restart_at = time.monotonic()
        for a in self.pending:
            a.restart_between = True

    def poll(self, redis: Redis, store: JobStore) -> None:
        """Mark the jobs whose units were all taken over by now."""
        if not self.pending:
            return
        now = time.monotonic()
        pipe = redis.pipeline(transaction=False)
        for a in self.pending:
            pipe.hmget(store.key(a.job, "state"), ["state", "round", "kind", "epoch"])
            pipe.hgetall(store.key(a.job, "calls"))
            pipe.hgetall(store.key(a.job, "tools"))
        replies = pipe.execute()
        still: list[Affected] = []
        for n, a in enumerate(self.pending):
            values = replies[3 * n]
            rec = (
                {}
                if values[0] is None
                else dict(zip(("state", "round", "kind", "epoch"), map(_text, values), strict=True))
            )
            calls = {_text(k): _text(v) for k, v in replies[3 * n + 1].items()}
            results = {_text(k) for k in replies[3 * n + 2]}
            if all(_taken_over(u, rec, calls, f"{u.round}:{u.index}" in results) for u in a.units):
                a.taken_over_at = now
                self.ended.append(a)
            else:
                still.append(a)
        self.pending = still

    def settle(self, redis: Redis) -> None:
        """At the end of the run: forget reserved units whose message a worker acknowledged (a
        live worker had it, not the killed one), and jobs left with no unit."""
        tags = [u.tag for a in self.ended + self.pending for u in a.units if u.reserved]
        held = redis.hmget("unacked", tags) if tags else []
        acked = {t for t, raw in zip(tags, held, strict=True) if not raw}
        for group in (self.ended, self.pending):
            for a in group:
                a.units = [u for u in a.units if not (u.reserved and u.tag in acked)]
            group[:] = [a for a in group if a.units]

    def seconds(self, *, with_restart: bool | None = None, reserved: bool | None = None) -> list[float]:
        """Takeover times of the jobs taken over: all, or only those with/without a Redis restart
        between their kill and their takeover, only those with/without reserved work."""
        return [
            a.taken_over_at - a.killed_at
            for a in self.ended
            if a.taken_over_at is not None
            and (with_restart is None or a.restart_between == with_restart)
            and (reserved is None or a.reserved == reserved)
        ]
