"""Parking a job for approval: which calls of an Actor reply wait, and how an approved call runs.

A model step whose reply calls tools that need a person's decision (``Tool.requires_approval``,
``JobSpec.approve_tools``) commits with a ``Park``: the calls that need none are sent as usual,
the others are held, and the job's record moves to ``awaiting_approval`` together with its
``ApprovalRecord`` (one atomic transition, see ``tandem.tasks.state.machine``). The job then holds no
worker and has no task queued until the decisions come (``tandem.tasks.control.approvals``). An
approved call runs on the tools queue like any other, with the edited args of its decision.

A job waits at most ``JobSpec.approval_timeout_s``, or ``TANDEM_MEMORY_TTL`` without one (its
keys must outlive the wait): then its undecided calls are rejected. The wait does not count
towards the job's deadline (``timeout_s``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.reasoner.approval import pending_calls
from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.step import Step
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.task import Task
from tandem.tasks.control.approvals import ApprovalRecord, ApprovalStore
from tandem.tasks.job_events import ApprovalRequested
from tandem.tasks.state.claims import Park
from tandem.tasks.state.store import JobStore
from tandem.toolkit.tool import Tool

__all__ = ["NOT_APPROVED", "announce", "approved_call", "park_for"]

NOT_APPROVED = (
    "The call was not run: {tool!r} needs a person's approval and no decision approved this call. "
    "Take another way or ask the user."
)


def park_for(
    job_id: str,
    plan: LoopPlan,
    nxt: Step,
    reply: ModelMessage,
    task: Task,
    tools: Sequence[Tool],
    *,
    max_wait: float,
) -> Park | None:
    """How the move to ``nxt`` parks the job, or ``None`` when no call of ``reply`` needs approval
    (or ``nxt`` is not a tool step). ``tools`` are the tools the model was offered; ``max_wait``
    is the longest wait for a decision in seconds."""
    if nxt.kind != "tools":
        return None
    calls = plan.calls_of(reply)
    waiting = pending_calls(
        calls, tools, task.approve_tools, round_no=nxt.round, call_ids=plan.call_ids(reply, calls)
    )
    if not waiting:
        return None
    record = ApprovalRecord.for_round(job_id, nxt.round, waiting, tools, timeout_s=max_wait)
    assert record.deadline is not None
    return Park(record.model_dump_json(), tuple(p.index for p in waiting), max_wait, record.deadline)


def announce(store: JobStore, job_id: str, park: Park) -> None:
    """Publish ``approval_requested`` for a job just parked, with its pause's id (the record as
    stored, which carries the pause number the parking transition counted)."""
    parked = ApprovalRecord.model_validate_json(park.record_json)
    stored = ApprovalStore(store).get(job_id)
    record = stored if stored is not None and stored.round == parked.round else parked
    asked = ApprovalRequested(
        round=record.round,
        pause_id=record.pause_id,
        seq=record.seq,
        pending=list(record.pending),
        timeout_s=record.timeout_s,
        until=record.deadline,
    )
    store.publish(job_id, asked)


def approved_call(
    store: JobStore,
    job_id: str,
    round_no: int,
    index: int,
    call: ParsedFunctionCall,
    tool: Tool | None,
    task: Task,
) -> tuple[ParsedFunctionCall, bool] | str:
    """Call ``index`` of ``round_no`` as it may run: ``(call, False)`` when it needs no approval,
    ``(call with the decision's edited args, True)`` when a decision approved it, else the FAILED
    output saying it was not approved (a held call is never claimed, so only a bug gets there)."""
    from tandem.reasoner.approval import needs_approval

    if not needs_approval(tool, task.approve_tools):
        return call, False
    record = ApprovalStore(store).get(job_id)
    decision = record.decision(index) if record is not None and record.round == round_no else None
    if decision is None or not decision.approve:
        return NOT_APPROVED.format(tool=call.name)
    if decision.args is not None:
        call = call.model_copy(update={"args": dict(decision.args)})
    return call, True
