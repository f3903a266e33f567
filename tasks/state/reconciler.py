"""The reconciler: no job stalls, whatever happened to its messages.

Every worker process runs one ``Reconciler`` thread. Every ``interval`` (an eighth of the lease or
the stall time, whichever is shorter) it checks the live-job index (``LIVE_SHARDS`` sorted sets
scored by when each job next needs a look: one pipelined read when nothing is due), sweeps the
shards with due jobs (one worker per shard at a time, under a short lock) and asks
``JobMachine.reconcile`` about each due job:

- a step whose lease ran out (its worker died or was paused past the lease) is a *lease expiry*:
  it is counted and the step is sent again at once; after ``max_lease_expiries`` of one step the
  job fails;
- a step nobody holds that made no progress for ``stall_seconds`` (a lost, revoked or never-sent
  message, or one prefetched by a worker that died) is sent again; a step whose outbox was never
  sent is sent after ``lease_seconds``; time spent waiting in a queue is never a lease expiry;
- a job past its deadline fails with its last error; a cancelled job ends once no worker holds its
  step or one of its tool calls (a call under way stores its result first: it is not lost);
- a job awaiting approval is not stalled (its held calls are never sent again); once its approval
  timeout passed, ``expire(job_id)`` rejects its undecided calls and the job goes on.
- a job still ``queued`` after ``stall_seconds`` (its intake message was lost before any worker
  created its record) has its intake message sent again, from the spec ``submit`` stored.
- a job whose formats this worker does not read (written or taken by a newer release, or one too
  old: ``tandem.tasks.state.versions``) is left alone, nothing written: a worker that reads them
  looks after it. Its id is logged once per worker process.
- an ended job whose Celery result is not in the result backend yet (a backend apart from the job
  store, down or unreachable when the job ended, or a worker killed in between) stays indexed:
  ``deliver(job_id, mark)`` stores it, and the job leaves the index once it is out. A failed
  delivery is tried again ``DELIVERY_RETRY`` seconds later, and ends this sweep's deliveries (the
  backend is likely down: each would wait for its time-out).

A job is looked at again when its verdict says it next needs one (its lease ends, its stall time
is up, ...), but never sooner than one interval and never later than two (cancels and deadlines
are seen within two intervals): a lease that runs out is acted on within one interval.

Sending a step twice is harmless: only one claim of a step can succeed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from tandem.tasks import metrics
from tandem.tasks.state.claims import Reconciled
from tandem.tasks.state.keys import LIVE_SHARDS, WAKE_KEY, job_key
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.sweeping import Sweeping
from tandem.tasks.state.versions import OncePerJob

log = logging.getLogger("tandem.reconciler")

DELIVERY_RETRY = 15.0
"""Seconds between two attempts to store an ended job's Celery result."""
WAKE_WAIT = 1.5
"""The longest one ``BLPOP`` of the wake list blocks (``TANDEM_REDIS_SOCKET_TIMEOUT`` is 2 s or more)."""


