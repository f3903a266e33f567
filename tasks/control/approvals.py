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

**Pauses.** Every park is a pause with an id, ``<job>:<round>:tools:<seq>`` (``ApprovalRecord.pause_id``):
``seq`` is the job's ``pause_seq``, counted up by the parking transition in the job's record, so
it survives restarts and resume (a fork starts from its origin's count). A decision names the pause
it answers; ``settle`` checks the name against ``pause_seq`` in the script that stores it, so a
decision for a pause that ended (decided, or rejected by its timeout) or for an earlier one is
refused whole (``StalePauseError``) even if it waited in a queue while no worker ran. A decision
naming no pause answers the one current when it is read.

**Answers by key.** A decision with an idempotency key keeps its answer (accepted or refused)
under the key in the job's ``decisions`` hash, written by the same script as the decision; the
key sent again gets that answer and changes nothing. A client that gets no answer in time writes a
withdrawal under the key (``JobMachine.remember``, which keeps the first answer): either a
worker applied the decision first, and the client reads that answer, or the decision never
applies (the worker finds the key answered). Either way the caller's outcome is definite.

Keys: ``{prefix}:{<job_id>}:approval`` (one JSON record), a part of the job (``JOB_PARTS``): it
lives as long as the job's other keys; ``{prefix}:{<job_id>}:decisions`` (answers by idempotency
key), given the TTL of the job's record whenever it is written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

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
from tandem.tasks.control.once import Repeated, refusal, reply_once
from tandem.tasks.errors import DecisionRefused, StalePauseError
from tandem.tasks.events import EventHooks
from tandem.tasks.job_events import ApprovalDecided
from tandem.tasks.state.claims import Message
from tandem.tasks.state.keys import pause_id
from tandem.tasks.state.store import JobStore
from tandem.tasks.steps.messages import step_messages
from tandem.toolkit.tool import Tool

__all__ = ["ApprovalRecord", "ApprovalStore", "decisions_of", "pause_id", "rejected_results"]

