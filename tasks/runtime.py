"""What a worker process builds once: Redis client, job store, model per role, toolkit, runner.

A client process (``submit``, the ``tandem`` commands that follow jobs) uses the same ``Runtime``
for its settings, Redis and store, on the core install: what only a worker builds (models and
their metrics, the toolkit, the tool policy) is imported where it is built, not here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from redis import Redis

from tandem.broker_config import Settings
from tandem.broker_config.job_redis import job_store_client, redis_options
from tandem.reasoner.context.budget import ContextBudget, budget_of
from tandem.reasoner.context.counting import MESSAGE_SLACK
from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.loop.kinds import plan_for
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.react import FunctionCalling
from tandem.reasoner.models.model_service import ModelService
from tandem.reasoner.prompts import task_text
from tandem.reasoner.task import Task
from tandem.reasoner.tool_runner import ToolRunner
from tandem.tasks.errors import JobSpecError
from tandem.tasks.hosts.capacity import HostCapacity, HostLimits, SlotKeeper
from tandem.tasks.hosts.model_loop import MODEL_LOOP
from tandem.tasks.job_cache import JobCache
from tandem.tasks.sealing import SecretBox
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.results import ResultDelivery
from tandem.tasks.state.store import JobStore
from tandem.tasks.webhooks.outbox import WebhookOutbox
from tandem.tasks.webhooks.targets import check_webhooks
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.tasks.steps.context import JobFixtures
    from tandem.toolkit.graph import Toolkit
    from tandem.toolkit.policy import ToolPolicy

log = logging.getLogger("tandem.runtime")

DEFAULT_CONCURRENCY = 4
"""The step threads assumed before a worker says how many it runs (clients, tests)."""
THREAD_SHARE = 2
"""A follow-up's thread takes at most ``1/THREAD_SHARE`` of its smallest role budget."""
POOL_SPARE = 8
"""Redis connections beyond two per step thread: the lease watchdog, event readers, metrics."""


