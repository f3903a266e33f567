"""The tool step of one round, in-process: free calls run, waiting calls are decided, then run.

Both in-process drivers use it, sync (``run_tool_round``) and asyncio (``arun_tool_round``):
the split into free and waiting calls, the decisions and their meaning come from
``tandem.reasoner.approval``; only how calls and approvers are waited for differs.

The hooks see ``tool_called`` for each call about to run, ``approval_requested`` and
``approval_decided`` around the decisions, and ``tool_returned`` for every result, rejected
calls included (they come back FAILED with the reason, and the model reads them like any other
result). Results are in call order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.reasoner.approval import (
    Approver,
    Decision,
    PendingCall,
    adecide,
    apply_decisions,
    decide,
    pending_calls,
    rejected_result,
)
from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.loop.calls import tool_context
from tandem.reasoner.messages import FunctionCallResult
from tandem.reasoner.task import Task
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.tool import Tool

__all__ = ["arun_tool_round", "run_tool_round"]


@dataclass
class _Round:
    """One round's calls split into those that run at once and those that wait."""

    task: Task
    round_no: int
    tools: Sequence[Tool]
    calls: Sequence[ParsedFunctionCall]
    hooks: ReasonerHooks
    call_ids: Sequence[str | None] | None

    def __post_init__(self) -> None:
        self.pending: list[PendingCall] = pending_calls(
            self.calls, self.tools, self.task.approve_tools, round_no=self.round_no, call_ids=self.call_ids
        )
        waiting = {p.index for p in self.pending}
        self.free = [(i, c) for i, c in enumerate(self.calls, start=1) if i not in waiting]
        self.ids = {i: cid for i, cid in enumerate(self.call_ids or [], start=1)}
        self.ctx = tool_context(self.task, self.round_no)

    def announce(self, items: Sequence[tuple[int, ParsedFunctionCall]]) -> None:
        for index, call in items:
            self.hooks.tool_called(self.round_no, index, call)

    def settle(
        self, decisions: dict[int, Decision]
    ) -> tuple[list[tuple[int, ParsedFunctionCall]], list[FunctionCallResult]]:
        """Publish the decisions; the approved calls to run and the rejected calls' results."""
        self.hooks.approval_decided(self.round_no, [decisions[i] for i in sorted(decisions)])
        approved, rejected = apply_decisions(self.calls, decisions)
        by_index = {p.index: p for p in self.pending}
        refused = [rejected_result(by_index[i], decisions[i].reason or "") for i in rejected]
        return approved, refused

    def done(self, results: list[FunctionCallResult]) -> list[FunctionCallResult]:
        ordered = sorted(results, key=lambda r: r.index)
        for result in ordered:
            self.hooks.tool_returned(self.round_no, result)
        return ordered


def run_tool_round(
    runner: ToolRunner,
    tools: Sequence[Tool],
    calls: Sequence[ParsedFunctionCall],
    *,
    task: Task,
    round_no: int,
    hooks: ReasonerHooks,
    approver: Approver | None = None,
    call_ids: Sequence[str | None] | None = None,
) -> list[FunctionCallResult]:
    """Run the calls of ``round_no``'s reply: free calls first, then ask ``approver`` about the
    waiting ones (``Task.approval_timeout_s``), then run the approved ones; results in call
    order. ``ApprovalError`` when the approver fails or answers what cannot apply."""
    r = _Round(task, round_no, tools, calls, hooks, call_ids)
    r.announce(r.free)
    results = runner.run_indexed(tools, r.free, r.ctx, r.ids)
    if r.pending:
        hooks.approval_requested(round_no, list(r.pending))
        decisions = decide(approver, r.pending, tools, task.approval_timeout_s)
        approved, refused = r.settle(decisions)
        r.announce(approved)
        results += runner.run_indexed(tools, approved, r.ctx, r.ids, approved=True) + refused
    return r.done(results)


async def arun_tool_round(
    runner: ToolRunner,
    tools: Sequence[Tool],
    calls: Sequence[ParsedFunctionCall],
    *,
    task: Task,
    round_no: int,
    hooks: ReasonerHooks,
    approver: Approver | None = None,
    call_ids: Sequence[str | None] | None = None,
) -> list[FunctionCallResult]:
    """``run_tool_round`` for asyncio: the free calls run while the approver is asked, and all
    calls are awaited concurrently (async tools in the loop, plain ones in threads)."""
    r = _Round(task, round_no, tools, calls, hooks, call_ids)
    r.announce(r.free)
    free = asyncio.ensure_future(runner.arun_indexed(tools, r.free, r.ctx, r.ids))
    results: list[FunctionCallResult] = []
    try:
        if r.pending:
            hooks.approval_requested(round_no, list(r.pending))
            decisions = await adecide(approver, r.pending, tools, task.approval_timeout_s)
            approved, refused = r.settle(decisions)
            r.announce(approved)
            results += await runner.arun_indexed(tools, approved, r.ctx, r.ids, approved=True) + refused
    except BaseException:
        free.cancel()  # the run fails or is cancelled: no call is left running behind it
        raise
    return r.done(await free + results)
