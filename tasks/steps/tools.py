"""The tool steps: ``tandem.run_tool`` runs one call of a round's ``tools`` step (queue ``tools``);
``tandem.collect_tools`` stores the round's results in memory and moves to what follows (run at
once by the call that stores the round's last result)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, NoReturn

from celery import Task as CeleryTask
from celery.exceptions import Ignore
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from tandem.reasoner import tracing
from tandem.reasoner.artifacts import READ_ARTIFACT, read_artifact_tool
from tandem.reasoner.loop.calls import call_context
from tandem.reasoner.loop.step import Step
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus
from tandem.tasks.app import app
from tandem.tasks.control.children import ChildrenPending, ChildrenStore, WorkerSpawner
from tandem.tasks.control.children import resolve as resolve_children
from tandem.tasks.control.parking import approved_call
from tandem.tasks.control.questions import QuestionPending, QuestionStore, WorkerAsker
from tandem.tasks.control.spend import with_children_spend
from tandem.tasks.events import tool_result_event
from tandem.tasks.hosts.budgets import message_priority
from tandem.tasks.runtime import get_runtime
from tandem.tasks.state.claims import Claim, Message
from tandem.tasks.state.leases import Heartbeat
from tandem.tasks.state.replicas import Waited
from tandem.tasks.state.views import ViewAsk
from tandem.tasks.steps.context import StepContext
from tandem.tasks.steps.dispatch import send
from tandem.tasks.steps.guard import claim_call, claim_step, commit, describe_failure, finish, retrying
from tandem.tasks.steps.hand_back import delay
from tandem.tasks.steps.messages import step_messages
from tandem.tasks.tracing import step_span
from tandem.tasks.webhooks import delivery as webhooks

log = logging.getLogger("tandem.tasks")

CANCELLED_CALL = "the job was cancelled"
"""The output stored for a call its cancelled job never ran (a resumed job runs it)."""

INTERRUPTED = (
    "this call was interrupted (the worker running it was lost) and was not run again because "
    "the tool is at_most_once: it may or may not have taken effect; check before calling it again"
)


def never_ran(result: FunctionCallResult) -> bool:
    """True for the placeholder a cancelled job stores for a call it never ran (no ``tool_call``
    and no ``tool_result`` event is published for it; a resume runs the call)."""
    return result.status == FunctionCallStatus.FAILED and result.output == CANCELLED_CALL


def _call_failed(index: int, name: str, output: str) -> FunctionCallResult:
    return FunctionCallResult(index=index, name=name, status=FunctionCallStatus.FAILED, output=output)


@app.task(name="tandem.run_tool", bind=True)
def run_tool(self: CeleryTask, job_id: str, round_no: int, index: int, *_: Any) -> dict[str, Any] | None:
    """Run call ``index`` of the Actor's reply in ``round_no`` (queue ``tools``).

    The call's start (its attempt) is recorded before it runs; its result is stored once; the
    call that stores the round's last result moves the job to ``collect``. An ``at_most_once``
    tool is marked started right before it runs; one whose earlier attempt got that far and was
    interrupted is not run again (its result is a failure saying so), while one interrupted before
    (a Redis outage while the call was loaded, say) runs.
    """
    with step_span(job_id, round_no, "tools", index):
        return _run_tool(job_id, round_no, index)


def _run_tool(job_id: str, round_no: int, index: int) -> dict[str, Any] | None:
    rt = get_runtime()
    ask = ViewAsk(messages=[f"{round_no}:actor"])  # the Actor's reply that made the call
    claim = claim_call(rt, job_id, round_no, index, ask)
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds):
        ctx: StepContext | None = None
        try:
            ctx = StepContext.load(rt, claim, ask)
            result = call_tool(ctx)
        except ChildrenPending as spawned:  # child jobs started: park until their wait holds
            deadline = float(rt.machine.record(job_id).get("deadline") or 0)
            left = max(deadline - time.time(), 1.0) if deadline else rt.settings.job_timeout
            pending = spawned
            verdict = retrying(rt, lambda: ChildrenStore(rt.store).park(claim, pending, left))
            log.info("job %s: call %d of round %d waits for children (%s)", job_id, index, round_no, verdict)
            if verdict == "parked":
                resolve_children(rt, job_id)  # children that ended before it parked
            raise Ignore() from None
        except QuestionPending as asked:  # the tool asked a person: park the job, hold no worker
            assert ctx is not None
            timeout = ctx.spec.answer_timeout_s or rt.settings.memory_ttl
            question = asked
            verdict = retrying(rt, lambda: QuestionStore(rt.store).park(claim, question, timeout))
            log.info("job %s: call %d of round %d asks a person (%s)", job_id, index, round_no, verdict)
            if verdict == "parked" and ctx.spec.webhooks:
                webhooks.notify(rt, job_id, ctx.spec)  # its ``waiting_for_person`` deliveries
            raise Ignore() from None
        except Ignore:
            raise
        except (RedisError, OperationalError):
            log.warning(
                "job %s: call %d of round %d hit a Redis error; it will be sent again",
                job_id,
                index,
                round_no,
            )
            raise Ignore() from None
        except Exception as exc:  # the round must always hear back, or the job would wait for it
            result = _call_failed(index, "(unknown)", describe_failure(exc))
        collect = step_messages(job_id, Step(round_no, "collect"))
        outbox_id = uuid.uuid4().hex
        # The tool_result event is stored with the result, in the commit's script: a cancel ending
        # the job right after cannot put its ``final`` before it. A call its cancelled job never
        # ran gets none (nor a tool_call): its placeholder only tells a resume to run it, and the
        # run's ``final`` says why it did not; a resumed run announces it and publishes its result.
        entry = None if never_ran(result) else rt.store.entry(tool_result_event(round_no, result))
        maxlen = rt.store.stream.maxlen
        moved = retrying(
            rt,
            lambda: rt.machine.call_done(
                claim, result.model_dump_json(), collect, outbox_id=outbox_id, event=entry, maxlen=maxlen
            ),
        )
    tracing.annotate({"tandem.commit": "committed" if moved else "lost"})
    if not moved:
        log.warning(
            "job %s: call %d of round %d lost its claim; its result is dropped", job_id, index, round_no
        )
        raise Ignore()
    if moved == 2:
        # The call that stored the round's last result collects at once, in this thread: one hop
        # less per tool round. The ``collect`` message stays in the outbox until the collect step
        # commits, so the reconciler sends it if this worker dies first.
        collect_step(job_id, round_no)
    return result.model_dump(mode="json")


def call_tool(ctx: StepContext) -> FunctionCallResult:
    """The result of the claimed call: run (once approved, if it needs approval), or a failure
    saying why not (the job was cancelled, an ``at_most_once`` tool was interrupted, a person
    rejected it)."""
    claim: Claim = ctx.claim
    round_no, index = claim.round, claim.index
    reply = next(iter(ctx.view.messages or []), None)
    if reply is None:
        raise LookupError(f"the Actor's reply of round {round_no} is not in memory")
    call = ctx.plan.calls_of(reply)[index - 1]
    call_id = reply.tool_calls[index - 1].id if reply.tool_calls else None
    by_name = ctx.job.tools_by_name()
    by_name.setdefault(READ_ARTIFACT, read_artifact_tool())  # runs in any step; offered once needed
    tool = by_name.get(call.name)
    cleared = approved_call(ctx.rt.store, claim.job_id, round_no, index, call, tool, ctx.task)
    if ctx.view.cancelled:
        return _call_failed(index, call.name or "(cancelled)", CANCELLED_CALL)
    if claim.started and tool is not None and tool.at_most_once:
        return _call_failed(index, call.name, INTERRUPTED)
    if isinstance(cleared, str):
        return _call_failed(index, call.name, cleared)
    call, approved = cleared
    # The start mark is retried through a Redis outage (while this claim holds, marking it again
    # is harmless: the tool has not run): a mark whose reply was lost, given up at once, would
    # make the call's next holder report it interrupted although it never ran.
    if tool is not None and tool.at_most_once:
        marked, waited = retrying(ctx.rt, lambda: ctx.rt.machine.call_started(claim))
        if not marked:
            raise Ignore()  # the claim was lost before the tool ran: its new holder runs it
        if waited is not None and waited.short:
            put_off_unreplicated_call(ctx, waited)
    ctx.events.tool_called(round_no, index, call, attempt=claim.attempt)
    spawner = WorkerSpawner(ctx.rt, claim.job_id, round_no, index, call.name)
    tool_ctx = (
        call_context(ctx.task, round_no, index, claim.attempt)
        .bind_asker(WorkerAsker(ctx.rt.store, claim.job_id, round_no, index, call.name))
        .bind_spawner(spawner)
        .bind_artifacts(
            ctx.memory.artifacts,
            limit=ctx.task.max_memory_bytes,
            page_chars=ctx.rt.settings.max_output_chars,
        )
    )
    runner = ctx.rt.runner
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name}
    with tracing.span(f"execute_tool {call.name}", attrs) as span:
        result = ctx.plan.run_call(runner, by_name, call, index, tool_ctx, call_id=call_id, approved=approved)
        if spawner.used:  # the spend of the children its spawns got back is the parent's
            result = with_children_spend(ctx.rt, claim.job_id, index, result)
        if span is not None:
            span.set_attribute("tandem.tool.status", str(result.status.value))
        return result


def put_off_unreplicated_call(ctx: StepContext, waited: Waited) -> NoReturn:
    """The ``at_most_once`` call's start mark reached fewer replicas than
    ``TANDEM_REDIS_WAIT_REPLICAS`` in time, so a failover could lose it and let the call run
    twice: its tool does not run. Like a transient failure, the call is put off: its mark taken
    back, its lease let go (no lease expiry counted), the reason kept as the job's last error (what
    its deadline reports, should the replicas never come back), and its message sent again after a
    back-off growing with its attempts (``hand_back.delay``); the reconciler sends it should that
    message be lost."""
    rt, claim = ctx.rt, ctx.claim
    why = (
        f"the start mark of at_most_once call {claim.index} of round {claim.round} reached "
        f"{waited.acked} of {waited.asked} replicas within {rt.settings.redis_wait_timeout_ms} ms "
        "(TANDEM_REDIS_WAIT_REPLICAS): the tool did not run, the call runs later"
    )
    countdown = round(delay(claim.attempt - 1), 3)
    retrying(rt, lambda: rt.machine.renew(claim, rt.settings.lease_seconds, last_error=why))
    if not retrying(rt, lambda: rt.machine.call_unstarted(claim)):
        raise Ignore()  # the claim was lost meanwhile: its new holder decides
    tracing.annotate({"tandem.commit": "put off", "tandem.tool.put_off_seconds": countdown})
    log.warning("job %s: %s, in %.1f s", claim.job_id, why, countdown)
    again = step_messages(claim.job_id, Step(claim.round, "tools"), indices=[claim.index])
    priority = message_priority(ctx.spec.priority, rt.settings.broker_url)
    try:
        send(
            [Message(task=m["task"], args=m["args"], countdown=countdown) for m in again],
            priority,
            ctx.spec.trace_context,
        )
    except Exception:  # the reconciler sends it once the call is idle past the stall time
        log.warning(
            "job %s: sending call %d again failed; the reconciler sends it",
            claim.job_id,
            claim.index,
            exc_info=True,
        )
    raise Ignore()


@app.task(name="tandem.collect_tools", bind=True)
def collect_tools(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """Store the round's tool results in memory, then move to what the plan says follows."""
    return collect_step(job_id, round_no)