"""The longest idempotency key (characters)."""


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
    seq: int = 0
    """The pause's number in the job (its ``pause_seq``, from 1; read from the job's record)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pause_id(self) -> str:
        """The id a decision names: ``<job>:<round>:tools:<seq>``."""
        return pause_id(self.job_id, self.round, self.seq)

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
            schemas={p.tool: _strict(by_name[p.tool]) for p in pending if p.tool in by_name},
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


def _strict(tool: Tool) -> dict[str, Any]:
    """The schema edited args of ``tool`` are checked against on any worker: the tool's own, with
    no parameter beyond those it names when the tool comes from a Python function (whose
    signature refuses them in-process too)."""
    schema = dict(tool.parameters)
    if tool.schema is None and schema.get("type", "object") == "object":
        schema.setdefault("additionalProperties", False)
    return schema


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
        """The job's approval record (the last pause's, with its ``pause_id``), if it has one."""
        raw, seq = self.store.machine.pause(job_id)
        return None if raw is None else _read(raw, seq)

    def answer(
        self,
        job_id: str,
        decisions: Any,
        *,
        pause: str | None = None,
        key: str | None = None,
        now: float | None = None,
    ) -> dict[str, Any]:
        """The JSON answer of a decision (what ``tandem.decide`` returns): ``{"job_id",
        "accepted": true, "pause_id", "round", "complete", "decisions"}`` or ``{"job_id",
        "accepted": false, "error", "reason", "pause_id", "current_pause"}`` (``reason``:
        ``stale_pause``, ``refused`` or ``withdrawn``). With an idempotency ``key`` the first
        answer is kept and given again for the same key, and the decision is applied once."""
        return reply_once(
            self.store.machine,
            job_id,
            key,
            pause,
            "decided",
            lambda stored_key: self._decide(job_id, decisions, pause, stored_key, now),
            _accepted,
        )

    def decide(
        self, job_id: str, decisions: Any, *, pause: str | None = None, now: float | None = None
    ) -> ApprovalRecord:
        """Apply a batch of decisions (the wire form, ``Decision`` objects, or ``True``/``False``
        for every undecided call) on pause ``pause`` (``None``: the one current when read) and
        return the record.

        Refused with ``DecisionRefused``, changing nothing, when the job waits for no decision,
        a decision does not fit (unknown call, bad edited args, ...), or a call in the batch was
        decided already; with ``StalePauseError`` when ``pause`` is not the job's current pause.
        A batch that comes after the timeout makes the timeout's rejection of the undecided
        calls be stored instead, and is refused saying so (``StalePauseError``).
        """
        return self._decide(job_id, decisions, pause, "", now)

    def _decide(
        self, job_id: str, decisions: Any, pause: str | None, key: str, now: float | None
    ) -> ApprovalRecord:
        decisions, pause = _named_pause(job_id, decisions, pause)
        for _ in range(100):  # another decision between the read and the write: read again
            raw, seq = self.store.machine.pause(job_id)
            if raw is None:
                if pause is not None:
                    raise StalePauseError(
                        f"job {job_id!r} waits on no pause (none was asked, or its records expired), "
                        f"so pause {pause!r} is not current; nothing was decided",
                        pause_id=pause,
                    )
                raise DecisionRefused(
                    f"job {job_id!r} is not waiting for a decision (no call of it needs approval now); "
                    "nothing was decided"
                )
            record = _read(raw, seq)
            wanted = record.pause_id if pause is None else pause
            _check_current(job_id, record, wanted)
            updated, added, late = self._apply(job_id, record, decisions, now)
            answer = (
                refusal(job_id, _stale(late, wanted, None), wanted) if late else _accepted(job_id, updated)
            )
            reply = self.store.machine.settle(
                job_id,
                record.round,
                raw,
                updated.model_dump_json(exclude={"pause_id"}),
                complete=updated.decided,
                seq=record.seq,
                key=key,
                answer=json.dumps(answer) if key else "",
                **_moves(job_id, updated, _calls_of(self.store, job_id) if updated.decided else 0),
            )
            if reply[0] != "changed":
                break
        else:  # pragma: no cover - a hundred decisions racing on one job
            raise DecisionRefused(f"job {job_id!r}: too many decisions at once; try again")
        if reply[0] == "repeat":
            raise Repeated(dict(json.loads(reply[1])))
        if reply[0] == "stale":
            current = (
                pause_id(job_id, int(reply[3]), int(reply[1])) if reply[2] == "awaiting_approval" else None
            )
            raise _stale(f"job {job_id!r} paused again since it was read", wanted, current)
        if reply[0] == "not-waiting":
            raise _stale(
                f"job {job_id!r} is not waiting for a decision (it is {reply[1]}, round {reply[2]})",
                wanted,
                None,
            )
        if reply[0] in ("gone", "ended"):
            raise DecisionRefused(_not_waiting(job_id, reply))
        self._published(job_id, updated, added, "timeout" if late else "person")
        if late:
            raise _stale(late, wanted, None)
        return updated

    def _apply(
        self, job_id: str, record: ApprovalRecord, decisions: Any, now: float | None
    ) -> tuple[ApprovalRecord, list[Decision], str]:
        """The record with ``decisions`` added, the decisions added, and why they were not the
        ones given (a late batch: the timeout's rejections); ``DecisionRefused`` if they do not fit."""
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
                reason = reason.removesuffix("; nothing was decided")  # said once, below
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
            job_id,
            ApprovalDecided(
                round=record.round,
                pause_id=record.pause_id,
                by=by,
                decisions=added,
                complete=record.decided,
            ),
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
            return self.decide(job_id, [], pause=record.pause_id, now=at)
        except DecisionRefused:  # the timeout's rejection was stored (here or by another process)
            return self.get(job_id)


def _read(raw: str, seq: int) -> ApprovalRecord:
    """A stored record with the job's pause count (the record's own pause number)."""
    return ApprovalRecord.model_validate_json(raw).model_copy(update={"seq": seq})


def _named_pause(job_id: str, decisions: Any, pause: Any) -> tuple[Any, str | None]:
    """The decisions without their ``pause_id`` fields, and the one pause they and ``pause`` name
    (``None``: none named); ``DecisionRefused`` if they name two, or a pause id is not a string."""
    named = set() if pause is None else {pause}
    if isinstance(decisions, list):
        stripped = []
        for raw in decisions:
            if isinstance(raw, dict) and "pause_id" in raw:
                named.add(raw["pause_id"])
                raw = {k: v for k, v in raw.items() if k != "pause_id"}
            stripped.append(raw)
        decisions = stripped
    bad = [p for p in named if not isinstance(p, str) or not p]
    if bad:
        raise DecisionRefused(
            f"job {job_id!r}: pause_id must be a pause's id string (like {pause_id(job_id, 0, 1)!r}, "
            f"from approval_requested or the pending approval), got {bad[0]!r}; nothing was decided"
        )
    if len(named) > 1:
        raise DecisionRefused(
            f"job {job_id!r}: one batch answers one pause, but it names {sorted(named)!r}; "
            "nothing was decided"
        )
    return decisions, (next(iter(named)) if named else None)


def _check_current(job_id: str, record: ApprovalRecord, wanted: str) -> None:
    """``StalePauseError`` unless ``wanted`` is the pause of ``record`` and it is undecided."""
    current = None if record.decided else record.pause_id
    if wanted != record.pause_id:
        now_waiting = f"it waits on pause {current!r}" if current else "it waits on no pause now"
        raise _stale(f"job {job_id!r}: that pause is not the current one ({now_waiting})", wanted, current)
    if record.decided:
        raise _stale(
            f"that pause of job {job_id!r} has ended: every call of it was decided already "
            f"(by {record.decided_by})",
            wanted,
            None,
        )


def _stale(why: str, wanted: str | None, current: str | None) -> StalePauseError:
    """The refusal of a decision for pause ``wanted`` that is not current."""
    return StalePauseError(
        f"{why}; this decision for pause {wanted!r} changes nothing"
        + (f" (decide on {current!r} instead)" if current else ""),
        pause_id=wanted,
        current_pause=current,
    )


def _accepted(job_id: str, record: ApprovalRecord) -> dict[str, Any]:
    """The answer of a stored decision."""
    return {
        "job_id": job_id,
        "accepted": True,
        "pause_id": record.pause_id,
        "round": record.round,
        "complete": record.decided,
        "decisions": [d.model_dump(mode="json", exclude_none=True) for d in record.decisions],
    }


def decisions_of(answer: Any) -> list[Decision]:
    """The decisions of an accepted answer of ``tandem.decide``; a refusal raised as its error
    (``StalePauseError``, ``DecisionTimeout`` for a withdrawn one, else ``DecisionRefused``)."""
    from tandem.tasks.errors import DecisionTimeout

    if not isinstance(answer, dict):
        raise DecisionRefused(f"tandem.decide answered {answer!r}, not a decision's answer")
    if answer.get("accepted"):
        return [Decision.model_validate(d) for d in answer.get("decisions", [])]
    error = str(answer.get("error") or "the decision was refused; nothing was decided")
    reason = answer.get("reason")
    if reason == "stale_pause":
        raise StalePauseError(
            error, pause_id=answer.get("pause_id"), current_pause=answer.get("current_pause")
        )
    if reason == "withdrawn":
        raise DecisionTimeout(error)
    raise DecisionRefused(error)


def rejected_results(record: ApprovalRecord) -> list[FunctionCallResult]:
    """The FAILED results of the record's rejected calls (what the model reads), in call order."""
    by_index = {p.index: p for p in record.pending}
    return [
        rejected_result(by_index[d.index], d.reason or "")
        for d in record.decisions
        if not d.approve and d.index in by_index
    ]


def _moves(job_id: str, record: ApprovalRecord, calls: int = 0) -> dict[str, Any]:
    """What settling a complete ``record`` writes: the rejected calls' results, the approved
    calls' messages, the collect step's messages (used when no call is left to run), and the
    messages of the round's ``calls`` (for those that asked a question meanwhile)."""
    if not record.decided:
        return {"rejected": [], "approved": [], "collect": []}
    approved = [d.index for d in record.decisions if d.approve]
    tools = Step(record.round, "tools")
    run: list[Message] = step_messages(job_id, tools, approved) if approved else []
    every = step_messages(job_id, tools, range(1, calls + 1)) if calls else []
    return {
        "rejected": [(r.index, r.model_dump_json()) for r in rejected_results(record)],
        "approved": run,
        "collect": step_messages(job_id, Step(record.round, "collect")),
        "round_calls": {str(m["args"][2]): m for m in every},
    }


def _calls_of(store: JobStore, job_id: str) -> int:
    """How many calls the job's current round has (its record's ``calls``)."""
    raw = store.redis.hget(store.key(job_id, "state"), "calls")
    try:
        return int(raw or 0)
    except ValueError:
        return 0


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
