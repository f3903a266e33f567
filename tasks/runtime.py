"""What a worker process builds once: Redis client, job store, model per role, toolkit, runner."""

from __future__ import annotations

import logging
import threading
from functools import cached_property

from redis import Redis

from tandem.broker_config import Settings
from tandem.reasoner.model_service import ModelService
from tandem.reasoner.task import Task
from tandem.reasoner.tool_runner import ToolRunner
from tandem.tasks.leases import LeaseKeys
from tandem.tasks.spec import JobSpec
from tandem.tasks.store import JobStore
from tandem.toolkit.graph import Toolkit
from tandem.toolkit.tool import Tool

log = logging.getLogger("tandem.runtime")


class Runtime:
    """Per-process resources built lazily from ``Settings`` and shared by the tasks."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._models: dict[str, ModelService] = {}

    @cached_property
    def redis(self) -> Redis:
        """A client of ``TANDEM_REDIS_URL`` (thread-safe connection pool)."""
        return Redis.from_url(self.settings.redis_url, health_check_interval=30)

    @cached_property
    def store(self) -> JobStore:
        """The job store."""
        return JobStore(self.redis, self.settings.prefix)

    @cached_property
    def lease_keys(self) -> LeaseKeys:
        """The keys of the step leases."""
        return LeaseKeys(self.settings.prefix)

    @cached_property
    def runner(self) -> ToolRunner:
        """The tool runner, with the configured timeout and output limit."""
        return ToolRunner(timeout=self.settings.tool_timeout, max_output_chars=self.settings.max_output_chars)

    @cached_property
    def toolkit(self) -> Toolkit | None:
        """The toolkit of ``TANDEM_TOOLKIT``, or ``None`` (the demo tools are used then)."""
        if not self.settings.toolkit:
            return None
        from tandem.toolkit.loader import load_toolkit

        return load_toolkit(self.settings.toolkit)

    @cached_property
    def default_tools(self) -> tuple[Tool, ...]:
        """The demo tools when no toolkit is configured (built once: each is a pydantic model)."""
        if self.toolkit is not None:
            return ()
        from tandem.reasoner.demo import demo_tools

        return tuple(demo_tools())

    def model(self, role: str, mode: str = "dual") -> ModelService:
        """The model for ``role`` (``thinker`` or ``actor``); ``mode`` picks the demo model's script."""
        key = f"{role}:{mode}"
        with self._lock:
            if key not in self._models:
                self._models[key] = self._build_model(role, mode)
            return self._models[key]

    def _build_model(self, role: str, mode: str) -> ModelService:
        conf = self.settings.role(role)
        if conf.is_demo:
            from tandem.reasoner.demo import demo_model

            log.warning(
                "no model configured for the %s role (TANDEM_%s_MODEL): using the offline demo model",
                role,
                role.upper(),
            )
            return demo_model(role if mode == "dual" else "mono")
        from tandem.reasoner.litellm_service import LiteLlmModelService

        assert conf.model is not None
        return LiteLlmModelService(
            conf.model,
            api_base=conf.api_base,
            api_key=conf.api_key,
            reasoning_parser=conf.reasoning_parser,
            temperature=conf.temperature,
            max_tokens=conf.max_tokens,
            timeout=conf.timeout,
            thinking=conf.thinking,
            role=role,
        )

    def task_for(self, job_id: str, spec: JobSpec) -> Task:
        """The reasoner ``Task`` of a job (tools from the toolkit, or the demo tools without one)."""
        return Task(
            goal=spec.goal,
            context=spec.context,
            tools=list(self.default_tools),
            max_rounds=spec.max_rounds,
            toolkit=self.toolkit,
            actions=list(spec.actions),
            threshold=spec.threshold,
            hops=spec.hops,
            allowed_tools=spec.tools,
            job_id=job_id,
            metadata=dict(spec.metadata),
        )


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> Runtime:
    """The process's runtime, built on first use from the app's settings."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            from tandem.tasks.app import settings

            _runtime = Runtime(settings)
        return _runtime
