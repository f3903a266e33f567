"""The model step of a ``react`` job as a Celery task body (``tandem.react_turn``, queue ``actor``).

``react_turn(job, r)`` → ``tandem.reasoner.react.react_step`` (the model with the tools) → one of:
``finalize(completed)`` (the reply is the answer), ``finalize(truncated)`` (the step budget,
``JobSpec.max_rounds``, cannot hold the calls), or ``chord(run_tool × N on "tools") →
collect_tools(job, r)``, which stores the results and opens round ``r + 1`` (or finalizes a
``return_direct`` result, or a spent budget; see ``tandem.tasks.turns.collect_tools``).

Durability is the dual jobs': the step runs under the ``{r}:react`` step guard and lease, the
reply is stored once under ``(r, "actor")`` before the job moves on, and a duplicate of the step
(redelivery, lease takeover) is ignored or finds the stored reply instead of calling the model again.
"""

from __future__ import annotations

from typing import Any

from celery import Task as CeleryTask

from tandem.reasoner import react
from tandem.tasks.budgets import budget_spent
from tandem.tasks.events import EventHooks
from tandem.tasks.host_model import CapacityWait
from tandem.tasks.runtime import Runtime, get_runtime
from tandem.tasks.turns import _advance, _failure, _fan_out, _load, _step, finalize, finish
from tandem.tasks.waiting import wait_for_capacity


def function_calling(rt: Runtime) -> react.FunctionCalling:
    """Native tool calls, or the prompt protocol with the offline demo model (it has no native
    tool calling)."""
    conf = rt.settings.role("actor")
    if conf.function_calling is not None:
        return conf.function_calling
    return "prompt" if conf.is_demo else "native"


def react_step(task_self: CeleryTask, job_id: str, round_no: int) -> Any:
    """The model step of ``round_no`` of a react job, then hand the job to what follows.

    Returns the final ``JobResult`` dict when the job ends here (cancelled, failed), otherwise
    replaces the task with the next step (``Task.replace`` keeps the job id).
    """
    step_id = f"{round_no}:react"
    with _step(task_self, job_id, step_id, (job_id, round_no)) as lease:
        rt = get_runtime()
        spec, task = _load(job_id)
        if rt.store.cancel_requested(job_id):
            return finish(job_id, "cancelled")
        hooks = EventHooks(rt.store, job_id)
        memory = rt.store.memory(job_id)
        spent = budget_spent(spec, memory)
        if spent is not None and memory.get_message(round_no, "actor") is None:
            return finish(job_id, "truncated", spent)
        mode = function_calling(rt)
        try:
            if memory.get_message(round_no, "actor") is None:
                hooks.round_started(round_no, react.rounds_for(task.max_rounds))
            rt.store.set_status(job_id, state="running", round=round_no, step="react")
            tools, _ = task.recommend()
            model = rt.model("actor", "react")
            reply = react.react_step(model, task, memory, round_no, tools, mode=mode, hooks=hooks)
            nxt = react.react_plan_next(task, reply, round_no, mode=mode)
        except CapacityWait as wait:
            raise wait_for_capacity(task_self, lease, job_id, step_id, (job_id, round_no), wait) from None
        except Exception as exc:
            return finish(job_id, "failed", _failure(exc))
        if nxt.kind == "deliver":
            return _advance(task_self, job_id, step_id, "finalize", finalize.si(job_id, "completed"))
        if nxt.kind == "truncated":
            return _advance(task_self, job_id, step_id, "finalize", finalize.si(job_id, "truncated"))
        count = len(nxt.calls)
        return _advance(task_self, job_id, step_id, f"tools x{count}", _fan_out(job_id, round_no, count))
