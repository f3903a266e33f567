"""``LiteLlmModelService``: a ``ModelService`` over ``litellm.completion`` for any model host.

``agenerate`` is the same call over ``litellm.acompletion`` for asyncio code (the reasoners'
``arun``); every contract below holds for both.

One instance talks to one model: an OpenAI-compatible server (vLLM, SGLang, llama.cpp, a gateway)
through ``api_base``, or any provider LiteLLM knows by its model prefix.

Contracts:

* **One deadline a call.** ``timeout`` bounds the whole call, all its attempts and the waits
  between them (``tandem.reasoner.models.attempts``): each attempt gets what is left, and a
  retry that would find none left is not made (the last failure is raised as it is).
* **Retries are ours.** LiteLLM's and the OpenAI SDK's own retries are switched off
  (``num_retries=0``, ``max_retries=0``). Transient failures (HTTP 408, 409, 429, 5xx, time-outs,
  refused or dropped connections) are retried up to ``max_retries`` times with exponential
  backoff and full jitter (``uniform(0, min(backoff_max, backoff_base * 2**attempt))``). A
  ``Retry-After`` header (seconds or an HTTP date; ``retry-after-ms`` too) replaces the jittered
  wait; one longer than ``backoff_max`` is not slept here: the ``TransientModelError`` is raised
  at once with ``retry_after`` set, so a task queue can reschedule instead of holding a worker.
  With ``retry_hold`` (a worker's ``TANDEM_RETRY_HOLD_SECONDS``) neither is a wait that would
  take the call's waits past ``retry_hold`` seconds in all: the call holds its thread (or, in
  ``agenerate``, its caller) only for short pauses, and the error goes to the caller instead.
  A success answer that holds no chat completion (an HTML page, JSON cut short, an empty body)
  is retried the same way, ``max_retries`` times at most, its waits shortened to fit
  ``retry_hold`` (never handed on), then raises ``ModelCallError`` saying what came
  (``tandem.reasoner.models.litellm_errors.MalformedReplyError``); a stream that brings no chunk
  at all is asked again at once without streaming, since some hosts (llama-cpp-python) fail a
  streamed request after its headers and say why only in a plain answer. Other failures (other
  4xx, a context window exceeded, a 5xx whose words say a retry will not change it:
  ``tandem.reasoner.models.refusals``) raise ``ModelCallError`` at once. Messages name the
  model, the host, the HTTP status, the provider's words and what to do; never the API key.
* **Reasoning.** A reasoning field returned by the host (``reasoning_content``, or vLLM's newer
  ``reasoning``) is the reasoning and the content is kept as sent. Otherwise the configured
  parser (default ``"think"``) splits the content. ``thinking`` is passed to the host as
  ``chat_template_kwargs`` (``enable_thinking`` and ``thinking``) and to the parser. LiteLLM
  splits a leading ``<think>`` block off a non-streamed reply by itself; the host's raw body is
  read instead, so the parser alone decides (``"none"`` keeps the tags). In a stream, reasoning
  deltas from the host switch the content to pass-through only if they come before any content.
* **Streaming** (``stream=True``) gives the same ``ModelMessage`` as a plain call; ``on_delta``
  receives ``(reasoning, content)`` pieces whose concatenation is the final ``reasoning`` and
  ``content``. With ``stream=False`` it is called once with the whole reply. A stream that
  breaks after text reached ``on_delta`` is not retried (the listener would see text twice):
  ``TransientModelError`` is raised instead.
* **The request** is built to the shape the most hosts accept (``tandem.reasoner.models.wire``):
  an assistant turn's ``content`` is ``""``, never ``null``; ``tool_choice`` goes with tools.
* **Native tool calls**: with ``tools``, the OpenAI ``tools=`` schemas are sent and the reply's
  ``tool_calls`` (aggregated by index when streamed) become ``NativeToolCall``; so do tool calls
  a Harmony parser (gpt-oss) finds in the text, with generated ids.
* **``tool_calls_in_reasoning=True``** copies every ``<function_call>`` block found in the
  reasoning to the end of the content (the reasoning keeps them), because prompt-mode call
  parsing ignores thinking sections and some models write their calls while thinking.
* **Usage** of each call is in ``ModelMessage.usage`` (``calls=1``). A reply the host sent
  without usage is counted by tandem (``tandem.reasoner.models.token_count``: the model's or the
  host's tokenizer, else an estimate) and marked so (``counted_calls=1``); LiteLLM's own estimate
  for a stream without usage is not used.
  ``usage.cost_usd`` is the price from LiteLLM's local cost map (0 for a model it does not price).

LiteLLM is imported on first use, not with this module (``litellm_setup.import_litellm``): workers
and the CLI import it cheaply.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tandem.reasoner import tracing
from tandem.reasoner.context.budget import LazyBudget, reply_cap
from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.messages import ModelMessage, NativeToolCall, Usage
from tandem.reasoner.models import direct_http
from tandem.reasoner.models.attempt_notes import attempt_failed
from tandem.reasoner.models.attempts import Attempts
from tandem.reasoner.models.cost_map import listed
from tandem.reasoner.models.litellm_errors import (
    MalformedReplyError,
    failure_kind,
    is_call_failure,
    parse_retry_after,
    shown_host,
    translate,
)
from tandem.reasoner.models.litellm_replies import (
    calls_from_reasoning,
    message_text,
    new_call_id,
    parsed_tool_call,
    raw_message,
    resolve_parser,
    usage_of,
)
from tandem.reasoner.models.litellm_setup import import_litellm, wait_for_warm_up
from tandem.reasoner.models.litellm_stream import PartialStreamError, StreamReader, body_keeper
from tandem.reasoner.models.model_service import BaseModelService
from tandem.reasoner.models.retry_policy import RetryPolicy
from tandem.reasoner.models.service_args import check_arguments
from tandem.reasoner.models.token_count import TokenCounter, needs_count
from tandem.reasoner.models.wire import (
    DEFAULT_TOOL_CHOICE,
    chat_messages,
    merged_extra_body,
    tool_fields,
)

if TYPE_CHECKING:  # kept out of the import path: ``toolkit`` pulls in MCP and takes ~1 s to import
    from tandem.reasoner.models.model_service import ChatMessage, DeltaListener
    from tandem.reasoner.parsing.base import ReasoningParser
    from tandem.reasoner.tool_runner import ToolRunner
    from tandem.toolkit.context import ToolCallContext
    from tandem.toolkit.tool import Tool

__all__ = ["LiteLlmModelService", "parse_retry_after"]

logger = logging.getLogger(__name__)

# -- the service --------------------------------------------------------------------------


class LiteLlmModelService(BaseModelService):
    """A language model reached through LiteLLM (see the module docstring for the contracts).

    ``model`` is a LiteLLM model string (``"hosted_vllm/Qwen3-32B"``, ``"openai/any"`` with
    ``api_base``); it is also ``name``. ``reasoning_parser`` is a parser name (see
    ``tandem.reasoner.parsing``) or a parser object; ``None`` uses ``"think"``. ``temperature`` and
    ``max_tokens`` are sent only when set. ``timeout`` is seconds for one call, all its attempts
    and the waits between them included. ``tool_choice`` goes with tools (``wire``). ``extra_body`` is
    merged into the request body (its ``chat_template_kwargs`` win over those ``thinking``
    sets). ``tool_runner`` runs prompt-mode calls (``call_function``); a default one is made on
    first use. ``no_retry_statuses`` (e.g. ``{429, 503}``) are raised at once as
    ``TransientModelError`` instead of retried here: a fleet-wide limiter handles them (it backs
    the whole fleet off, and the step waits without holding a thread). ``retry_hold`` bounds
    the seconds one call waits between its attempts, in all (``None``: only ``backoff_max``
    bounds each wait); a longer wait is left to the caller (see the module docstring). ``role``
    (``"thinker"``/``"actor"``) only makes error advice name the right
    ``TANDEM_<ROLE>_*`` setting. ``sleep``, ``asleep`` (the back-off wait of ``agenerate``),
    ``rng`` and ``clock`` (the monotonic clock of the call's deadline) are injectable for tests.
    ``context_tokens``, ``reply_reserve``: the model's ``context_budget`` (``LazyBudget``).
    """

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        reasoning_parser: str | ReasoningParser | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        stream: bool = False,
        thinking: bool | None = None,
        tool_calls_in_reasoning: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        tool_runner: ToolRunner | None = None,
        *,
        no_retry_statuses: Collection[int] = (),
        retry_hold: float | None = None,
        role: str | None = None,
        tool_choice: str = DEFAULT_TOOL_CHOICE,
        context_tokens: int | None = None,
        reply_reserve: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_arguments(model, timeout, tool_choice, api_base, api_key)  # ConfigurationError
        super().__init__(tool_runner)
        self.retry = RetryPolicy(
            max_retries, backoff_base, backoff_max, sleep, rng or random.Random(), max_hold=retry_hold
        )
        self.asleep = asleep
        self.clock = clock
        self.tool_choice = tool_choice
        self.no_retry_statuses = frozenset(no_retry_statuses)
        self.model = model
        self.name = model
        self.api_base = api_base or None
        self._api_key = api_key or None
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = float(timeout)
        self.stream = stream
        self.thinking = thinking
        self.tool_calls_in_reasoning = tool_calls_in_reasoning
        self.role = role
        self.parser = resolve_parser(reasoning_parser)
        self.extra_body = merged_extra_body(extra_body, thinking)
        self._unpriced = False
        """True once the cost map gave this model no price: its calls cost 0 without a lookup."""
        self._direct_name = direct_http.direct_model(model, self.api_base, self._api_key)
        """The model's name at its host when non-streamed calls on a loop that allows it may skip
        LiteLLM (``tandem.reasoner.models.direct_http``); ``None``: always through LiteLLM."""
        self._counter = TokenCounter(model, self.api_base, self._api_key)
        """Counts the tokens of replies the host sent without usage."""
        self.context_budget = LazyBudget(self._counter, context_tokens, reply_reserve, max_tokens, role)

    def __repr__(self) -> str:
        return f"LiteLlmModelService(model={self.model!r}, api_base={self.host!r}, stream={self.stream!r})"

    @property
    def host(self) -> str:
        """The host named in errors: ``api_base`` (its password masked), or ``"provider default"``."""
        return shown_host(self.api_base)

    # -- ModelService ------------------------------------------------------------------

    def generate(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None = None,
        tool_call_ctx: ToolCallContext | None = None,
        on_delta: DeltaListener | None = None,
    ) -> ModelMessage:
        """Call the model once (retrying transient failures) and return its reply.

        The request is the system prompt (when not empty) followed by ``messages`` as they are,
        but for an assistant turn without content, sent with ``""`` (``wire.chat_messages``).
        Raises ``TransientModelError`` when retries or the call's time are spent,
        ``ModelCallError`` otherwise.
        """
        request = self._request(sys_prompt, messages, tools)
        import_litellm()  # (once a process) not counted against the call's time
        attempts = Attempts(self.timeout, self.clock)
        while True:
            try:
                if self.stream and not attempts.plain:
                    reply = self._streamed(self._attempt(request, attempts), on_delta, attempts)
                else:
                    reply = self._complete(self._attempt(request, attempts), on_delta)
                return self._counted(request, reply)
            except Exception as exc:
                wait = self._retry_wait(exc, attempts)
            self.retry.sleep(wait)
            attempts.next(wait)

    async def agenerate(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None = None,
        tool_call_ctx: ToolCallContext | None = None,
        on_delta: DeltaListener | None = None,
    ) -> ModelMessage:
        """``generate`` for asyncio, over ``litellm.acompletion`` (streamed too): the same request,
        reply, retries and errors; waiting for a reply or a back-off never blocks the loop."""
        request = self._request(sys_prompt, messages, tools)
        if self._direct_name is None or direct_http.session() is None:
            import_litellm()  # (once a process) blocks the loop: not counted against the call's time
        attempts = Attempts(self.timeout, self.clock)
        while True:
            try:
                async with asyncio.timeout(attempts.left()):  # the attempt, stream and all
                    if self.stream and not attempts.plain:
                        reply = await self._astreamed(self._attempt(request, attempts), on_delta)
                    else:
                        reply = await self._acomplete(self._attempt(request, attempts), on_delta)
                if not needs_count(reply.usage):
                    return reply
                return await asyncio.to_thread(self._counted, request, reply)  # tokenize requests
            except Exception as exc:
                wait = self._retry_wait(exc, attempts)
            await self.asleep(wait)
            attempts.next(wait)

    def _attempt(self, request: dict[str, Any], attempts: Attempts) -> dict[str, Any]:
        """``request`` for the next attempt: its ``timeout`` what is left of the call's, and not
        streamed once ``attempts.plain``."""
        sent = {**request, "timeout": attempts.left()}
        if attempts.plain:
            sent.pop("stream", None)
            sent.pop("stream_options", None)
        return sent

    def _counted(self, request: dict[str, Any], reply: ModelMessage) -> ModelMessage:
        """``reply`` with tandem's own count of its tokens when the host reported none
        (``tandem.reasoner.models.token_count``; blocks for the host's tokenize requests)."""
        if not needs_count(reply.usage):
            return reply
        usage = self._counter.usage(
            request["messages"],
            request.get("tools"),
            reply.content,
            reply.reasoning,
            reply.tool_calls,
            streamed=reply.usage.completion_tokens if reply.usage.counted_calls else None,
        )
        cost = self._cost(usage.prompt_tokens, usage.completion_tokens)
        return reply.model_copy(update={"usage": usage.model_copy(update={"cost_usd": cost})})

    def _retry_wait(self, exc: Exception, attempts: Attempts) -> float:
        """Seconds to wait before retrying after attempt ``attempts.number`` failed with ``exc``;
        raises the error to give up with (not a call failure, not transient, retries spent, a
        wait too long for this call to hold or past its deadline, or a stream that broke after
        text reached the listener). A stream with no chunk at all is asked again at once without
        streaming: hosts that fail a streamed request after its headers (llama-cpp-python) say
        why only in a plain answer."""
        attempt, held = attempts.number, attempts.held
        if isinstance(exc, PartialStreamError):
            error = self._translate(exc.cause, attempts=attempt + 1)
            attempt_failed(str(error))
            raise TransientModelError(
                f"{error} The stream broke after {exc.delivered} characters had reached "
                "on_delta, so it was not retried here.",
                model=self.model,
                api_base=self.api_base,
                status_code=error.status_code,
            ) from exc.cause
        if not is_call_failure(exc):
            raise exc
        error = self._translate(exc, attempts=attempt + 1)
        attempt_failed(str(error))  # heard at once, retried or not: a deadline may end the job first
        if isinstance(error, MalformedReplyError):  # retried here only, a bounded number of times
            if error.reply.kind == "no-chunks" and not attempts.plain and self.retry.can_retry(attempt):
                attempts.plain = True
                wait = 0.0
                logger.warning("%s; asking again without streaming", error)
            else:
                wait = error.next_wait(self.retry, attempt, held)
            if not attempts.fits(wait):
                raise error.final(attempt + 1) from exc
            return wait
        if (
            not isinstance(error, TransientModelError)
            or not self.retry.can_retry(attempt)
            or error.status_code in self.no_retry_statuses
        ):
            raise error from exc
        delay = self.retry.delay(attempt, error.retry_after, held)
        if delay is None or not attempts.fits(delay):
            why = self.retry.refusal(error.retry_after, held) if delay is None else attempts.ran_out()
            raise TransientModelError(
                f"{error} {why}",
                retry_after=error.retry_after,
                model=self.model,
                api_base=self.api_base,
                status_code=error.status_code,
            ) from exc
        logger.warning(
            "model %s at %s: attempt %d of %d failed (%s); retrying in %.2fs",
            self.model,
            self.host,
            attempt + 1,
            self.retry.max_retries + 1,
            error.status_code or failure_kind(exc),
            delay,
        )
        tracing.event(
            "gen_ai.retry",
            {
                "tandem.attempt": attempt + 1,
                "tandem.retry_in": delay,
                "error.type": str(error.status_code or failure_kind(exc)),
            },
        )
        return delay

    # -- requests ----------------------------------------------------------------------

    def _request(
        self, sys_prompt: str, messages: Sequence[ChatMessage], tools: Sequence[Tool] | None
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(sys_prompt, messages),
            "timeout": self.timeout,
            "num_retries": 0,  # LiteLLM's retry loop: ours replaces it
            "max_retries": 0,  # the OpenAI SDK client's retries (2 by default)
            "drop_params": True,
        }
        if self.api_base:
            request["api_base"] = self.api_base
        if self._api_key:
            request["api_key"] = self._api_key
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if (cap := reply_cap(self.max_tokens, self.context_budget())) is not None:
            request["max_tokens"] = cap
        if tools:
            request.update(tool_fields([tool.openai_schema() for tool in tools], self.tool_choice))
        if self.extra_body:
            request["extra_body"] = dict(self.extra_body)
        if self.stream:
            request["stream"] = True
            request["stream_options"] = {"include_usage": True}
        return request

    def _complete(self, request: dict[str, Any], on_delta: DeltaListener | None) -> ModelMessage:
        raw_bodies: list[str] = []
        response = import_litellm().completion(**request, logger_fn=body_keeper(raw_bodies))
        return self._from_response(response, raw_bodies, on_delta)

    async def _acomplete(self, request: dict[str, Any], on_delta: DeltaListener | None) -> ModelMessage:
        if self._direct_name is not None and (client := direct_http.session()) is not None:
            return await self._direct(client, request, on_delta)
        raw_bodies: list[str] = []
        response = await import_litellm().acompletion(**request, logger_fn=body_keeper(raw_bodies))
        return self._from_response(response, raw_bodies, on_delta)

    def _from_response(
        self, response: Any, raw_bodies: list[str], on_delta: DeltaListener | None
    ) -> ModelMessage:
        """The reply of a non-streamed call (``raw_bodies``: the host's JSON, when LiteLLM gave it)."""
        choices = getattr(response, "choices", None) or []
        if not choices:  # a success answer that is no chat completion: retried, bounded
            raise direct_http.UnreadableReply("not-completion", raw_bodies[0] if raw_bodies else "")
        message = choices[0].message
        raw = raw_message(raw_bodies[0]) if raw_bodies else None
        if raw is not None:
            content, provider_reasoning = raw
        else:
            content = getattr(message, "content", None) or ""
            provider_reasoning = getattr(message, "reasoning_content", None) or ""
        tool_calls = [
            NativeToolCall(
                id=getattr(call, "id", None) or new_call_id(),
                name=getattr(call.function, "name", None) or "",
                arguments=getattr(call.function, "arguments", None) or "{}",
            )
            for call in (getattr(message, "tool_calls", None) or [])
        ]
        usage = usage_of(getattr(response, "usage", None))
        return self._reply(content, provider_reasoning, tool_calls, usage, on_delta)

    def _reply(
        self,
        content: str,
        provider_reasoning: str,
        tool_calls: list[NativeToolCall],
        usage: Usage,
        on_delta: DeltaListener | None,
    ) -> ModelMessage:
        """The reply of a non-streamed call from the host's content, reasoning field (``""`` for
        none: the parser splits the content then), native tool calls and usage."""
        if provider_reasoning:
            reasoning, parsed_calls = provider_reasoning, []
        else:
            split = self.parser.parse(content, thinking=self.thinking)
            reasoning, content, parsed_calls = split.reasoning, split.content, list(split.tool_calls)
        content += self._calls_from_reasoning(reasoning, content)
        tool_calls = tool_calls + [parsed_tool_call(call) for call in parsed_calls]
        if on_delta is not None:
            on_delta(reasoning, content)
        return self._message(content, reasoning, tool_calls, usage)

    async def _direct(
        self, client: Any, request: dict[str, Any], on_delta: DeltaListener | None
    ) -> ModelMessage:
        """``_acomplete`` without LiteLLM: the same request posted to the host as it is
        (``tandem.reasoner.models.direct_http``), the same reply."""
        body = self._direct_body(request)
        assert self.api_base is not None
        data = await direct_http.post_chat(client, self.api_base, self._api_key, body, request["timeout"])
        message = data["choices"][0]["message"]  # a chat completion: post_chat checked its shape
        content, provider_reasoning = message_text(message) or ("", "")
        tool_calls = [
            NativeToolCall(
                id=call.get("id") or new_call_id(),
                name=(call.get("function") or {}).get("name") or "",
                arguments=(call.get("function") or {}).get("arguments") or "{}",
            )
            for call in (message.get("tool_calls") or [])
            if isinstance(call, dict)
        ]
        return self._reply(content, provider_reasoning, tool_calls, usage_of(data.get("usage")), on_delta)

    def _streamed(
        self, request: dict[str, Any], on_delta: DeltaListener | None, attempts: Attempts
    ) -> ModelMessage:
        wait_for_warm_up()  # a worker's warm-up in progress: else this reply would pause mid-stream
        stream = import_litellm().completion(**request)
        reader = self._reader(on_delta)
        iterator = iter(stream)
        while True:
            try:
                chunk = next(iterator)
            except StopIteration:
                break
            except Exception as exc:
                reader.broke(exc)
                raise
            reader.feed(chunk)
            if not attempts.left():  # a host that trickles: each read has its own time-out only
                raise TimeoutError(f"the call's {self.timeout:g}s ran out while the reply streamed")
        return self._message(*reader.finish(stream))

    async def _astreamed(self, request: dict[str, Any], on_delta: DeltaListener | None) -> ModelMessage:
        if self._direct_name is not None and (client := direct_http.session()) is not None:
            return await self._direct_streamed(client, request, on_delta)
        if not wait_for_warm_up(0):  # as ``_streamed``, without holding up the loop's other calls
            await asyncio.to_thread(wait_for_warm_up)
        stream = await import_litellm().acompletion(**request)
        return await self._read(stream, self._reader(on_delta))

    async def _read(self, stream: Any, reader: StreamReader) -> ModelMessage:
        """The reply of an async ``stream`` (LiteLLM's, or a ``direct_http.ChatStream``), read by
        ``reader``: a stream that breaks after text reached the listener is not retried."""
        iterator = stream.__aiter__()
        while True:
            try:
                chunk = await iterator.__anext__()
            except StopAsyncIteration:
                break
            except Exception as exc:
                reader.broke(exc)
                raise
            reader.feed(chunk)
        return self._message(*reader.finish(stream))

    async def _direct_streamed(
        self, client: Any, request: dict[str, Any], on_delta: DeltaListener | None
    ) -> ModelMessage:
        """``_astreamed`` without LiteLLM: the same request posted to the host, its event stream
        read by the same ``StreamReader`` (``tandem.reasoner.models.direct_http.open_stream``)."""
        body = self._direct_body(request)
        body["stream"], body["stream_options"] = (
            True,
            request.get("stream_options") or {"include_usage": True},
        )
        assert self.api_base is not None
        async with direct_http.open_stream(
            client, self.api_base, self._api_key, body, request["timeout"]
        ) as stream:
            return await self._read(stream, self._reader(on_delta))

    def _direct_body(self, request: dict[str, Any]) -> dict[str, Any]:
        """The body a direct call posts for ``request`` (what LiteLLM would send the host)."""
        body: dict[str, Any] = {"model": self._direct_name, "messages": request["messages"]}
        for key in ("temperature", "max_tokens", "tools", "tool_choice"):
            if key in request:
                body[key] = request[key]
        body.update(request.get("extra_body") or {})
        return body

    def _reader(self, on_delta: DeltaListener | None) -> StreamReader:
        return StreamReader(self.parser, self.thinking, on_delta, self._calls_from_reasoning)

    def _calls_from_reasoning(self, reasoning: str, content: str) -> str:
        """The text to append to ``content``: reasoning's ``<function_call>`` blocks, if enabled."""
        return calls_from_reasoning(reasoning, content) if self.tool_calls_in_reasoning else ""

    def _message(
        self, content: str, reasoning: str, tool_calls: list[NativeToolCall], usage: Usage
    ) -> ModelMessage:
        cost = self._cost(usage.prompt_tokens, usage.completion_tokens)
        return ModelMessage(
            role="actor",
            content=content,
            reasoning=reasoning,
            tool_calls=tool_calls,
            usage=usage.model_copy(update={"cost_usd": cost}) if cost else usage,
            model=self.model,
        )

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The call's price from LiteLLM's local cost map; 0 for a model the map does not know."""
        if (not prompt_tokens and not completion_tokens) or self._unpriced:
            return 0.0
        if "litellm" not in sys.modules and not listed(self.model):  # no price: LiteLLM stays out
            self._unpriced = True
            return 0.0
        try:
            prompt_cost, completion_cost = import_litellm().cost_per_token(
                model=self.model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
            )
        except Exception:  # unknown model (self-hosted): LiteLLM raises; such calls cost nothing here
            self._unpriced = True  # the cost map does not change while the process runs
            return 0.0
        cost = float(prompt_cost or 0.0) + float(completion_cost or 0.0)
        if cost == 0.0 and prompt_tokens and completion_tokens:
            self._unpriced = True  # priced at 0 (``price_unpriced_model``): not looked up again
        return cost

    def _translate(self, exc: BaseException, *, attempts: int) -> ModelCallError:
        return translate(
            exc,
            attempts=attempts,
            model=self.model,
            api_base=self.api_base,
            api_key=self._api_key,
            role=self.role,
            timeout=self.timeout,
        )