class Reconciler(Sweeping):
    """Sweeps the due jobs of the live-job index every ``interval`` seconds.

    ``resend(job_id, verdict)`` sends a job's step (or its intake message) again; ``end(job_id,
    verdict)`` ends a job (``deadline``, ``cancel``, ``give-up``); ``expire(job_id)`` rejects the
    undecided calls of a job whose approval timed out; ``deliver(job_id, mark)`` stores an ended
    job's Celery result (``False`` when the backend refused it); ``children(job_id)`` checks the
    wait of a job waiting for its child jobs (``True`` when it resumed it).
    """

    thread_name = "tandem-reconciler"

    def __init__(
        self,
        machine: JobMachine,
        *,
        lease_seconds: float,
        stall_seconds: float,
        max_lease_expiries: int,
        resend: Callable[[str, Reconciled], None],
        end: Callable[[str, Reconciled], None],
        expire: Callable[[str], None] | None = None,
        deliver: Callable[[str, str], bool] | None = None,
        children: Callable[[str], bool] | None = None,
        batch: int = 200,
    ) -> None:
        self.machine = machine
        self.lease_seconds = lease_seconds
        self.stall_seconds = stall_seconds
        self.max_lease_expiries = max_lease_expiries
        self.resend = resend
        self.end = end
        self.expire = expire
        self.deliver = deliver
        self.children = children
        self.batch = batch
        self._backend_down = False
        self.interval = max(min(lease_seconds, stall_seconds) / 8, 0.1)
        self.token = uuid.uuid4().hex
        self._unread = OncePerJob()
        self.wake_key = WAKE_KEY.format(prefix=machine.prefix)
        super().__init__()

    def pause(self) -> bool:
        """Wait for the next sweep: ``interval`` seconds, or less when a cancel pushed to the wake
        list (``JobStore.request_cancel``): one reconciler of the fleet takes the push, clears the
        list and sweeps at once, so a cancelled job that waits (for an approval, an answer, its
        children) ends now rather than at the next sweep. The wait is a ``BLPOP`` of at most
        ``WAKE_WAIT`` seconds at a time (under any socket time-out the settings allow); with Redis
        away, it falls back to sleeping."""
        deadline = time.monotonic() + self.interval
        while (left := deadline - time.monotonic()) > 0:
            if self._stop.is_set():
                return True
            try:
                if self.machine.redis.blpop([self.wake_key], timeout=min(left, WAKE_WAIT)):
                    self.machine.redis.delete(self.wake_key)  # one sweep answers every push so far
                    return self._stop.is_set()
            except Exception:  # Redis away: the sweep's own errors are logged
                return self._stop.wait(max(left, 0.0))
        return self._stop.is_set()

    def sweep(self) -> int:
        """Look at every due job of the shards this worker gets; return how many were acted on."""
        redis = self.machine.redis
        seconds, micros = redis.time()
        now = float(seconds) + micros / 1e6
        pipe = redis.pipeline(transaction=False)
        for shard in range(LIVE_SHARDS):
            pipe.zrangebyscore(self.machine.shard_key(shard), "-inf", now, start=0, num=1)
        due = [shard for shard, first in enumerate(pipe.execute()) if first]
        acted = 0
        self._backend_down = False
        for shard in due:
            key = self.machine.shard_key(shard)
            lock = f"{key}:lock"
            if not redis.set(lock, self.token, nx=True, px=max(int(self.interval * 2000), 500)):
                continue
            try:
                for raw in redis.zrangebyscore(key, "-inf", now, start=0, num=self.batch):
                    job_id = raw.decode() if isinstance(raw, bytes) else str(raw)
                    acted += self._look(job_id, now)
            finally:
                if redis.get(lock) in (self.token, self.token.encode()):
                    redis.delete(lock)
        return acted

    def next_look(self, verdict: Reconciled, now: float) -> float:
        """When to look at a job again after ``verdict``: when it says, within one to two
        intervals from ``now``."""
        wanted = verdict.next_look or now + 2 * self.interval
        return min(max(wanted, now + self.interval), now + 2 * self.interval)

    def _schedule(self, job_id: str, verdict: Reconciled, now: float) -> None:
        """Set the job's next look (``next_look``). A cancel that came after ``reconcile`` read
        the job moved its look to now, and this would move it back: when the job's cancel flag is
        there (read in the same round trip) and the verdict did not end it, it is looked at now,
        at the sweep the cancel's push wakes (``JobStore.request_cancel``). A job that ended since
        ``reconcile`` read it is not put back (``JobMachine.look_at``)."""
        redis = self.machine.redis
        pipe = redis.pipeline(transaction=False)
        self.machine.look_at(job_id, self.next_look(verdict, now), pipe)
        pipe.exists(job_key(self.machine.prefix, job_id, "cancel"))
        if pipe.execute()[1] and verdict.action in ("wait", "parked", "children"):
            self.machine.look_at(job_id, now)

    def _look(self, job_id: str, now: float) -> int:
        verdict = self.machine.reconcile(
            job_id, self.stall_seconds, self.max_lease_expiries, outbox_grace=self.lease_seconds
        )
        if verdict.action == "gone":
            self.machine.unindex(job_id)
            return 0
        if verdict.action not in ("wait", "parked", "newer", "older", "children"):
            metrics.RECONCILER_ACTIONS.labels(verdict.action).inc()
        if verdict.action == "deliver":
            return self._deliver(job_id, verdict.mark, now)
        self._schedule(job_id, verdict, now)
        if verdict.action == "wait":
            return 0
        if verdict.action == "children":  # a child's end that was not heard: checked here too
            return int(self.children is not None and bool(self.children(job_id)))
        if verdict.action in ("newer", "older"):
            if self._unread.first(job_id):
                log.warning(
                    "job %s: its formats (%s) are %s than this worker reads (%s): left to a worker "
                    "that reads them (`tandem version-check` counts such jobs)",
                    job_id,
                    verdict.versions,
                    verdict.action,
                    self.machine.versions,
                )
            return 0
        if verdict.action == "parked":
            if self.expire is None or time.time() < verdict.until:
                return 0
            log.warning("job %s: no decision on its calls awaiting approval in time; rejecting them", job_id)
            self.expire(job_id)
            return 1
        if verdict.action == "intake":
            log.warning("job %s: still queued, no worker took it; sending its intake message again", job_id)
            self.resend(job_id, verdict)
        elif verdict.action == "resend":
            log.warning(
                "job %s: step %s of round %d stalled; sending it again%s",
                job_id,
                verdict.kind,
                verdict.round,
                f" (calls {list(verdict.indices)})" if verdict.indices else "",
            )
            self.resend(job_id, verdict)
        else:
            self.end(job_id, verdict)
        return 1

    def _deliver(self, job_id: str, mark: str, now: float) -> int:
        if self.deliver is None or self._backend_down:
            self.machine.look_at(job_id, now + DELIVERY_RETRY)
            return 0
        try:
            done = self.deliver(job_id, mark)
        except Exception:
            log.warning("job %s: storing its Celery result failed", job_id, exc_info=True)
            done = False
        if done:
            self.machine.unindex(job_id)
        else:
            self._backend_down = True
            self.machine.look_at(job_id, now + DELIVERY_RETRY)
        return 1
