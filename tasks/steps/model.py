"""The model steps: ``tandem.thinker_turn`` and ``tandem.actor_turn`` (the model of mono and react
jobs too), each one model call of a round, and what the job's plan says follows it."""

from __future__ import annotations

from typing import Any

from celery import Task as CeleryTask

from tandem.reasoner.artifacts import has_artifacts, with_reader
from tandem.reasoner.context.budget import budget_of
from tandem.reasoner.loop.step import ModelRole, Step, StepInputs
from tandem.reasoner.models import attempt_notes
from tandem.tasks.app import app
from tandem.tasks.control.parking import park_for
from tandem.tasks.events import streams
from tandem.tasks.hosts.budgets import budget_spent
from tandem.tasks.hosts.host_model import CapacityWait
from tandem.tasks.hosts.waiting import wait_for_capacity
from tandem.tasks.runtime import get_runtime
from tandem.tasks.state.claims import Park
from tandem.tasks.state.leases import Heartbeat
from tandem.tasks.state.views import ViewAsk
from tandem.tasks.steps.context import StepContext
from tandem.tasks.steps.guard import claim_step, commit, finish, step_failed
from tandem.tasks.tenants.gate import gate_of
from tandem.tasks.tracing import step_span


def model_step(job_id: str, round_no: int, kind: ModelRole) -> dict[str, Any] | None:
    """Run model step ``kind`` (``thinker`` or ``actor``) of ``round_no`` and move the job on."""
    with step_span(job_id, round_no, kind):
        return _model_step(job_id, round_no, kind)


def _model_step(job_id: str, round_no: int, kind: ModelRole) -> dict[str, Any] | None:
    rt = get_runtime()
    ask = ViewAsk()  # the spec, the cancel flag and the whole memory, read with the claim
    claim = claim_step(rt, job_id, round_no, kind, ask)
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds) as beat, attempt_notes.noting(beat.note):
        ctx = StepContext.load(rt, claim, ask)
        if ctx.view.cancelled:
            return finish(job_id, "cancelled", claim=claim)
        replied = ctx.memory.get_message(round_no, kind) is not None
        spent = budget_spent(ctx.spec, ctx.memory)
        if spent is not None and not replied:
            return finish(job_id, "truncated", spent, claim=claim)
        try:
            nxt, park = call_model(ctx, kind, replied=replied)
        except CapacityWait as wait:
            return wait_for_capacity(rt, claim, ctx.spec, wait)
        except Exception as exc:
            return step_failed(rt, claim, exc)
        commit(rt, claim, nxt, ctx.memory, ctx.hooks, ctx.spec, park)
        gate = gate_of(rt)
        reply = None if replied or gate is None else ctx.memory.get_message(round_no, kind)
        if gate is not None and reply is not None:  # the tenant's daily usage (tandem.tasks.tenants)
            gate.count(ctx.spec.owner, reply.usage)
    return None


def step_inputs(ctx: StepContext) -> StepInputs:
    """What a model step of ``ctx``'s job reads (and its compaction step counts): the task, the
    memory, the recommended tools (``read_artifact`` too once the job holds an artifact), the
    hooks, the job's token counts and ``TANDEM_COMPACT_AT``."""
    tools, actions = ctx.job.recommend()
    if has_artifacts(ctx.memory.get_messages()):
        tools = with_reader(tools)  # the built-in read_artifact, once the job holds an artifact
    compact_at = ctx.rt.settings.compaction.compact_at
    return StepInputs(
        ctx.task, ctx.memory, tools, actions, ctx.hooks, tokens=ctx.job.tokens, compact_at=compact_at
    )


def call_model(ctx: StepContext, kind: ModelRole, *, replied: bool) -> tuple[Step, Park | None]:
    """The model call of step ``kind`` (or its reply already stored, ``replied``) and the step that
    follows, with how the move parks the job when a call needs a person's approval. When the plan
    says the role's older rounds are to be summarized first, no call: the step that follows is the
    compaction step (``tandem.tasks.steps.compact``), which comes back here."""
    plan, task, step = ctx.plan, ctx.task, Step(ctx.claim.round, kind)
    role, mode = plan.model(kind)
    model = ctx.rt.model(role, mode)
    inputs = step_inputs(ctx)
    if not replied and plan.compaction_due(step, inputs, budget_of(model)) is not None:
        return step.compaction(), None
    if plan.starts_round(step) and not replied:
        ctx.hooks.round_started(step.round, plan.rounds(task))
    ctx.events.live = streams(model)  # a reply not streamed gets no model_delta events
    reply = plan.run_model(step, model, inputs)
    nxt = plan.after_model(step, reply, task)
    wait_at_most = ctx.spec.approval_timeout_s or ctx.rt.settings.memory_ttl
    return nxt, park_for(ctx.claim.job_id, plan, nxt, reply, task, inputs.tools, max_wait=wait_at_most)


@app.task(name="tandem.thinker_turn", bind=True)
def thinker_turn(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """The Thinker's turn of ``round_no`` (queue ``thinker``)."""
    return model_step(job_id, round_no, "thinker")


@app.task(name="tandem.actor_turn", bind=True)
def actor_turn(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """The Actor's turn of ``round_no`` (queue ``actor``): also the model of mono and react jobs."""
    return model_step(job_id, round_no, "actor")


@app.task(name="tandem.react_turn", bind=True)
def react_turn(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """The model step of a react job (an alias of ``tandem.actor_turn``, kept for old messages)."""
    return model_step(job_id, round_no, "actor")
