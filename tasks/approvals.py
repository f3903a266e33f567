"""A job's pending approval in Redis: the calls waiting, and the one batch of decisions on them.

When a round of a distributed job calls tools that need approval, its driver stores an
``ApprovalRecord`` (``ApprovalStore.request``) and the job holds no worker while it waits. A
decision, from ``JobHandle.decide`` or the ``tandem.decide`` task, is checked against the record
by ``tandem.reasoner.approval.validate_decisions`` (edited args against each tool's JSON schema,
kept in the record, so no toolkit is needed to decide) and stored by one atomic write. A batch
may decide some of the calls (``--call 2``); the round goes on once every call is decided. Each
call is decided once: the first decision wins, and a batch touching a call decided already is
refused whole and changes nothing. No decision within the timeout rejects the calls still
undecided (``expire_if_due``, or the first decision that comes too late).

Keys: ``{prefix}:{<job_id>}:approval`` (one JSON record), with a TTL from the moment it is written.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field
from redis.client import Pipeline

from tandem.reasoner.approval import (
    Decision,
    PendingCall,
    reject_all,
    timeout_reason,
    validate_decisions,
)
from tandem.reasoner.errors import ApprovalError
from tandem.tasks.errors import DecisionRefused
from tandem.tasks.store import JobStore
from tandem.toolkit.tool import Tool

__all__ = ["ApprovalRecord", "ApprovalStore"]

DecidedBy = Literal["person", "timeout"]


class ApprovalRecord(BaseModel):
    """The calls of one round waiting for a decision, and the decisions made so far."""

    job_id: str
    round: int
    pending: list[PendingCall]
    schemas: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """The JSON schema of each pending tool's arguments, to validate edited args."""
    requested_at: float
    timeout_s: float | None = None
    decisions: list[Decision] = Field(default_factory=list)
    """The decisions so far, in call order; one per call at most."""
    decided_by: DecidedBy | None = None
    """Who completed the decisions: a person, or the timeout (rejecting what was left)."""
    decided_at: float | None = None

    @property
    def deadline(self) -> float | None:
        """When no decision counts as a rejection (epoch seconds), if there is a timeout."""
        return None if self.timeout_s is None else self.requested_at + self.timeout_s

    @property
    def decided(self) -> bool:
        """Whether every pending call has its decision (the round can go on)."""
        return {d.index for d in self.decisions} >= {p.index for p in self.pending}

    def undecided(self) -> list[PendingCall]:
        """The pending calls still without a decision."""
        done = {d.index for d in self.decisions}
        return [p for p in self.pending if p.index not in done]

    def tools(self) -> dict[str, Tool]:
        """Stand-ins of the pending tools that validate arguments against the stored schemas."""
        return {
            name: Tool(name=name, description="", function=_never_run, schema=schema)
            for name, schema in self.schemas.items()
        }


def _never_run(**_: Any) -> None:  # pragma: no cover - the stand-ins only validate
    raise RuntimeError("an approval record's tool stand-in is never run")


def _clash(decisions: Any, decided: set[int]) -> int | None:
    """The index of a decision in ``decisions`` for a call decided already, if any."""
    if not isinstance(decisions, list):
        return None
    for raw in decisions:
        index = (
            raw.index if isinstance(raw, Decision) else raw.get("index") if isinstance(raw, dict) else None
        )
        if isinstance(index, int) and index in decided:
            return index
    return None


