"""``StepContext``: what one step message works with, loaded once; ``JobFixtures``: the part of it
that is fixed for the life of a job's spec, kept between steps in the worker (``Runtime.jobs``).

A step reads its job with its claim, in one round trip (``Claim.view``: spec, cancel flag, the
messages it needs; ``JobStore.step_view`` for a claim made without); the spec's JSON then finds the
job's fixtures in the worker's ``JobCache``, or builds them once: the loop plan, the reasoner
``Task`` (tool policy checked, secrets unsealed), the job's ``SecretScope`` (entered for the step:
what it writes masks the job's secrets) and the tools recommended for it. The memory a step writes
is held until its commit (``PendingMemory``), its events too (``DeferredHooks``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from celery.exceptions import Ignore

from tandem.reasoner.context.counting import TokenCache
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.task import Task
from tandem.tasks.events import EventHooks
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.claims import Claim
from tandem.tasks.state.pending import DeferredHooks, PendingMemory
from tandem.tasks.state.views import StepView, ViewAsk
from tandem.toolkit.redaction import SecretScope, current_scope, enter_scope
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.toolkit.graph import Action


@dataclass
class JobFixtures:
    """What does not change while a job's spec does not: built once per job and worker."""

    spec: JobSpec
    plan: LoopPlan
    task: Task
    tokens: TokenCache = field(default_factory=TokenCache, repr=False)
    """The job's token counts, kept between its steps in this worker (``tandem.reasoner.context``)."""
    _recommended: tuple[list[Tool], list[Action]] | None = field(default=None, repr=False)
    _scope: SecretScope | None = field(default=None, repr=False)

    @classmethod
    def build(cls, rt: Runtime, job_id: str, spec: JobSpec) -> JobFixtures:
        """The plan and ``Task`` of a job (``JobSpecError`` when the tool policy refuses it)."""
        return cls(spec, rt.plan(spec), rt.task_for(job_id, spec))

    @property
    def scope(self) -> SecretScope:
        """The job's secrets as its records are redacted with (indexed once per job and worker)."""
        if self._scope is None:
            self._scope = SecretScope.of(self.task.job_id or "", self.task.secrets.values())
        return self._scope

    def recommend(self) -> tuple[list[Tool], list[Action]]:
        """The tools and actions offered to the job's model (``Task.recommend``, once per job)."""
        if self._recommended is None:
            self._recommended = self.task.recommend()
        tools, actions = self._recommended
        return list(tools), list(actions)

    def tools_by_name(self) -> dict[str, Tool]:
        """The recommended tools by name (what a tool call may name)."""
        return {t.name: t for t in self.recommend()[0]}


def enter_job_scope(rt: Runtime, job_id: str, spec: JobSpec) -> None:
    """Enter the ``SecretScope`` of ``job_id`` (its unsealed ``spec.secrets``) unless it is entered
    already: for what ends a job outside a step (``finish`` from the reconciler, a cancel). A value
    that cannot be unsealed leaves the scope empty (its records then mask it by shape only)."""
    scope = current_scope()
    if not spec.secrets or (scope is not None and scope.job_id == job_id):
        return
    try:
        values = rt.secret_box.unseal(spec).values()
    except Exception:  # a foreign key: the job fails saying so; nothing of it to mask by value
        values = {}.values()
    enter_scope(SecretScope.of(job_id, values))


@dataclass
class StepContext:
    """One step's view of its job: the claim, what was read, the job's fixtures, the memory and
    events held until the commit."""

    rt: Runtime
    claim: Claim
    view: StepView
    job: JobFixtures
    memory: PendingMemory
    events: EventHooks
    hooks: DeferredHooks

    @classmethod
    def load(cls, rt: Runtime, claim: Claim, ask: ViewAsk | None = None) -> StepContext:
        """Read the claimed step's job as ``ask`` says (the claim's ``view``, the same ``ViewAsk``
        the claim was made with; read here for a claim made without) and find its fixtures;
        ``Ignore`` for an unknown or expired job."""
        ask = ask or ViewAsk()
        job_id = claim.job_id
        view = claim.view or rt.store.step_view(job_id, messages=ask.messages, record=ask.record)
        messages = ask.messages
        asked = list(messages) if messages and messages is not True else None
        stored = rt.store.memory(job_id)
        # A step's tokens are fenced by its claim's epoch (from 1; a tool call's claim has none).
        fence = claim.epoch if claim.index == 0 and claim.epoch > 0 else None
        events = EventHooks(rt.store, job_id, epoch=fence)
        hooks = DeferredHooks(events)
        memory = PendingMemory(stored, view.messages, asked=asked, artifacts=rt.store.artifacts(job_id))
        if view.spec_json is None:
            raise Ignore()  # unknown or expired job: nothing to do
        spec = view.spec_json
        job = rt.jobs.get(
            job_id, spec, lambda: JobFixtures.build(rt, job_id, JobSpec.model_validate_json(spec))
        )
        enter_scope(job.scope)  # this step's records mask the job's own secrets, and no other job's
        return cls(rt, claim, view, job, memory, events, hooks)

    @property
    def spec(self) -> JobSpec:
        """The job's spec."""
        return self.job.spec

    @property
    def plan(self) -> LoopPlan:
        """The job's loop plan."""
        return self.job.plan

    @property
    def task(self) -> Task:
        """The job's reasoner ``Task``."""
        return self.job.task
