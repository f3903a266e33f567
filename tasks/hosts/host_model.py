"""``HostModel``: the model a worker calls, metered and held to its host's fleet-wide capacity.

It wraps the role's ``ModelService``. Every call is timed and its tokens and cost counted
(``tandem.tasks.metrics``). When the role's host has limits (``TANDEM_<ROLE>_MAX_IN_FLIGHT``,
``_RPM``, ``_TPM``), each call first takes a slot and budget from ``HostCapacity``:

* no capacity now: ``CapacityWait`` is raised *before* any request is sent; the Celery step
  catches it and re-queues itself (``tandem.tasks.hosts.waiting``) so no thread sits waiting;
* a 429 or 503 from the host: the whole fleet backs off for the host's ``Retry-After``
  (``DEFAULT_BACKOFF`` seconds when it gives none), and ``CapacityWait`` is raised too;
* otherwise the slot is released with the reply's real token usage (the estimate is corrected),
  and the steps waiting for that slot are woken through ``wake``.

Without limits, the role's model retries transient failures within the call, but waits there
only ``TANDEM_RETRY_HOLD_SECONDS`` in all (``LiteLlmModelService``'s ``retry_hold``): a longer
``Retry-After`` or back-off reaches the step as a ``TransientModelError``, and the step parks.

``CapacityWait`` is a ``TransientModelError`` with ``retry_after`` set: a driver that reschedules
transient failures by their ``retry_after`` handles it without knowing about capacity.

Given a ``model_loop`` (``tandem.tasks.hosts.model_loop``), a LiteLLM model's call runs as its
``agenerate`` on that per-process event loop while the step's thread waits (it costs less CPU
than a synchronous call among hundreds of threads); the reply, the deltas (in the step's
thread) and the errors are the same. Other models (the demo's, scripted ones), and any model
under gevent, are called synchronously.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from tandem.reasoner import tracing
from tandem.reasoner.context.budget import ContextBudget, budget_of
from tandem.reasoner.errors import TransientModelError
from tandem.reasoner.messages import FunctionCallResult, ModelMessage
from tandem.reasoner.models import attempt_notes
from tandem.reasoner.models.model_service import AsyncModelService, ChatMessage, DeltaListener, ModelService
from tandem.tasks import metrics
from tandem.tasks.hosts.capacity import Grant, HostCapacity, SlotKeeper, Wait
from tandem.tasks.hosts.model_loop import ModelLoop, threads_are_green
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

log = logging.getLogger("tandem.capacity")

DEFAULT_BACKOFF = 2.0
"""Seconds the fleet backs off after a 429/503 that carries no ``Retry-After``."""
BACKOFF_STATUSES = frozenset({429, 503})
"""Answers that open the fleet's back-off window for the host."""
COMPLETION_ESTIMATE = 512
"""Tokens a reply is assumed to take before it is known, when the role sets no ``MAX_TOKENS``."""


def estimate_tokens(
    sys_prompt: str,
    messages: Sequence[ChatMessage],
    tools: Sequence[Tool] | None = None,
    max_tokens: int | None = None,
) -> int:
    """A cheap upper-side guess of a call's tokens: about 4 characters a token for the request,
    plus ``max_tokens`` (or ``COMPLETION_ESTIMATE``) for the reply."""
    chars = len(sys_prompt) + sum(len(str(m.get("content") or "")) + 8 for m in messages)
    if tools:
        chars += sum(len(json.dumps(t.openai_schema())) for t in tools)
    return chars // 4 + (max_tokens or COMPLETION_ESTIMATE)


class CapacityWait(TransientModelError):
    """The host has no capacity for this call now: try again after ``retry_after`` seconds.

    ``wait`` says what for and until when; ``capacity`` is the host's limiter (a step waiting
    for a slot registers with it to be woken early).
    """

    def __init__(self, wait: Wait, capacity: HostCapacity, *, model: str = "", api_base: str | None = None):
        super().__init__(
            f"{wait.describe()}; retry in {wait.seconds:.1f}s",
            retry_after=wait.seconds,
            model=model,
            api_base=api_base,
        )
        self.wait = wait
        self.capacity = capacity


