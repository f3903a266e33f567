"""A job's pending approval in Redis: the calls waiting, and the one batch of decisions on them.

When the Actor reply of a distributed job calls tools that need approval, the model step's
transition parks the job (``awaiting_approval``, ``tandem.tasks.state.machine``) and writes its
``ApprovalRecord`` in the same atomic move: the calls that need no approval run, the others are
held, and no task is queued and no worker held while the job waits. A decision, from
``JobHandle.decide``, ``tandem approve``, the API or the ``tandem.decide`` task, is checked
against the record by ``tandem.reasoner.approval.validate_decisions`` (edited args against each
tool's JSON schema, kept in the record, so no toolkit is needed to decide) and stored by
``JobMachine.settle``, which refuses it whole unless the record is still the one read and the job
still awaits it. A batch may decide some of the calls (``--call 2``); once every call is decided
the same script stores the rejected calls' FAILED results (the model reads the reason) and queues
the approved ones (``run_tool`` reads their edited args here). Each call is decided once: the first
decision wins, and a batch touching a call decided already is refused whole and changes nothing.
No decision within the timeout rejects the calls still undecided (``expire_if_due``, run by the
reconciler, or the first decision that comes too late).

Key: ``{prefix}:{<job_id>}:approval`` (one JSON record), a part of the job (``JOB_PARTS``): it
lives as long as the job's other keys.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from tandem.reasoner.approval import (
    Decision,
    PendingCall,
    reject_all,
    rejected_result,
    timeout_reason,
    validate_decisions,
)
from tandem.reasoner.errors import ApprovalError
from tandem.reasoner.loop.step import Step
from tandem.reasoner.messages import FunctionCallResult
from tandem.tasks.errors import DecisionRefused
from tandem.tasks.events import EventHooks
from tandem.tasks.job_events import ApprovalDecided
from tandem.tasks.state.claims import Message
from tandem.tasks.state.store import JobStore
from tandem.tasks.steps.messages import step_messages
from tandem.toolkit.tool import Tool

__all__ = ["ApprovalRecord", "ApprovalStore", "rejected_results"]

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

    @classmethod
    def for_round(
        cls,
        job_id: str,
        round_no: int,
        pending: list[PendingCall],
        tools: Sequence[Tool],
        *,
        timeout_s: float,
        now: float | None = None,
    ) -> ApprovalRecord:
        """A new record of the calls of ``round_no`` waiting for a decision, with the schemas of
        their tools, waiting at most ``timeout_s`` seconds from ``now``."""
        by_name = {t.name: t for t in tools}
        return cls(
            job_id=job_id,
            round=round_no,
            pending=pending,
            schemas={p.tool: by_name[p.tool].parameters for p in pending if p.tool in by_name},
            requested_at=time.time() if now is None else now,
            timeout_s=timeout_s,
        )

    def decision(self, index: int) -> Decision | None:
        """The decision on call ``index``, if it has one."""
        return next((d for d in self.decisions if d.index == index), None)

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

    def decide(self, job_id: str, decisions: Any, *, now: float | None = None) -> ApprovalRecord:
        """Apply a batch of decisions (the wire form, ``Decision`` objects, or ``True``/``False``
        for every undecided call) and return the record.

        Refused with ``DecisionRefused``, changing nothing, when the job waits for no decision,
        a decision does not fit (unknown call, bad edited args, ...), or a call in the batch was
        decided already. A batch that comes after the timeout makes the timeout's rejection of
        the undecided calls be stored instead, and is refused saying so.
        """
        for _ in range(100):  # another decision between the read and the write: read again
            raw = self.redis.get(self.key(job_id))
            if raw is None:
                raise DecisionRefused(
                    f"job {job_id!r} is not waiting for a decision (no call of it needs approval now); "
                    "nothing was decided"
                )
            record = ApprovalRecord.model_validate_json(raw)
            updated, added, late = self._apply(job_id, record, decisions, now)
            reply = self.store.machine.settle(
                job_id,
                record.round,
                raw.decode() if isinstance(raw, bytes) else raw,
                updated.model_dump_json(),
                complete=updated.decided,
                **_moves(job_id, updated),
            )
            if reply[0] != "changed":
                break
        else:  # pragma: no cover - a hundred decisions racing on one job
            raise DecisionRefused(f"job {job_id!r}: too many decisions at once; try again")
        if reply[0] in ("gone", "ended", "not-waiting"):
            raise DecisionRefused(_not_waiting(job_id, reply))
        self._published(job_id, updated, added, "timeout" if late else "person")
        if late:
            raise DecisionRefused(late)
        return updated

    def _apply(
        self, job_id: str, record: ApprovalRecord, decisions: Any, now: float | None
    ) -> tuple[ApprovalRecord, list[Decision], str]:
        """The record with ``decisions`` added, the decisions added, and why they were not the
        ones given (a late batch: the timeout's rejections); ``DecisionRefused`` if they do not fit."""
        if record.decided:
            raise DecisionRefused(
                f"every call of job {job_id!r} (round {record.round}) was decided already "
                f"(by {record.decided_by}); this decision changes nothing"
            )
        waiting = record.undecided()
        at = time.time() if now is None else now
        late = ""
        if record.deadline is not None and at >= record.deadline:
            added = list(reject_all(waiting, timeout_reason(record.timeout_s or 0)).values())
            late = (
                f"the decision came after the {record.timeout_s:g} s approval timeout of job "
                f"{job_id!r}: its undecided calls were rejected"
            )
        else:
            try:
                valid = validate_decisions(waiting, decisions, record.tools(), require_all=False)
            except ApprovalError as exc:
                clash = _clash(decisions, {d.index for d in record.decisions})
                reason = f"call {clash} was decided already" if clash is not None else str(exc)
                raise DecisionRefused(f"job {job_id!r}: {reason}; nothing was decided") from None
            if not valid:
                raise DecisionRefused(f"job {job_id!r}: the batch holds no decision; nothing was decided")
            added = [valid[i] for i in sorted(valid)]
        merged = sorted([*record.decisions, *added], key=lambda d: d.index)
        updated = record.model_copy(update={"decisions": merged})
        if updated.decided:
            by: DecidedBy = "timeout" if late else "person"
            updated = updated.model_copy(update={"decided_by": by, "decided_at": at})
        return updated, added, late

    def _published(self, job_id: str, record: ApprovalRecord, added: list[Decision], by: str) -> None:
        """Publish ``approval_decided`` and, once the round goes on, the rejected calls' results."""
        self.store.publish(
            job_id, ApprovalDecided(round=record.round, by=by, decisions=added, complete=record.decided)
        )
        if record.decided:
            hooks = EventHooks(self.store, job_id)
            for result in rejected_results(record):
                hooks.tool_returned(record.round, result)

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


def rejected_results(record: ApprovalRecord) -> list[FunctionCallResult]:
    """The FAILED results of the record's rejected calls (what the model reads), in call order."""
    by_index = {p.index: p for p in record.pending}
    return [
        rejected_result(by_index[d.index], d.reason or "")
        for d in record.decisions
        if not d.approve and d.index in by_index
    ]


def _moves(job_id: str, record: ApprovalRecord) -> dict[str, Any]:
    """What settling a complete ``record`` writes: the rejected calls' results, the approved
    calls' messages, and the collect step's messages (used when no call is left to run)."""
    if not record.decided:
        return {"rejected": [], "approved": [], "collect": []}
    approved = [d.index for d in record.decisions if d.approve]
    run: list[Message] = step_messages(job_id, Step(record.round, "tools"), approved) if approved else []
    return {
        "rejected": [(r.index, r.model_dump_json()) for r in rejected_results(record)],
        "approved": run,
        "collect": step_messages(job_id, Step(record.round, "collect")),
    }


def _not_waiting(job_id: str, reply: tuple[str, ...]) -> str:
    """Why a decision was refused by the job's record (``JobMachine.settle``'s reply)."""
    if reply[0] == "gone":
        return f"job {job_id!r} is not known any more (its records expired); nothing was decided"
    if reply[0] == "ended":
        return f"job {job_id!r} has ended ({reply[1]}); nothing was decided"
    return (
        f"job {job_id!r} is not waiting for a decision (it is {reply[1]}, round {reply[2]}); "
        "nothing was decided"
    )
