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

from tandem.reasoner.memory import RedisReasonerMemory
from tandem.reasoner.messages import FunctionCallResult
from tandem.tasks.spec import FINAL_STATES, JobResult, JobSpec, JobStatus
from tandem.toolkit.redaction import redact, redact_data, redact_known

_FIXED_KEYS = ("spec", "status", "result", "events", "cancel", "tools", "done", "memory")


class JobStore:
    """Reads and writes one Redis database's jobs."""

    def __init__(self, redis: Redis, prefix: str = "tandem") -> None:
        self.redis = redis
        self.prefix = prefix

    def key(self, job_id: str, part: str) -> str:
        """The Redis key of ``part`` of a job."""
        return f"{self.prefix}:job:{job_id}:{part}"

    # -- spec, status, result ----------------------------------------------------------------

    def create(self, job_id: str, spec: JobSpec) -> bool:
        """Store the spec and a ``queued`` status; ``False`` if the job already exists."""
        created = bool(self.redis.set(self.key(job_id, "spec"), spec.model_dump_json(), nx=True))
        if created:
            self.set_status(job_id, state="queued", reasoner=spec.reasoner)
        return created

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
            pipe.set(key, updated.model_dump_json())
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
            self.publish(job_id, "final", stored.model_dump(mode="json"))
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

    def publish(self, job_id: str, kind: str, data: dict[str, Any]) -> None:
        """Append an event to the job's stream (capped near 10,000 entries), secrets redacted."""
        self.redis.xadd(
            self.key(job_id, "events"),
            {
                "type": kind,
                "data": json.dumps(redact_data(data), ensure_ascii=False, default=str),
                "at": f"{time.time():.3f}",
            },
            maxlen=10000,
            approximate=True,
        )

    def events(
        self, job_id: str, *, last_id: str = "0", block_ms: int = 1000, timeout: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """Yield the job's events from ``last_id`` on, waiting for new ones, until ``final``.

        Each event is ``{"id", "type", "data", "at"}``. Stops after ``timeout`` seconds if given.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        key = self.key(job_id, "events")
        while deadline is None or time.monotonic() < deadline:
            batch = self.redis.xread({key: last_id}, count=100, block=block_ms)
            for _stream, entries in batch or []:
                for entry_id, fields in entries:
                    last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                    decoded = {
                        (k.decode() if isinstance(k, bytes) else k): (
                            v.decode() if isinstance(v, bytes) else v
                        )
                        for k, v in fields.items()
                    }
                    event = {
                        "id": last_id,
                        "type": decoded.get("type", ""),
                        "data": json.loads(decoded.get("data", "{}")),
                        "at": float(decoded.get("at", 0)),
                    }
                    yield event
                    if event["type"] == "final":
                        return
            # Nothing new: stop for an unknown job, or for one that has ended (every event was
            # read, even if its finisher died before publishing ``final``).
            if not batch and (self.status(job_id) is None or self.result(job_id) is not None):
                return
