"""The webhook sweeper: no delivery is lost, whatever happened to its worker or its message.

Every worker process runs one ``WebhookSweeper`` thread next to its reconciler. Every ``interval``
it reads the webhook index (``WebhookOutbox``: job ids by when each next needs a look), takes the
shards with due jobs (one worker per shard at a time, under a short lock) and looks at each job:

- it plans what the job's record says it is owed (``delivery.owed``: a ``final`` delivery once it
  ended, a ``waiting_for_person`` one while it is parked), which the step that parked or ended it
  may not have done (its worker died in between); planning twice writes nothing new;
- it sends again every pending delivery that should have been tried and was not: due (or its
  attempt's lease ran out: the worker died mid-POST) for longer than ``grace`` seconds;
- the job is looked at again when its next delivery is due or its lease ends (plus ``grace``), or,
  while it runs, every ``armed_look`` seconds; it leaves the index once it has ended and every
  delivery is settled (``delivered`` or ``failed``), or once its keys have expired;
- a job whose formats this worker does not read (``tandem.tasks.state.versions``) is left to a
  worker that reads them: its spec is not read here, and it is looked at again ``armed_look`` later.

Sending a delivery twice is harmless: only one claim of an attempt can succeed.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from tandem.tasks.runtime import Runtime, get_runtime
from tandem.tasks.spec import FINAL_STATES
from tandem.tasks.state.keys import LIVE_SHARDS, webhook_shard_key
from tandem.tasks.state.sweeping import Sweeping
from tandem.tasks.state.versions import JobVersions
from tandem.tasks.webhooks import delivery

log = logging.getLogger("tandem.webhooks")


class WebhookSweeper(Sweeping):
    """Sweeps the due jobs of the webhook index every ``interval`` seconds (see the module
    docstring); ``grace``: how late a delivery may be before it is sent again."""

    thread_name = "tandem-webhook-sweeper"

    def __init__(
        self, rt: Runtime, *, interval: float, grace: float, armed_look: float, batch: int = 100
    ) -> None:
        self.rt = rt
        self.interval = interval
        self.grace = grace
        self.armed_look = armed_look
        self.batch = batch
        self.token = uuid.uuid4().hex
        super().__init__()

    @classmethod
    def for_runtime(cls, rt: Runtime) -> WebhookSweeper:
        """A sweeper paced like the reconciler of ``rt``'s settings."""
        s = rt.settings
        return cls(
            rt,
            interval=max(min(s.lease_seconds, s.stall_seconds) / 8, 0.1),
            grace=s.lease_seconds,
            armed_look=max(s.stall_seconds, 1.0),
        )

    def sweep(self) -> int:
        """Look at every due job of the shards this worker gets; how many deliveries were sent."""
        redis = self.rt.redis
        seconds, micros = redis.time()
        now = float(seconds) + micros / 1e6
        outbox = self.rt.webhooks
        pipe = redis.pipeline(transaction=False)
        for shard in range(LIVE_SHARDS):
            pipe.zrangebyscore(webhook_shard_key(outbox.prefix, shard), "-inf", now, start=0, num=1)
        due = [shard for shard, first in enumerate(pipe.execute()) if first]
        sent = 0
        for shard in due:
            lock = f"{webhook_shard_key(outbox.prefix, shard)}:lock"
            if not redis.set(lock, self.token, nx=True, px=max(int(self.interval * 2000), 500)):
                continue
            try:
                for job_id in outbox.due_jobs(shard, now, self.batch):
                    sent += self.look(job_id, now)
            finally:
                if redis.get(lock) in (self.token, self.token.encode()):
                    redis.delete(lock)
        return sent

    def look(self, job_id: str, now: float) -> int:
        """Plan what ``job_id`` is owed, send what is overdue, and set its next look; how many
        deliveries were sent."""
        rt, outbox = self.rt, self.rt.webhooks
        record = rt.machine.record(job_id)
        if record and rt.machine.versions.fit(JobVersions.of(record)) != "ok":
            outbox.look_again(job_id, now + self.armed_look)  # a worker that reads it plans for it
            return 0
        spec = rt.store.spec(job_id)
        states = outbox.deliveries(job_id)
        if record and spec is not None:
            new = delivery.owed(rt, job_id, record, spec, known={d.delivery.id for d in states})
            if new:
                delivery.plan(rt, job_id, new)
                states = outbox.deliveries(job_id)
        pending = [d for d in states if d.state == "pending"]
        sent = 0
        later: list[float] = []
        for d in pending:
            ready = max(d.due, d.lease)
            if ready + self.grace <= now:
                log.warning(
                    "job %s: webhook delivery %s (attempt %d) was not tried in time; sending it again",
                    job_id,
                    d.delivery.id,
                    d.attempt + 1,
                )
                delivery.send(job_id, d.delivery.id)
                sent += 1
                later.append(now + self.rt.settings.webhooks.timeout + 2 * self.grace)
            else:
                later.append(ready + self.grace)
        if later:
            outbox.look_again(job_id, max(min(later), now + self.interval))
        elif record and record.get("state") not in FINAL_STATES:
            outbox.look_again(job_id, now + self.armed_look)
        else:
            outbox.unwatch(job_id)
        return sent


_sweeper: WebhookSweeper | None = None


@worker_ready.connect
def _start_sweeper(**_: Any) -> None:
    global _sweeper
    _sweeper = WebhookSweeper.for_runtime(get_runtime())
    _sweeper.start()


@worker_shutdown.connect
def _stop_sweeper(**_: Any) -> None:
    if _sweeper is not None:
        _sweeper.stop()