class ApprovalStore:
    """Reads and writes the pending approvals of one ``JobStore``'s jobs."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.redis = store.redis

    def key(self, job_id: str) -> str:
        """The Redis key of a job's approval record."""
        return self.store.key(job_id, "approval")

    def get(self, job_id: str) -> ApprovalRecord | None:
        """The job's approval record, if it has one."""
        raw = self.redis.get(self.key(job_id))
        return None if raw is None else ApprovalRecord.model_validate_json(raw)

    def request(
        self,
        job_id: str,
        round_no: int,
        pending: list[PendingCall],
        tools: list[Tool],
        *,
        timeout_s: float | None,
        ttl: int,
        now: float | None = None,
    ) -> ApprovalRecord:
        """Store the calls of ``round_no`` waiting for a decision and publish
        ``approval_requested``; idempotent: the record already stored for this round (or a
        later one) is returned unchanged, so a redelivered step asks once. The key expires
        ``ttl`` seconds after the timeout (after ``ttl`` seconds without one)."""
        existing = self.get(job_id)
        if existing is not None and existing.round >= round_no:
            return existing
        by_name = {t.name: t for t in tools}
        record = ApprovalRecord(
            job_id=job_id,
            round=round_no,
            pending=pending,
            schemas={p.tool: by_name[p.tool].parameters for p in pending if p.tool in by_name},
            requested_at=time.time() if now is None else now,
            timeout_s=timeout_s,
        )
        expires = max(1, int(ttl + (timeout_s or 0)))
        if not self.redis.set(self.key(job_id), record.model_dump_json(), ex=expires, nx=existing is None):
            return self.get(job_id) or record  # a concurrent duplicate stored it first
        self.store.publish(
            job_id,
            "approval_requested",
            {
                "round": round_no,
                "pending": [p.model_dump(mode="json") for p in pending],
                "timeout_s": timeout_s,
            },
        )
        return record

    def decide(self, job_id: str, decisions: Any, *, now: float | None = None) -> ApprovalRecord:
        """Apply a batch of decisions (the wire form, ``Decision`` objects, or ``True``/``False``
        for every undecided call) and return the record.

        Refused with ``DecisionRefused``, changing nothing, when the job waits for no decision,
        a decision does not fit (unknown call, bad edited args, ...), or a call in the batch was
        decided already. A batch that comes after the timeout makes the timeout's rejection of
        the undecided calls be stored instead, and is refused saying so.
        """
        key = self.key(job_id)
        late: list[str] = []
        added: list[Decision] = []

        def apply(pipe: Pipeline) -> ApprovalRecord:
            late.clear()  # transaction() reruns this when the key changed meanwhile
            added.clear()
            raw: Any = pipe.get(key)
            if raw is None:
                raise DecisionRefused(
                    f"job {job_id!r} is not waiting for a decision (no call of it needs approval now); "
                    "nothing was decided"
                )
            record = ApprovalRecord.model_validate_json(raw)
            if record.decided:
                raise DecisionRefused(
                    f"every call of job {job_id!r} (round {record.round}) was decided already "
                    f"(by {record.decided_by}); this decision changes nothing"
                )
            waiting = record.undecided()
            at = time.time() if now is None else now
            by: DecidedBy = "person"
            if record.deadline is not None and at >= record.deadline:
                added.extend(reject_all(waiting, timeout_reason(record.timeout_s or 0)).values())
                late.append(
                    f"the decision came after the {record.timeout_s:g} s approval timeout of job "
                    f"{job_id!r}: its undecided calls were rejected"
                )
                by = "timeout"
            else:
                try:
                    valid = validate_decisions(waiting, decisions, record.tools(), require_all=False)
                except ApprovalError as exc:
                    clash = _clash(decisions, {d.index for d in record.decisions})
                    reason = f"call {clash} was decided already" if clash is not None else str(exc)
                    raise DecisionRefused(f"job {job_id!r}: {reason}; nothing was decided") from None
                if not valid:
                    raise DecisionRefused(f"job {job_id!r}: the batch holds no decision; nothing was decided")
                added.extend(valid[i] for i in sorted(valid))
            merged = sorted([*record.decisions, *added], key=lambda d: d.index)
            updated = record.model_copy(update={"decisions": merged})
            if updated.decided:
                updated = updated.model_copy(update={"decided_by": by, "decided_at": at})
            ttl = self.redis.ttl(key)
            pipe.multi()
            pipe.set(key, updated.model_dump_json(), ex=ttl if isinstance(ttl, int) and ttl > 0 else 86400)
            return updated

        record: ApprovalRecord = self.redis.transaction(apply, key, value_from_callable=True)
        self.store.publish(
            job_id,
            "approval_decided",
            {
                "round": record.round,
                "by": "timeout" if late else "person",
                "decisions": [d.model_dump(mode="json", exclude_none=True) for d in added],
                "complete": record.decided,
            },
        )
        if late:
            raise DecisionRefused(late[0])
        return record

    def expire_if_due(self, job_id: str, *, now: float | None = None) -> ApprovalRecord | None:
        """Store the timeout's rejection of the calls still undecided past their deadline; the
        record then (``None`` for a job without one). Safe to call from any process, often."""
        record = self.get(job_id)
        at = time.time() if now is None else now
        if record is None or record.decided or record.deadline is None or at < record.deadline:
            return record
        try:
            return self.decide(job_id, [], now=at)
        except DecisionRefused:  # the timeout's rejection was stored (here or by another process)
            return self.get(job_id)
