"""The compaction steps: ``tandem.compact_thinker`` and ``tandem.compact_actor`` (queues ``thinker``
and ``actor``), each the summary of a role's older rounds before its model step of a round.

A model step whose request would pass ``TANDEM_COMPACT_AT`` of its role's budget, with rounds left
to summarize (``LoopPlan.compaction_due``), makes no call: it moves the job to this step
(``tandem.tasks.steps.model.call_model``). This step is claimed, leased, traced and committed like
every step. It asks the plan again (the same stored messages give the same answer), asks the role's
summary model (``Runtime.summarizer``) and commits the ``summary`` entry (``HSETNX`` under
``<last round>:summary:<role>``) with its ``memory_compacted`` event, moving the job back to the
model step, which then reads the summary in place of those rounds.

Safe to run twice: a run that lost its claim (a worker killed mid-call) commits nothing, and the
next run asks for the same rounds; a commit stores one entry, and once it is stored those rounds
are not due again, so no round is summarized twice. A transient failure of the summary model
(429/5xx/time-out, after its own retries) parks the step like any step, up to ``SUMMARY_RETRIES``
times; then, or at once for any other model failure or a reply that is not usable, a ``dropped``
entry (a marker) is committed instead: the job never fails because a summary did not come.
"""

from __future__ import annotations

from typing import Any

from celery import Task as CeleryTask

from tandem.reasoner.context.budget import budget_of
from tandem.reasoner.context.summary import summary_entry
from tandem.reasoner.errors import ReasonerError, TransientModelError
from tandem.reasoner.loop.compacting import ask_for, compaction_of, failure_of
from tandem.reasoner.loop.plan import compacted
from tandem.reasoner.loop.step import ModelRole, Step
from tandem.reasoner.models import attempt_notes
from tandem.tasks.app import app
from tandem.tasks.hosts.host_model import CapacityWait
from tandem.tasks.hosts.waiting import wait_for_capacity
from tandem.tasks.runtime import get_runtime
from tandem.tasks.state.leases import Heartbeat
from tandem.tasks.state.views import ViewAsk
from tandem.tasks.steps.context import StepContext
from tandem.tasks.steps.guard import claim_step, commit, finish, step_failed
from tandem.tasks.steps.model import step_inputs
from tandem.tasks.tracing import step_span

SUMMARY_RETRIES = 2
"""How often a compaction step is parked after a transient failure of the summary model before a
``dropped`` entry is stored instead."""


def compact_step(job_id: str, round_no: int, role: ModelRole) -> dict[str, Any] | None:
    """Summarize ``role``'s older rounds before its model step of ``round_no``, then move back to it."""
    step = Step(round_no, role).compaction()
    with step_span(job_id, round_no, step.kind):
        return _compact_step(job_id, step)


def _compact_step(job_id: str, step: Step) -> dict[str, Any] | None:
    rt = get_runtime()
    ask = ViewAsk()  # the spec, the cancel flag and the whole memory, read with the claim
    claim = claim_step(rt, job_id, step.round, step.kind, ask)
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds) as beat, attempt_notes.noting(beat.note):
        ctx = StepContext.load(rt, claim, ask)
        if ctx.view.cancelled:
            return finish(job_id, "cancelled", claim=claim)
        model_step = step.compacted()
        role, mode = ctx.plan.model(model_step.role)
        inputs = step_inputs(ctx)
        try:
            budget = budget_of(rt.model(role, mode))
            due = ctx.plan.compaction_due(model_step, inputs, budget)
            if due is not None and budget is not None:
                summarizer = rt.summarizer(role, mode)
                request = ask_for(due, summarizer, inputs, budget)
                try:
                    entry = summary_entry(request, summarizer.generate(request.sys_prompt, request.messages))
                except TransientModelError as exc:
                    record = rt.machine.job(job_id)
                    if record is not None and record.retries < SUMMARY_RETRIES:
                        raise
                    entry = summary_entry(request, None, failure_of(exc))
                except CapacityWait:
                    raise
                except ReasonerError as exc:
                    entry = summary_entry(request, None, failure_of(exc))
                report = compaction_of(due, entry, inputs, budget)
                if ctx.plan.starts_round(model_step):
                    # the round's events all follow its round_started: the commit announces it
                    # (once: the model step's commit then does not, ``transition.lua``)
                    ctx.hooks.round_started(step.round, ctx.plan.rounds(ctx.task))
                if ctx.memory.add_message(entry):
                    compacted(ctx.hooks, report)
        except CapacityWait as wait:
            return wait_for_capacity(rt, claim, ctx.spec, wait)
        except Exception as exc:
            return step_failed(rt, claim, exc)
        commit(rt, claim, model_step, ctx.memory, ctx.hooks, ctx.spec)
    return None


@app.task(name="tandem.compact_thinker", bind=True)
def compact_thinker(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """Summarize the Thinker's older rounds before its turn of ``round_no`` (queue ``thinker``)."""
    return compact_step(job_id, round_no, "thinker")


@app.task(name="tandem.compact_actor", bind=True)
def compact_actor(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """Summarize the Actor's older rounds before its turn of ``round_no`` (queue ``actor``)."""
    return compact_step(job_id, round_no, "actor")