def _on_loop(inner: ModelService) -> AsyncModelService | None:
    """``inner`` when its calls can run on a ``ModelLoop``: a LiteLLM model, not under gevent."""
    if threads_are_green():
        return None
    from tandem.reasoner.models.litellm_service import LiteLlmModelService

    return inner if isinstance(inner, LiteLlmModelService) else None


class HostModel:
    """A ``ModelService`` that meters ``inner`` and, with ``capacity``, keeps to its host's limits;
    with ``model_loop``, a LiteLLM ``inner`` is called on that event loop (see the module docstring).
    """

    def __init__(
        self,
        inner: ModelService,
        *,
        role: str,
        host: str,
        capacity: HostCapacity | None = None,
        keeper: SlotKeeper | None = None,
        wake: Callable[[dict[str, Any]], None] | None = None,
        model_loop: ModelLoop | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.role = role
        self.host = host
        self.capacity = capacity
        self.keeper = keeper
        self.wake = wake
        self._max_tokens: int | None = getattr(inner, "max_tokens", None)
        self._async_inner = None if model_loop is None else _on_loop(inner)
        self.model_loop = model_loop if self._async_inner is not None else None
        """The loop this model's calls run on; ``None``: called in the step's thread."""

    def __repr__(self) -> str:
        return f"HostModel({self.inner!r}, role={self.role!r}, host={self.host!r})"

    def context_budget(self) -> ContextBudget | None:
        """The inner model's context budget (``tandem.reasoner.context``)."""
        return budget_of(self.inner)

    def generate(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None = None,
        tool_call_ctx: ToolCallContext | None = None,
        on_delta: DeltaListener | None = None,
    ) -> ModelMessage:
        """Call the model within the host's capacity (see the module docstring), in a span
        following the GenAI semantic conventions when tracing is on (``tandem.reasoner.tracing``)."""
        with tracing.model_span(self.name, self._api_base, self.role) as span:
            tracing.model_request(span, sys_prompt, messages)
            reply = self._generate(sys_prompt, messages, tools, tool_call_ctx, on_delta)
            tracing.model_reply(span, reply)
            return reply

    def _generate(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None,
        tool_call_ctx: ToolCallContext | None,
        on_delta: DeltaListener | None,
    ) -> ModelMessage:
        grant = None
        if self.capacity is not None:
            outcome = self.capacity.acquire(estimate_tokens(sys_prompt, messages, tools, self._max_tokens))
            if isinstance(outcome, Wait):
                metrics.CAPACITY_WAITS.labels(self.role, self.host, outcome.reason).inc()
                tracing.event("tandem.capacity_wait", {"tandem.wait.reason": outcome.reason})
                raise CapacityWait(outcome, self.capacity, model=self.name, api_base=self._api_base)
            grant = outcome
            if self.keeper is not None:
                self.keeper.hold(self.capacity, grant)
        in_flight = metrics.MODEL_IN_FLIGHT.labels(self.role, self.host)
        in_flight.inc()
        started = time.perf_counter()
        try:
            reply = self._call(sys_prompt, messages, tools, tool_call_ctx, on_delta)
        except TransientModelError as exc:
            elapsed = time.perf_counter() - started
            if exc.status_code in BACKOFF_STATUSES:
                tracing.event(
                    "gen_ai.rate_limited",
                    {
                        "http.response.status_code": exc.status_code,
                        "tandem.retry_after": exc.retry_after or 0.0,
                    },
                )
                metrics.MODEL_CALL_SECONDS.labels(self.role, self.host, "rate_limited").observe(elapsed)
                metrics.RATE_LIMITED.labels(self.role, self.host, str(exc.status_code)).inc()
                if grant is not None:
                    assert self.capacity is not None
                    seconds = exc.retry_after if exc.retry_after is not None else DEFAULT_BACKOFF
                    metrics.BACKOFF_SECONDS.labels(self.role, self.host).inc(seconds)
                    tracing.event("tandem.fleet_backoff", {"tandem.backoff_seconds": float(seconds)})
                    self._release(grant, used=0, success=False, back_off=seconds)
                    log.warning(
                        "model host %s answered %s: the fleet backs off for %.1fs",
                        self.host,
                        exc.status_code,
                        seconds,
                    )
                    now = time.time()
                    wait = Wait(self.host, "backoff", until=now + seconds, now=now)
                    metrics.CAPACITY_WAITS.labels(self.role, self.host, "backoff").inc()
                    raise CapacityWait(wait, self.capacity, model=self.name, api_base=self._api_base) from exc
            else:
                metrics.MODEL_CALL_SECONDS.labels(self.role, self.host, "error").observe(elapsed)
            if grant is not None:
                self._release(grant, used=None, success=False)
            raise
        except BaseException:
            metrics.MODEL_CALL_SECONDS.labels(self.role, self.host, "error").observe(
                time.perf_counter() - started
            )
            if grant is not None:
                self._release(grant, used=None, success=False)
            raise
        finally:
            in_flight.dec()
        usage = reply.usage
        metrics.MODEL_CALL_SECONDS.labels(self.role, self.host, "ok").observe(time.perf_counter() - started)
        if usage.prompt_tokens:
            metrics.MODEL_TOKENS.labels(self.role, self.host, "prompt").inc(usage.prompt_tokens)
        if usage.completion_tokens:
            metrics.MODEL_TOKENS.labels(self.role, self.host, "completion").inc(usage.completion_tokens)
        if usage.cost_usd:
            metrics.MODEL_COST.labels(self.role, self.host).inc(usage.cost_usd)
        if grant is not None:
            self._release(grant, used=usage.total_tokens or None, success=True)
        return reply

    def _call(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None,
        tool_call_ctx: ToolCallContext | None,
        on_delta: DeltaListener | None,
    ) -> ModelMessage:
        if self.model_loop is None or self._async_inner is None:
            return self.inner.generate(sys_prompt, messages, tools, tool_call_ctx, on_delta)
        agenerate = self._async_inner.agenerate
        context = tracing.captured()  # the model span, current on the loop's thread too
        noted = attempt_notes.current()  # and who hears of its failed attempts
        return self.model_loop.run(
            lambda listener: tracing.in_context(
                context,
                attempt_notes.within(noted, agenerate(sys_prompt, messages, tools, tool_call_ctx, listener)),
            ),
            on_delta,
        )

    @property
    def _api_base(self) -> str | None:
        return getattr(self.inner, "api_base", None)

    def _release(
        self, grant: Grant, *, used: int | None, success: bool, back_off: float | None = None
    ) -> None:
        assert self.capacity is not None
        if self.keeper is not None:
            self.keeper.drop(grant)
        try:
            woken = self.capacity.release(grant, used_tokens=used, success=success, back_off=back_off)
        except Exception:  # the slot's lease runs out by itself; the step's result matters more
            log.exception("could not release a slot of model host %s", self.host)
            return
        for dispatch in woken:
            if self.wake is None:
                continue
            try:
                self.wake(dispatch)
            except Exception:  # the waiter's own re-queued copy comes back later
                log.exception("could not wake a step waiting for model host %s", self.host)

    def call_function(
        self,
        tools: Sequence[Tool],
        model_response_text: str,
        tool_call_ctx: ToolCallContext | None = None,
    ) -> list[FunctionCallResult] | None:
        """Run the ``<function_call>`` blocks of a reply (``inner`` does)."""
        return self.inner.call_function(tools, model_response_text, tool_call_ctx)
