"""``JobStore``: a job's spec, status, tool results, event stream and final result in Redis.

Keys live under ``{prefix}:job:{job_id}:``. Every write a step makes is idempotent: tool results
and step transitions are set once (``HSETNX``), so a step that runs twice changes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from redis import Redis
from redis.client import Pipeline

from tandem.broker_config import Settings
from tandem.reasoner.memory import RedisReasonerMemory
from tandem.reasoner.messages import FunctionCallResult
from tandem.tasks.job_events import Final, JobEvent, StreamSettings, decode_entry, make_event
from tandem.tasks.spec import FINAL_STATES, JobResult, JobSpec, JobStatus, ReasonerKind
from tandem.toolkit.redaction import redact, redact_data, redact_known

_FIXED_KEYS = ("spec", "status", "result", "events", "cancel", "tools", "done", "memory")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


RECENT_LIMIT = 1000
"""How many jobs the index of recent jobs (``JobStore.recent``) keeps."""


class JobStore:
    """Reads and writes one Redis database's jobs.

    ``ttl`` bounds the life of keys written before a job ends (its event stream, the index of
    recent jobs); ``stream`` says how the event stream is written.
    """

    def __init__(
        self,
        redis: Redis,
        prefix: str = "tandem",
        *,
        ttl: int = 86400,
        stream: StreamSettings | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl = ttl
        self.stream = stream or StreamSettings()

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings) -> JobStore:
        """The store as configured by ``settings`` (prefix, TTL, event stream)."""
        stream = StreamSettings(
            maxlen=settings.events_maxlen,
            deltas=settings.deltas,
            delta_interval=settings.delta_interval_ms / 1000,
            delta_max_chars=settings.delta_max_chars,
        )
        return cls(redis, settings.prefix, ttl=settings.memory_ttl, stream=stream)

    def key(self, job_id: str, part: str) -> str:
        """The Redis key of ``part`` of a job."""
        return f"{self.prefix}:job:{job_id}:{part}"

    # -- spec, status, result ----------------------------------------------------------------

    def create(self, job_id: str, spec: JobSpec) -> bool:
        """Store the spec and a ``queued`` status; ``False`` if the job already exists."""
        created = bool(self.redis.set(self.key(job_id, "spec"), spec.model_dump_json(), nx=True))
        if created:
            self.set_status(job_id, state="queued", reasoner=spec.reasoner)
            self.remember(job_id)
        return created

    def mark_queued(self, job_id: str, reasoner: ReasonerKind = "dual") -> bool:
        """Record a job as ``queued`` before its intake message is sent (no-op if the job exists),
        so that followers know it at once; ``False`` if it had a status already."""
        status = JobStatus(job_id=job_id, state="queued", reasoner=reasoner, updated_at=time.time())
        written = bool(
            self.redis.set(self.key(job_id, "status"), status.model_dump_json(), nx=True, ex=self.ttl)
        )
        self.remember(job_id)
        return written

    def discard_queued(self, job_id: str) -> None:
        """Undo ``mark_queued`` for a job the intake refused (a refused spec stores nothing): its
        ``queued`` status and its entry among the recent jobs go; a started job is left alone."""
        key = self.key(job_id, "status")

        def undo(pipe: Pipeline) -> None:
            raw: Any = pipe.get(key)
            started = pipe.exists(self.key(job_id, "spec"))
            if raw is None or started or JobStatus.model_validate_json(raw).state != "queued":
                return
            pipe.multi()
            pipe.delete(key)
            pipe.zrem(f"{self.prefix}:recent-jobs", job_id)

        self.redis.transaction(undo, key, self.key(job_id, "spec"))

    def remember(self, job_id: str, at: float | None = None) -> None:
        """Add the job to the index of recent jobs (kept to the newest ``RECENT_LIMIT``, idempotent)."""
        key = f"{self.prefix}:recent-jobs"
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(key, {job_id: at or time.time()}, nx=True)
        pipe.zremrangebyrank(key, 0, -RECENT_LIMIT - 1)
        pipe.zremrangebyscore(key, "-inf", time.time() - self.ttl)
        pipe.expire(key, self.ttl)
        pipe.execute()

    def recent(self, limit: int = 50) -> list[JobStatus]:
        """The newest ``limit`` jobs' statuses, newest first (jobs whose keys expired are left out)."""
        ids = [_text(i) for i in self.redis.zrevrange(f"{self.prefix}:recent-jobs", 0, max(limit, 1) - 1)]
        raws = self.redis.mget([self.key(i, "status") for i in ids]) if ids else []
        return [JobStatus.model_validate_json(raw) for raw in raws if raw is not None]

    def spec(self, job_id: str) -> JobSpec | None:
        """The job's spec, or ``None`` for an unknown job."""
        raw = self.redis.get(self.key(job_id, "spec"))
        return None if raw is None else JobSpec.model_validate_json(raw)

    def status(self, job_id: str) -> JobStatus | None:
        """The job's status, or ``None`` for an unknown job."""
        raw = self.redis.get(self.key(job_id, "status"))
        return None if raw is None else JobStatus.model_validate_json(raw)

    def set_status(self, job_id: str, **fields: Any) -> JobStatus:
        """Update some status fields; a final state is never replaced by another state.

        ``waiting`` is cleared unless given: it describes only the latest thing the job does.

        The read and the write are one optimistic transaction (``WATCH``): a step writing
        ``running`` cannot overwrite a final state that ``finish`` wrote in between.
        """
        key = self.key(job_id, "status")
        if fields.get("error"):
            fields["error"] = redact(fields["error"])
        fields.setdefault("waiting", None)  # a wait ends with the next thing the job does

        def update(pipe: Pipeline) -> JobStatus:
            raw: Any = pipe.get(key)  # watched, so executed at once: the stored value
            current = JobStatus(job_id=job_id) if raw is None else JobStatus.model_validate_json(raw)
            if current.state in FINAL_STATES and fields.get("state", current.state) != current.state:
                return current
            updated = current.model_copy(update={**fields, "updated_at": time.time()})
            pipe.multi()
            pipe.set(key, updated.model_dump_json(), keepttl=True)  # the TTL mark_queued gave it
            return updated

        return self.redis.transaction(update, key, value_from_callable=True)

    def result(self, job_id: str) -> JobResult | None:
        """The final result, once the job has ended."""
        raw = self.redis.get(self.key(job_id, "result"))
        return None if raw is None else JobResult.model_validate_json(raw)

    def finish(self, result: JobResult, ttl: int) -> JobResult:
        """Store the final result (the first one stored wins), set the status, expire the job's keys
        ``ttl`` seconds from now, and return the stored result."""
        job_id = result.job_id
        result = result.model_copy(
            update={"error": redact(result.error) if result.error else result.error,
                    "deliverable": redact_known(result.deliverable)}
        )
        first = self.redis.set(self.key(job_id, "result"), result.model_dump_json(), nx=True)
        stored = self.result(job_id) or result
        self.set_status(job_id, state=stored.status, error=stored.error, step="finalize")
        if first:  # one ``final`` event per job, however often a duplicate step gets here
            self.publish(job_id, Final.of(stored))
        pipe = self.redis.pipeline()
        for part in _FIXED_KEYS:
            pipe.expire(self.key(job_id, part), ttl)
        pipe.execute()
        return stored

    # -- cancellation ----------------------------------------------------------------------

    def request_cancel(self, job_id: str) -> None:
        """Ask the job to stop at its next step."""
        self.redis.set(self.key(job_id, "cancel"), "1")

    def cancel_requested(self, job_id: str) -> bool:
        """True once ``request_cancel`` was called."""
        return bool(self.redis.exists(self.key(job_id, "cancel")))

    # -- tool results and transitions ------------------------------------------------------------

    def save_tool_result(self, job_id: str, round_no: int, result: FunctionCallResult) -> bool:
        """Store one tool call's result; ``False`` if one was already stored for that call."""
        field = f"{round_no}:{result.index}"
        return bool(self.redis.hsetnx(self.key(job_id, "tools"), field, result.model_dump_json()))

    def tool_result(self, job_id: str, round_no: int, index: int) -> FunctionCallResult | None:
        """The stored result of call ``index`` of ``round_no``, if any."""
        raw = self.redis.hget(self.key(job_id, "tools"), f"{round_no}:{index}")
        return None if raw is None else FunctionCallResult.model_validate_json(raw)

    def tool_results(self, job_id: str, round_no: int, count: int) -> list[FunctionCallResult | None]:
        """The stored results of calls 1..``count`` of ``round_no`` (``None`` where missing)."""
        fields = [f"{round_no}:{i}" for i in range(1, count + 1)]
        raws = self.redis.hmget(self.key(job_id, "tools"), fields) if fields else []
        return [None if r is None else FunctionCallResult.model_validate_json(r) for r in raws]

    def mark_done(self, job_id: str, step: str, transition: str) -> bool:
        """Record that ``step`` finished and moved on to ``transition``; ``True`` for the first caller.

        Only the first caller dispatches the next step, so a duplicated step cannot fork the job.
        """
        return bool(self.redis.hsetnx(self.key(job_id, "done"), step, transition))

    def done(self, job_id: str, step: str) -> str | None:
        """The transition recorded for ``step``, if it finished."""
        raw = self.redis.hget(self.key(job_id, "done"), step)
        return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)

    # -- memory and events -------------------------------------------------------------------

    def memory(self, job_id: str) -> RedisReasonerMemory:
        """The job's conversation."""
        return RedisReasonerMemory(self.redis, job_id, prefix=self.prefix)

    def publish(self, job_id: str, event: JobEvent | str, data: dict[str, Any] | None = None) -> str:
        """Append an event to the job's stream (secrets redacted) and return its stream id.

        ``event`` is a ``JobEvent``, or an event kind with its fields in ``data``
        (``EventError`` when they do not fit the kind). The stream is capped at about
        ``stream.maxlen`` entries and expires ``ttl`` seconds after its last write (``finish``
        shortens that to the job's own expiry).
        """
        typed = make_event(event, data or {}) if isinstance(event, str) else event
        key = self.key(job_id, "events")
        pipe = self.redis.pipeline(transaction=False)
        entry = {  # the stream entry of ``typed`` (see ``job_events.encode_event``), secrets redacted
            "type": typed.type,
            "data": json.dumps(redact_data(typed.data), ensure_ascii=False, default=str),
            "at": f"{typed.at or time.time():.3f}",
        }
        pipe.xadd(key, entry, maxlen=self.stream.maxlen, approximate=True)
        pipe.expire(key, self.ttl)
        entry_id, _ = pipe.execute()
        return _text(entry_id)

    def read_events(self, job_id: str, after: str = "0", count: int = 100) -> list[JobEvent]:
        """Up to ``count`` events written after stream id ``after``, without waiting."""
        start = "-" if after in ("", "0", "0-0") else f"({after}"
        entries = self.redis.xrange(self.key(job_id, "events"), min=start, count=count)
        return [decode_entry(entry_id, fields) for entry_id, fields in entries]

    def events(
        self, job_id: str, *, last_id: str = "0", block_ms: int = 1000, timeout: float | None = None
    ) -> Iterator[JobEvent]:
        """Yield the job's events after stream id ``last_id`` (``"0"``: from the first, ``"$"``:
        only new ones), waiting for new ones, until ``final``. Stops after ``timeout`` seconds if given.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        key = self.key(job_id, "events")
        if last_id == "$":  # "from now": the id of the newest entry, so nothing is skipped later
            newest = self.redis.xrevrange(key, count=1)
            last_id = _text(newest[0][0]) if newest else "0"
        while deadline is None or time.monotonic() < deadline:
            batch = self.redis.xread({key: last_id}, count=100, block=block_ms)
            for _stream, entries in batch or []:
                for entry_id, fields in entries:
                    event = decode_entry(entry_id, fields)
                    last_id = event.id
                    yield event
                    if event.type == "final":
                        return
            # Nothing new: stop for an unknown job, or for one that has ended (every event was
            # read, even if its finisher died before publishing ``final``).
            if not batch and (self.status(job_id) is None or self.result(job_id) is not None):
                return
