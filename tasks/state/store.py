"""``JobStore``: a job's keys in Redis and the reads and writes outside its state machine.

Every key of a job is ``{prefix}:{<job_id>}:{part}`` (one hash tag per job, so the state
machine's scripts touch one Redis Cluster slot): ``state`` (the record of
``tandem.tasks.state.machine``), ``spec``, ``memory``, ``tools`` (tool results), ``calls`` (the tool
calls' attempts and leases), ``events``, ``result``, ``cancel``, ``approval`` (the calls awaiting a
decision, ``tandem.tasks.control.approvals``), ``intake`` (the spec as ``submit`` sent it, until a worker
starts the job: the reconciler sends a lost intake message again from it), ``artifacts`` (tool
outputs kept whole: ``tandem.tasks.state.artifacts``), and ``appended`` (the
write tokens of the event batches written, so one sent again is not doubled: ``append_all``).
Every key has a TTL from the moment it is written.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, Literal

from redis import Redis
from redis.client import Pipeline
from redis.cluster import RedisCluster

from tandem.broker_config import Settings
from tandem.reasoner.approval import PendingCall
from tandem.reasoner.memory import RedisReasonerMemory
from tandem.reasoner.messages import FunctionCallResult
from tandem.reasoner.ttl_writes import write_with_ttl
from tandem.tasks.job_events import (
    JobEvent,
    ModelDelta,
    RoundStarted,
    StreamSettings,
    checked,
    decode_entry,
    make_event,
)
from tandem.tasks.spec import FINAL_STATES, JobResult, JobSpec, JobStatus, ReasonerKind, Waiting
from tandem.tasks.state.artifacts import RedisArtifactStore
from tandem.tasks.state.keys import JOB_KEY, JOB_PARTS, pause_id
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.recent import RecentJobs
from tandem.tasks.state.record import JobRecord
from tandem.tasks.state.record import text as _text
from tandem.tasks.state.replicas import ReplicaWait, Waited, report
from tandem.tasks.state.results import ResultDelivery, end_job
from tandem.tasks.state.scripts import lua
from tandem.tasks.state.versions import SPEC_VERSION, SPEC_VERSION_FIELD
from tandem.tasks.state.views import StepView, ViewAsk
from tandem.toolkit.redaction import redact, redact_data, redact_known


def _pause_of(job_id: str, raw: Mapping[Any, Any], approval: Any) -> str | None:
    """The id of the pause of a raw approval record (JSON), numbered by the raw job record."""
    seq = raw.get(b"pause_seq", raw.get("pause_seq", 0))
    return pause_id(job_id, int(json.loads(approval).get("round", 0)), int(_text(seq) or 0))


def _undecided(approval: Any) -> list[PendingCall]:
    """The calls of a raw approval record (JSON) still without a decision."""
    data = json.loads(approval)
    decided = {d["index"] for d in data.get("decisions", [])}
    return [PendingCall.model_validate(p) for p in data.get("pending", []) if p["index"] not in decided]


def status_from_record(
    job_id: str, raw: Mapping[Any, Any], approval: Any = None, question: Any = None
) -> JobStatus | None:
    """A ``JobStatus`` from the raw fields of a job's record (``None`` for no record) and, for a
    job awaiting approval, its raw approval record, or its raw question record (JSON) when the
    pause is a question (``pause_kind``)."""
    rec = JobRecord.parse(raw)
    if rec is None:
        return None
    parked = rec.state == "awaiting_approval"
    kind = _text(raw.get(b"pause_kind", raw.get("pause_kind", b""))) or "approval"
    if rec.state == "waiting_for_children":
        kind, question, approval = "children", None, None
    if parked and kind == "question":
        approval = None  # an earlier pause's record: this pause is a question
    asked = json.loads(question) if parked and kind == "question" and question is not None else None
    waiting = rec.state == "waiting"
    status = JobStatus(
        job_id=job_id,
        state=rec.state,
        reasoner=rec.reasoner,
        owner=rec.owner,
        round=rec.round,
        step=rec.kind or "",
        error=rec.error or (rec.last_error or None if waiting else None),
        updated_at=rec.updated_at,
        waiting_for=rec.wait_for or None if waiting else None,
        until=rec.wait_until if waiting else None,
        epoch=rec.epoch,
        deadline=rec.deadline or None,
        waiting=Waiting(reason=rec.wait_for, host="", until=rec.wait_until, detail=rec.last_error)
        if waiting
        else None,
        pending_approval=_undecided(approval) if parked and approval is not None else None,
        pause_id=_pause_of(job_id, raw, approval) if parked and approval is not None else None,
        approval_until=rec.approval_until or None if parked else None,
        pause_kind=_pause_kind(kind) if parked or kind == "children" else None,
        question=_asked(job_id, asked) if asked is not None else None,
    )
    if asked is not None:
        status.pause_id = pause_id(job_id, int(asked.get("round", 0)), int(asked.get("seq", 0)))
    return status


def _pause_kind(kind: str) -> Literal["approval", "question", "children"]:
    return "question" if kind == "question" else "children" if kind == "children" else "approval"


def question_json(fields: Any) -> str | None:
    """A job's question record (JSON, with its pause number) from its hash's ``record`` and
    ``seq`` fields (``tandem.tasks.control.questions``), ``None`` when it has none."""
    raw, seq = fields if fields else (None, None)
    if raw is None:
        return None
    return json.dumps({**json.loads(raw), "seq": int(_text(seq or 0))})


def _asked(job_id: str, asked: dict[str, Any]) -> dict[str, Any]:
    """What a status shows of a question record (its ``QuestionRecord.public`` fields)."""
    timeout = float(asked.get("timeout_s") or 0)
    return {
        "pause_id": pause_id(job_id, int(asked.get("round", 0)), int(asked.get("seq", 0))),
        "round": asked.get("round", 0),
        "call_index": asked.get("call_index", 0),
        "tool": asked.get("tool", ""),
        "text": asked.get("text", ""),
        "answer_schema": asked.get("answer_schema"),
        "timeout_s": timeout,
        "until": float(asked.get("asked_at") or 0) + timeout,
    }


FINAL_LOOKAHEAD = 100
"""How many entries after a ``final`` event are searched for the ``job_started`` of a resume."""


def entry_types(entries: Any) -> list[str]:
    """The ``type`` field of raw stream entries (bytes or str)."""
    return [_text(f.get(b"type", f.get("type", ""))) for _, f in entries]


def final_ends(following: list[str], state: Any) -> bool:
    """Whether a ``final`` event ends its job's stream, from the types of the entries that follow
    it and the job's state now: it does, unless the job was resumed since (a ``job_started``
    follows, or none yet but the record is live again)."""
    if "job_started" in following:
        return False
    return bool(following) or state is None or _text(state) in FINAL_STATES


class JobStore:
    """Reads and writes one Redis database's jobs. ``ttl`` bounds the life of keys written
    before a job runs or after it ended (``TANDEM_MEMORY_TTL``; whole seconds, at least 1)."""

    def __init__(
        self,
        redis: Redis,
        prefix: str = "tandem",
        ttl: int = 86400,
        *,
        stream: StreamSettings | None = None,
        wait: ReplicaWait | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl = max(int(ttl), 1)  # whole seconds, as EXPIRE takes them
        self.stream = stream or StreamSettings()
        self.wait = wait or ReplicaWait()
        """How the writes that must survive a failover wait for replicas (``TANDEM_REDIS_WAIT_*``)."""
        self._machine: JobMachine | None = None

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings) -> JobStore:
        """The store as configured by ``settings`` (prefix, TTL, event stream)."""
        stream = StreamSettings(
            maxlen=settings.events_maxlen,
            deltas=settings.deltas,
            delta_interval=settings.delta_interval_ms / 1000,
            delta_max_chars=settings.delta_max_chars,
        )
        wait = ReplicaWait(settings.redis_wait_replicas, settings.redis_wait_timeout_ms)
        return cls(redis, settings.prefix, ttl=settings.memory_ttl, stream=stream, wait=wait)

    def key(self, job_id: str, part: str) -> str:
        """The Redis key of ``part`` of a job."""
        return JOB_KEY.format(prefix=self.prefix, job_id=job_id, part=part)

    def keys(self, job_id: str) -> list[str]:
        """Every key of a job, in ``JOB_PARTS`` order."""
        return [JOB_KEY.format(prefix=self.prefix, job_id=job_id, part=part) for part in JOB_PARTS]

    @property
    def machine(self) -> JobMachine:
        """The state machine over this store's jobs."""
        if self._machine is None:
            self._machine = JobMachine(self)
        return self._machine

    # -- spec, status, result ----------------------------------------------------------------

    def create(self, job_id: str, spec: JobSpec) -> bool:
        """Store the spec and a ``queued`` status; ``False`` if the job already exists."""
        created = bool(self.redis.set(self.key(job_id, "spec"), spec.model_dump_json(), nx=True, ex=self.ttl))
        if created:
            self.set_status(job_id, state="queued", reasoner=spec.reasoner, owner=spec.owner)
            self.remember(job_id, owner=spec.owner)
        return created

    def mark_queued(
        self, job_id: str, reasoner: ReasonerKind = "dual", intake: str | None = None, owner: str = "default"
    ) -> bool:
        """Record a job as ``queued`` before its intake message is sent (no-op if the job has a
        record), so that followers know it at once; ``False`` if it had one already.

        ``intake`` is the message's spec (JSON): kept until a worker starts the job, so the
        reconciler can send a lost intake message again. ``owner``: the tenant owning the job. The
        record holds the version of the spec sent (``SPEC_VERSION``: a worker that does not read
        it leaves the job to one that does); the intake's record says the worker's own."""
        written = self.write_queued(job_id, reasoner, owner, intake)
        if self.wait.replicas and not isinstance(self.redis, RedisCluster):
            # The submission is acknowledged once its replicas have it: WAIT on the connection of
            # its last write, which follows the record's (replication is one ordered stream). A
            # cluster's recent-jobs index lives on another node than the job: not waited there.
            indexes = self.redis.pipeline(transaction=False)
            self.remember(job_id, owner=owner, pipe=indexes)
            indexes.execute_command("WAIT", self.wait.replicas, self.wait.timeout_ms)
            acked = indexes.execute()[-1]
            report(Waited("the submission", job_id, self.wait.replicas, int(acked)), self.wait.timeout_ms)
        else:
            self.remember(job_id, owner=owner)
        return bool(written)

    def write_queued(
        self, job_id: str, reasoner: str, owner: str, intake: str | None, client: Any = None
    ) -> Any:
        """``mark_queued``'s write (``queue.lua``): the ``queued`` record with its TTL in the same
        step, and the intake's spec; on ``client`` when given (a Redis client's pipeline, the
        workers' user only: see ``write_with_ttl``), else now. The reply: 1 when this call wrote
        the record."""
        keys = [self.key(job_id, "state"), self.key(job_id, "intake")]
        now, version = f"{time.time():.6f}", [SPEC_VERSION_FIELD, SPEC_VERSION]
        args = [self.ttl, reasoner, owner, now, *version, intake or ""]
        return self._queue(keys=keys, args=args, client=client)

    @cached_property
    def _queue(self) -> Any:
        return self.redis.register_script(lua("queue"))

    def discard_queued(self, job_id: str) -> None:
        """Undo ``mark_queued`` for a job the intake refused (a refused spec stores nothing): its
        ``queued`` record and its entry among the recent jobs go; a started job is left alone.

        The transaction touches the job's keys only (one cluster slot); the index entry goes after
        it (``recent`` leaves out jobs without a record anyway)."""
        key = self.key(job_id, "state")
        owner: list[str] = []

        def undo(pipe: Pipeline) -> bool:
            fields: Any = pipe.hmget(key, ["state", "owner"])  # watched: runs at once
            state, named = fields
            started = pipe.exists(self.key(job_id, "spec"))
            if state is None or started or _text(state) != "queued":
                return False
            owner[:] = [_text(named)] if named is not None else []
            pipe.multi()
            pipe.delete(key, self.key(job_id, "intake"))
            return True

        if self.redis.transaction(undo, key, self.key(job_id, "spec"), value_from_callable=True):
            self.recents.forget(job_id, owner[0] if owner else None)

    def remember(
        self, job_id: str, at: float | None = None, *, owner: str | None = None, pipe: Any = None
    ) -> None:
        """Add the job to the index of recent jobs, and to its tenant's when ``owner`` is given
        (``RecentJobs.remember``: idempotent); queued on ``pipe`` (not run) when one is given."""
        self.recents.remember(job_id, at, owner=owner, pipe=pipe)

    def recent(self, limit: int = 50, *, owner: str | None = None) -> list[JobStatus]:
        """The newest ``limit`` jobs' statuses, newest first (jobs whose keys expired are left out).
        With ``owner``, tenant ``owner``'s jobs only, from its own index (``RecentJobs.newest``)."""
        return list(self.recents.newest(status_from_record, limit, owner))

    @property
    def recents(self) -> RecentJobs:
        """The indexes of recent jobs (``tandem.tasks.state.recent``)."""
        return RecentJobs(self.redis, self.prefix, self.ttl)

    def spec(self, job_id: str) -> JobSpec | None:
        """The job's spec, or ``None`` for an unknown job."""
        raw = self.redis.get(self.key(job_id, "spec"))
        return None if raw is None else JobSpec.model_validate_json(raw)

    def step_view(
        self,
        job_id: str,
        *,
        messages: bool | Sequence[str] = True,
        record: Sequence[str] = (),
    ) -> StepView:
        """The spec, the cancel flag, the ``record`` fields asked for and the stored messages (all
        of them, or only those keyed ``messages``, e.g. ``["2:actor"]``) of a job, in one pipeline
        (a step's claim reads the same in its own script call: ``JobMachine.claim``'s ``view``)."""
        ask = ViewAsk(messages=messages, record=record)
        memory_key = self.key(job_id, "memory")
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(self.key(job_id, "spec"))
        pipe.exists(self.key(job_id, "cancel"))
        if record:
            pipe.hmget(self.key(job_id, "state"), list(record))
        if messages is True:
            pipe.hvals(memory_key)
        elif messages:
            pipe.hmget(memory_key, list(messages))
        replies = iter(pipe.execute())
        raw_spec, cancelled = next(replies), next(replies)
        fields = next(replies) if record else []
        return ask.view([raw_spec, cancelled, fields, next(replies, []), []])

    def status(self, job_id: str) -> JobStatus | None:
        """The job's status (from its record, and its pending calls while it awaits approval),
        or ``None`` for an unknown job."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.key(job_id, "state"))
        pipe.get(self.key(job_id, "approval"))
        pipe.hmget(self.key(job_id, "question"), ["record", "seq"])
        raw, approval, question = pipe.execute()
        return status_from_record(job_id, raw, approval, question_json(question))

    def set_status(self, job_id: str, **fields: Any) -> JobStatus:
        """Update some status fields (``state``, ``reasoner``, ``round``, ``step``, ``error``); a
        final state is never replaced by another. For tools and tests: the state machine moves jobs itself.

        The read and the write are one optimistic transaction (``WATCH``).
        """
        key = self.key(job_id, "state")
        names = {"step": "kind"}
        if fields.get("error"):
            fields["error"] = redact(fields["error"])
        fields.setdefault("waiting", None)  # a wait ends with the next thing the job does

        def update(pipe: Pipeline) -> None:
            current: Any = pipe.hget(key, "state")
            final = current is not None and _text(current) in FINAL_STATES
            if final and fields.get("state", _text(current)) != _text(current):
                return
            mapping: dict[str | bytes, Any] = {
                names.get(k, k): ("" if v is None else v) for k, v in fields.items()
            }
            mapping["updated_at"] = f"{time.time():.6f}"
            pipe.multi()
            pipe.hset(key, mapping=mapping)
            if current is None:
                pipe.expire(key, self.ttl)

        self.redis.transaction(update, key)
        return self.status(job_id) or JobStatus(job_id=job_id)

    def result(self, job_id: str) -> JobResult | None:
        """The final result, once the job has ended."""
        raw = self.redis.get(self.key(job_id, "result"))
        return None if raw is None else JobResult.model_validate_json(raw)

    def finish(
        self,
        result: JobResult,
        ttl: int | None = None,
        delivery: ResultDelivery | None = None,
        *,
        parts: Sequence[str] | None = None,
    ) -> JobResult:
        """End the job with ``result`` whatever step it is at (the first result stored wins),
        expire its keys ``ttl`` seconds from now, and return the stored result (secrets redacted).
        With ``delivery`` the job's Celery result goes out with its end (``tandem.tasks.state.results``).
        ``parts``: the job's keys to expire when not all (a client's end: ``CLIENT_PARTS``)."""
        ttl = self.ttl if ttl is None else ttl
        result = result.model_copy(
            update={
                "error": redact(result.error) if result.error else result.error,
                "deliverable": redact_known(result.deliverable),
            }
        )
        _, stored = end_job(self, result, ttl, delivery=delivery, parts=parts)
        return stored or result

    # -- cancellation ----------------------------------------------------------------------

    def request_cancel(self, job_id: str) -> list[str]:
        """Ask the job and every child job it started (theirs too, down the tree) to stop at
        their next step, and bring their entries in the live-job index forward to now: a job that
        waits (for an approval, an answer, its children, a back-off) ends at once, at the sweep the
        cancel wakes (``JobMachine.look_now``, ``JobMachine.wake``), and a child a worker runs
        ends at its next step without waiting for its parent's end (``tandem.tasks.state.family``;
        the workers' cascade at the parent's end still cancels any child the walk missed). Safe to
        call again. The ids of the descendants flagged."""
        from tandem.tasks.state.family import descendants, owner_of

        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.key(job_id, "cancel"), "1", ex=self.ttl)
        self.machine.look_now(job_id, pipe)
        pipe.execute()
        owner = owner_of(self, job_id)
        family = descendants(self, job_id, owner) if owner is not None else []
        for start in range(0, len(family), 500):  # the job's own flag first: then its children's
            pipe = self.redis.pipeline(transaction=False)
            for child in family[start : start + 500]:
                pipe.set(self.key(child, "cancel"), "1", ex=self.ttl)
                self.machine.look_now(child, pipe)
            pipe.execute()
        self.machine.wake()
        return family

    def cancel_requested(self, job_id: str) -> bool:
        """True once ``request_cancel`` was called."""
        return bool(self.redis.exists(self.key(job_id, "cancel")))

    # -- tool results ----------------------------------------------------------------------------

    def tool_result(self, job_id: str, round_no: int, index: int) -> FunctionCallResult | None:
        """The stored result of call ``index`` of ``round_no``, if any."""
        raw = self.redis.hget(self.key(job_id, "tools"), f"{round_no}:{index}")
        return None if raw is None else FunctionCallResult.model_validate_json(raw)

    def tool_results(self, job_id: str, round_no: int, count: int) -> list[FunctionCallResult | None]:
        """The stored results of calls 1..``count`` of ``round_no`` (``None`` where missing)."""
        fields = [f"{round_no}:{i}" for i in range(1, count + 1)]
        raws = self.redis.hmget(self.key(job_id, "tools"), fields) if fields else []
        return [None if r is None else FunctionCallResult.model_validate_json(r) for r in raws]

    # -- memory and events -------------------------------------------------------------------

    def memory(self, job_id: str) -> RedisReasonerMemory:
        """The job's conversation."""
        return RedisReasonerMemory(self.redis, job_id, prefix=self.prefix, ttl=self.ttl)

    def artifacts(self, job_id: str) -> RedisArtifactStore:
        """The job's artifacts: tool outputs kept whole (``tandem.tasks.state.artifacts``)."""
        return RedisArtifactStore(self.redis, job_id, prefix=self.prefix, ttl=self.ttl)

    def publish(
        self,
        job_id: str,
        event: JobEvent | str,
        data: dict[str, Any] | None = None,
        *,
        ttl: int | None = None,
    ) -> str:
        """Append an event to the job's stream (secrets redacted) and return its stream id.

        ``event`` is a ``JobEvent``, or an event kind with its fields in ``data`` (``EventError``
        when they do not fit the kind). The stream is capped at about ``stream.maxlen`` entries; a new
        stream gets ``ttl`` seconds (the store's TTL by default; the intake gives it the job's
        lifetime), and the job's end sets it again.
        """
        typed = make_event(event, data or {}) if isinstance(event, str) else checked(event)
        fields = [part for item in self.entry(typed).items() for part in item]
        key, cap = self.key(job_id, "events"), ["MAXLEN", "~", self.stream.maxlen, "*"]
        return _text(write_with_ttl(self.redis, key, ttl or self.ttl, "XADD", *cap, *fields))

    def append(self, job_id: str, event: JobEvent) -> str:
        """``publish`` for a running job's steps, written once (``append_all``). A ``model_delta``
        is one plain ``XADD`` instead (the cheapest write, for the most frequent event: a reader
        tells its attempt and place by ``attempt`` and ``seq``); a step's own deltas go through
        ``append_delta``, fenced by its claim. Neither creates the stream (the intake made it,
        with its TTL); a stream that is not there (expired, or the intake died before its first
        event) is made by ``publish``."""
        if not isinstance(event, ModelDelta):
            return self.append_all(job_id, [event])[0]
        entry_id = self.redis.xadd(
            self.key(job_id, "events"),
            self.entry(event),
            maxlen=self.stream.maxlen,
            approximate=True,
            nomkstream=True,
        )
        return self.publish(job_id, event) if entry_id is None else _text(entry_id)

    def append_all(self, job_id: str, events: Sequence[JobEvent]) -> list[str]:
        """``append`` for several events, in order, in one round trip, written once.

        redis-py sends a command again when its connection drops before the reply (a Redis
        restart): a plain ``XADD`` that had been applied would then be in the stream twice. The
        batch carries a write token instead, marked in the job's ``appended`` hash by the same
        script (``append_events.lua``), so a second delivery returns the first one's ids.
        """
        if not events:
            return []
        args: list[Any] = [uuid.uuid4().hex, self.stream.maxlen, self.ttl]
        for event in events:
            entry = self.entry(event)
            args += [entry["type"], entry["data"], entry["at"]]
        ids = self._append_events(keys=[self.key(job_id, "events"), self.key(job_id, "appended")], args=args)
        if not ids:  # no stream: ``publish`` makes it
            return [self.publish(job_id, event) for event in events]
        return [_text(entry_id) for entry_id in ids]

    def append_delta(
        self, job_id: str, delta: ModelDelta, *, epoch: int | None = None, opening: RoundStarted | None = None
    ) -> list[str]:
        """Write ``delta`` in one round trip (``append_delta.lua``), after ``opening`` (its round's
        ``round_started``) when given, unless the job's record says that round was announced
        already (``opened``): a round's tokens never come before it, and it is written once.

        ``epoch``: the epoch of the claim of the step whose model call wrote the tokens. A delta
        whose claim is older than the record's (another worker took the step over, or the job
        moved on) or whose job has ended is fenced: nothing is written and ``[]`` is returned, so
        a worker cut off past its lease never puts its tokens amid or after the takeover's.
        ``None`` (a reasoner run in-process, with no claim): nothing is fenced."""
        entry = self.entry(delta)
        args: list[Any] = ["" if epoch is None else epoch, self.stream.maxlen]
        args += [entry["type"], entry["data"], entry["at"]]
        if opening is not None:
            entry = self.entry(opening)
            args += [opening.round, entry["type"], entry["data"], entry["at"]]
        ids = self._append_delta(keys=[self.key(job_id, "state"), self.key(job_id, "events")], args=args)
        if isinstance(ids, bytes | str):  # 'fenced': nothing written
            return []
        if not ids:  # no stream: ``publish`` makes it (the record cannot say the round is written)
            first = [] if opening is None else [self.publish(job_id, opening)]
            return [*first, self.publish(job_id, delta)]
        return [_text(entry_id) for entry_id in ids]

    @cached_property
    def _append_events(self) -> Any:
        return self.redis.register_script(lua("append_events"))

    @cached_property
    def _append_delta(self) -> Any:
        return self.redis.register_script(lua("append_delta"))

    @staticmethod
    def entry(typed: JobEvent) -> dict[str, str]:
        """The stream entry of ``typed`` (see ``job_events.encode_event``), secrets redacted."""
        return {
            "type": typed.type,
            "data": json.dumps(redact_data(typed.data), ensure_ascii=False, default=str),
            "at": f"{typed.at or time.time():.3f}",
        }

    def read_events(self, job_id: str, after: str = "0", count: int = 100) -> list[JobEvent]:
        """Up to ``count`` events written after stream id ``after``, without waiting."""
        start = "-" if after in ("", "0", "0-0") else f"({after}"
        entries = self.redis.xrange(self.key(job_id, "events"), min=start, count=count)
        return [decode_entry(entry_id, fields) for entry_id, fields in entries]

    def final_is_last(self, job_id: str, event_id: str) -> bool:
        """True when the ``final`` event ``event_id`` ends the job's stream (see ``final_ends``)."""
        after = self.redis.xrange(self.key(job_id, "events"), min=f"({event_id}", count=FINAL_LOOKAHEAD)
        state = self.redis.hget(self.key(job_id, "state"), "state")
        return final_ends(entry_types(after), state)

    def events(
        self, job_id: str, *, last_id: str = "0", block_ms: int = 1000, timeout: float | None = None
    ) -> Iterator[JobEvent]:
        """Yield the job's events after stream id ``last_id`` (``"0"``: from the first, ``"$"``:
        only new ones), waiting for new ones, until the ``final`` that ends the stream (a resumed
        job's goes on after its earlier ``final``). Stops after ``timeout`` seconds if given.
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
                    if event.type == "final" and self.final_is_last(job_id, event.id):
                        return
            # Nothing new: stop for an unknown job, or for one that has ended (every event was
            # read, even if its finisher died before publishing ``final``).
            if not batch and (self.status(job_id) is None or self.result(job_id) is not None):
                return