class Runtime:
    """Per-process resources built lazily from ``Settings`` and shared by the tasks."""

    def __init__(self, settings: Settings, concurrency: int = DEFAULT_CONCURRENCY) -> None:
        self.settings = settings
        self.concurrency = concurrency
        """Threads that run steps in this process (a worker sets it before its first step)."""
        self._lock = threading.Lock()
        self._models: dict[str, ModelService] = {}
        self._toolkit: Toolkit | None = None
        self._toolkit_loaded = False
        self._toolkit_error: Exception | None = None
        self.jobs: JobCache[JobFixtures] = JobCache()
        """What is fixed per job (plan, ``Task``, recommended tools), kept between its steps."""

    @property
    def pool_size(self) -> int:
        """Redis connections this process may open: ``TANDEM_REDIS_MAX_CONNECTIONS``, or enough
        for every step thread and its lease heartbeat at once, plus the watchdog and spares."""
        if self.settings.redis_max_connections is not None:
            return self.settings.redis_max_connections
        return 2 * self.concurrency + POOL_SPARE

    @cached_property
    def redis(self) -> Redis:
        """A client of ``TANDEM_REDIS_URL`` over a blocking, thread-safe pool of ``pool_size``
        connections: under load a thread waits up to ``TANDEM_REDIS_POOL_TIMEOUT`` seconds for a
        free connection instead of failing with "Too many connections".

        Reads and connects time out (``TANDEM_REDIS_SOCKET_TIMEOUT``, ``_CONNECT_TIMEOUT``) and TCP
        keepalive is on, so a half-open connection fails a step (which is retried) instead of
        blocking it for ever. A ``redis+cluster://`` URL gives a ``RedisCluster`` client with one
        such pool per node (``tandem.broker_config.job_redis``).
        """
        return job_store_client(
            self.settings,
            max_connections=self.pool_size,
            pool_timeout=self.settings.redis_pool_timeout,
            **redis_options(self.settings),
        )

    @cached_property
    def store(self) -> JobStore:
        """The job store."""
        return JobStore.from_settings(self.redis, self.settings)

    @cached_property
    def delivery(self) -> ResultDelivery:
        """How a job's Celery result reaches the result backend (``tandem.tasks.state.results``)."""
        from tandem.tasks.app import app

        return ResultDelivery.for_store(app, self.store)

    @cached_property
    def webhooks(self) -> WebhookOutbox:
        """The jobs' webhook deliveries (``tandem.tasks.webhooks``)."""
        return WebhookOutbox(self.redis, self.settings.prefix)

    @cached_property
    def machine(self) -> JobMachine:
        """The jobs' state machine."""
        return self.store.machine

    def function_calling(self) -> FunctionCalling:
        """How react jobs call tools: the setting, else native (prompt with the offline demo
        model, which has no native tool calling)."""
        conf = self.settings.role("actor")
        if conf.function_calling is not None:
            return conf.function_calling
        return "prompt" if conf.is_demo else "native"

    def plan(self, spec: JobSpec) -> LoopPlan:
        """The loop plan of a job's reasoner kind."""
        return plan_for(spec.reasoner, function_calling=self.function_calling(), budget=spec.max_rounds)

    @cached_property
    def runner(self) -> ToolRunner:
        """The tool runner, with the configured timeout and limits (calls timed into metrics)."""
        from tandem.tasks.metrics import MeteredToolRunner

        limits = self.settings.limits
        return MeteredToolRunner(
            timeout=self.settings.tool_timeout,
            max_output_chars=self.settings.max_output_chars,
            artifact_bytes=self.settings.artifact_bytes,
            max_calls=limits.tool_calls,
            max_args_bytes=limits.tool_args_bytes,
            max_hung=limits.hung_tools,
        )

    @property
    def toolkit(self) -> Toolkit | None:
        """The toolkit of ``TANDEM_TOOLKIT``, or ``None`` (the demo tools are used then).

        Loaded once per process, at worker start (``load_toolkit``): MCP groups are listed then.
        A failed load is kept and raised again, never retried on every step; restart the worker
        once the toolkit is fixed.
        """
        return self.load_toolkit()

    def load_toolkit(self) -> Toolkit | None:
        """Load (once) and return the toolkit; ``ToolkitError`` (the same one each time) if it fails."""
        with self._lock:
            if self._toolkit_error is not None:
                raise self._toolkit_error
            if self._toolkit_loaded:
                return self._toolkit
            if self.settings.toolkit:
                from tandem.toolkit.loader import load_toolkit

                try:
                    self._toolkit = load_toolkit(self.settings.toolkit)
                except Exception as exc:
                    from tandem.toolkit.errors import ToolkitError

                    failure = exc if isinstance(exc, ToolkitError) else None
                    self._toolkit_error = failure or ToolkitError(f"loading the toolkit failed: {exc}")
                    raise self._toolkit_error from None
                self._cap_descriptions(self._toolkit)
            self._toolkit_loaded = True
            return self._toolkit

    def _cap_descriptions(self, toolkit: Toolkit) -> None:
        """Cut tool descriptions (an MCP server writes its own) to ``TANDEM_MAX_TOOL_DESCRIPTION_CHARS``."""
        import dataclasses

        limit = self.settings.limits.description_chars
        for tool in toolkit.tools():
            if len(tool.description) > limit:
                cut = tool.description[: limit - 1].rstrip() + "…"
                toolkit.add_vertex(tool.id, data=dataclasses.replace(tool, description=cut))

    @cached_property
    def policy(self) -> ToolPolicy:
        """The worker's tool policy: ``TANDEM_TOOL_POLICY``, else the toolkit's ``policy:``, else every
        tool."""
        from tandem.toolkit.policy import ToolPolicy

        if self.settings.tool_policy:
            return ToolPolicy.from_text(self.settings.tool_policy)
        toolkit = self.toolkit
        if toolkit is not None and toolkit.policy is not None:
            return toolkit.policy
        return ToolPolicy()

    @cached_property
    def secret_box(self) -> SecretBox:
        """Seals and unseals ``JobSpec.secrets`` with ``TANDEM_SECRETS_KEY``."""
        return SecretBox(self.settings.secrets_key)

    def known_tools(self) -> list[str]:
        """The names of every tool this worker has (the toolkit's, or the demo tools)."""
        toolkit = self.toolkit
        tools = toolkit.tools() if toolkit is not None else self.default_tools
        return [t.name for t in tools]

    def check_spec(self, spec: JobSpec) -> JobSpec:
        """Refuse what this worker cannot run (``JobSpecError`` naming it and the valid ones), and
        return the spec as it may be stored: secrets sealed.

        Unknown actions, actions without a toolkit, tools the policy does not permit, and webhooks
        this worker may not deliver (``tandem.tasks.webhooks.targets``) are refused.
        """
        from tandem.toolkit.policy import ToolPolicyError

        toolkit = self.toolkit
        if spec.actions:
            if toolkit is None:
                raise JobSpecError(
                    f"field 'actions': {spec.actions!r} names actions, but this worker has no toolkit "
                    "(TANDEM_TOOLKIT): drop 'actions' or configure a toolkit"
                )
            known = [a.id for a in toolkit.actions()]
            unknown = [a for a in spec.actions if a not in known]
            if unknown:
                raise JobSpecError(
                    f"field 'actions': unknown actions {unknown}; the toolkit's actions: "
                    f"{', '.join(known) or '(none)'}"
                )
        try:
            self.policy.for_job(self.known_tools(), spec.tools, spec.owner)
        except ToolPolicyError as exc:
            raise JobSpecError(str(exc)) from None
        check_webhooks(spec.webhooks, self.settings.webhooks, signing=True)
        self.check_context(spec)
        return self.secret_box.seal_spec(spec)

    @cached_property
    def default_tools(self) -> tuple[Tool, ...]:
        """The demo tools when no toolkit is configured (built once: each is a pydantic model)."""
        if self.toolkit is not None:
            return ()
        from tandem.reasoner.demo import demo_tools

        return tuple(demo_tools())

    @cached_property
    def slot_keeper(self) -> SlotKeeper:
        """Renews the capacity slots of this process's model calls (a third of the lease)."""
        return SlotKeeper(self.settings.lease_seconds / 3)

    def capacity(self, role: str) -> HostCapacity | None:
        """The fleet-wide limiter of ``role``'s model host, or ``None`` when it has no limits."""
        host, max_in_flight, rpm, tpm = self.settings.host_limits(role)
        if max_in_flight is None and rpm is None and tpm is None:
            return None
        limits = HostLimits(host, max_in_flight, rpm, tpm, self.settings.rate_burst_seconds)
        return HostCapacity(self.redis, self.settings.prefix, limits, self.settings.lease_seconds)

    def model(self, role: str, mode: str = "dual") -> ModelService:
        """The model for ``role`` (``thinker`` or ``actor``); ``mode`` picks the demo model's script."""
        key = f"{role}:{mode}"
        with self._lock:
            if key not in self._models:
                self._models[key] = self._build_model(role, mode)
            return self._models[key]

    def summarizer(self, role: str, mode: str = "dual") -> ModelService:
        """The model that summarizes ``role``'s older rounds: ``TANDEM_<ROLE>_SUMMARY_MODEL`` on the
        role's host settings, else the role's own model (``model``)."""
        name = self.settings.compaction.summary_model(role)
        if name is None:
            return self.model(role, mode)
        key = f"{role}:summary"
        with self._lock:
            if key not in self._models:
                self._models[key] = self._build_model(role, mode, name)
            return self._models[key]

    def _build_model(self, role: str, mode: str, name: str | None = None) -> ModelService:
        from tandem.tasks.hosts.host_model import HostModel

        capacity = self.capacity(role)
        MODEL_LOOP.direct_http = self.settings.direct_http
        return HostModel(
            self._build_inner_model(role, mode, limited=capacity is not None, name=name),
            role=role,
            host=self.settings.role(role).host_id,
            capacity=capacity,
            keeper=self.slot_keeper if capacity is not None else None,
            wake=_send_dispatch,
            model_loop=MODEL_LOOP if self.settings.model_loop else None,
        )

    def _build_inner_model(
        self, role: str, mode: str, *, limited: bool, name: str | None = None
    ) -> ModelService:
        conf = self.settings.role(role)
        if name is not None:  # a summary model of its own, on the role's host settings
            conf = replace(conf, model=name)
        if conf.is_demo:
            from tandem.reasoner.demo import demo_model

            log.warning(
                "no model configured for the %s role (TANDEM_%s_MODEL): using the offline demo model",
                role,
                role.upper(),
            )
            demo = demo_model(role if mode == "dual" else "mono")
            demo.context_tokens = conf.context_tokens
            demo.reply_reserve = conf.max_tokens or None
            demo.role = role
            return demo
        from tandem.reasoner.models.litellm_service import LiteLlmModelService
        from tandem.reasoner.models.litellm_setup import price_unpriced_model
        from tandem.tasks.hosts.host_model import BACKOFF_STATUSES

        assert conf.model is not None
        price_unpriced_model(conf.model)
        return LiteLlmModelService(
            conf.model,
            api_base=conf.api_base,
            api_key=conf.api_key,
            reasoning_parser=conf.reasoning_parser,
            temperature=conf.temperature,
            max_tokens=conf.reply_tokens,
            timeout=conf.timeout,
            thinking=conf.thinking,
            role=role,
            # Under fleet-wide limits a 429/503 backs the fleet off and re-queues the step,
            # instead of sleeping in this thread while the rest of the fleet keeps calling.
            no_retry_statuses=BACKOFF_STATUSES if limited else (),
            # Longer waits park the step (no thread held) instead of sleeping in this thread.
            retry_hold=self.settings.retry_hold_seconds,
            stream=conf.stream,
            tool_choice=conf.tool_choice,
            context_tokens=conf.context_tokens,
            reply_reserve=conf.max_tokens or None,  # set: kept whole; unset: the default, capped
        )

    def context_budgets(self, spec: JobSpec) -> dict[str, ContextBudget]:
        """The context budgets of the roles a job's models play (the Thinker's and the Actor's
        for a dual job, the Actor's otherwise), for those that have one (``tandem.reasoner.context``).
        ``ConfigurationError`` when a role's reply reserve leaves no room in its window."""
        plan = self.plan(spec)
        roles = ("thinker", "actor") if spec.reasoner == "dual" else ("actor",)
        found = {}
        for role in roles:
            model_role, mode = plan.model(role)  # type: ignore[arg-type]
            budget = budget_of(self.model(model_role, mode))
            if budget is not None:
                found[role] = budget
        return found

    def check_context(self, spec: JobSpec) -> None:
        """Refuse a job whose goal and context alone do not fit the context budget of one of its
        roles (``JobSpecError`` naming both numbers): every request of the job carries them."""
        try:
            budgets = self.context_budgets(spec)
        except ConfigurationError as exc:
            raise JobSpecError(str(exc)) from None
        if not budgets:  # no role has a window: nothing to count
            return
        text = task_text(spec.goal, spec.context)
        for budget in budgets.values():
            tokens = budget.tokenizer.count(text) + MESSAGE_SLACK
            if tokens > budget.limit:
                raise JobSpecError(
                    f"field 'goal': the goal and context take {tokens:,} tokens, over {budget.describe()}; "
                    "every request of the job carries them, so none could be sent: shorten the goal or "
                    f"the context, or give the model a longer context ({budget.setting})"
                )

    def thread_tokens(self, spec: JobSpec, goal: str) -> tuple[int, Callable[[str], int]] | None:
        """How many tokens a follow-up of ``spec`` with ``goal`` may give its thread (``THREAD_SHARE``
        of the smallest of its roles' budgets, less the goal and the first job's context) and how
        they are counted; ``None`` when no role has a budget."""
        try:
            budgets = self.context_budgets(spec)
        except ConfigurationError:
            return None
        if not budgets:
            return None
        budget = min(budgets.values(), key=lambda b: b.limit)
        count = budget.tokenizer.count
        background = spec.context.split("<thread id=", 1)[0]
        room = budget.limit // THREAD_SHARE - count(task_text(goal, background)) - MESSAGE_SLACK
        return max(room, 0), count

    def task_for(self, job_id: str, spec: JobSpec) -> Task:
        """The reasoner ``Task`` of a job (tools from the toolkit, or the demo tools without one),
        narrowed to what the tool policy permits it, with its secrets unsealed for the tools and
        its approval settings (calls needing approval park the job: ``tandem.tasks.control.parking``).
        """
        from tandem.toolkit.policy import ToolPolicyError

        try:
            allowed = self.policy.for_job(self.known_tools(), spec.tools, spec.owner)
        except ToolPolicyError as exc:
            raise JobSpecError(str(exc)) from None
        return Task(
            goal=spec.goal,
            context=spec.context,
            tools=list(self.default_tools),
            max_rounds=spec.max_rounds,
            toolkit=self.toolkit,
            actions=list(spec.actions),
            threshold=spec.threshold,
            hops=spec.hops,
            allowed_tools=allowed,
            job_id=job_id,
            metadata=dict(spec.metadata),
            secrets=self.secret_box.unseal(spec),
            max_memory_bytes=self.settings.limits.memory_bytes,
            approve_tools=spec.approve_tools,
            approval_timeout_s=spec.approval_timeout_s,
            ask_person=spec.ask_person,
            answer_timeout_s=spec.answer_timeout_s or self.settings.memory_ttl,
            spawn_jobs=self.settings.children.may_spawn(spec.owner),
        )


def _send_dispatch(dispatch: dict[str, Any]) -> None:
    """Send a step again as its dispatch describes it (a waiter woken by a freed slot)."""
    from tandem.tasks.app import app

    app.send_task(dispatch["name"], args=dispatch["args"], ignore_result=True, **dispatch.get("options", {}))


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> Runtime:
    """The process's runtime, built on first use from the app's settings."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            from tandem.tasks.app import settings

            _runtime = Runtime(settings)
            _trace()
        return _runtime


def _trace() -> None:
    """Start tracing in this process if the ``OTEL_*`` variables ask for it (docs/tracing.md)."""
    from tandem.broker_config.trace_settings import TraceSettings
    from tandem.reasoner import tracing

    tracing.configure(TraceSettings.from_env())