def collect_step(job_id: str, round_no: int) -> dict[str, Any] | None:
    """The ``collect`` step of ``round_no``: woken by ``tandem.collect_tools``, or run at once by
    the tool call that stored the round's last result."""
    with step_span(job_id, round_no, "collect"):
        return _collect_step(job_id, round_no)


def _collect_step(job_id: str, round_no: int) -> dict[str, Any] | None:
    rt = get_runtime()
    keys = [f"{round_no}:actor", f"{round_no}:tool"]  # the round's messages, not the whole memory
    ask = ViewAsk(messages=keys, record=["calls"], results=True)  # and the round's tool results
    claim = claim_step(rt, job_id, round_no, "collect", ask)
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds):
        ctx = StepContext.load(rt, claim, ask)
        if ctx.view.cancelled:
            return finish(job_id, "cancelled", claim=claim)
        count = int(ctx.view.record.get("calls") or 0)
        results = ctx.view.results
        if results is None:  # a claim made without its view
            results = rt.store.tool_results(job_id, round_no, count)
        missing = [i for i, r in enumerate(results, start=1) if r is None]
        if missing:
            return finish(
                job_id,
                "failed",
                f"tool results of round {round_no} are missing for calls {missing}",
                claim=claim,
            )
        stored = ctx.plan.record_tools(ctx.memory, round_no, [r for r in results if r is not None])
        nxt = ctx.plan.after_tools(ctx.task, stored.function_results, round_no)
        commit(rt, claim, nxt, ctx.memory, ctx.hooks, ctx.spec)
    return None
