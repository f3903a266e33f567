"""``LiteLlmModelService``: a ``ModelService`` over ``litellm.completion`` for any model host.

``agenerate`` is the same call over ``litellm.acompletion`` for asyncio code (the reasoners'
``arun``); every contract below holds for both.

One instance talks to one model: an OpenAI-compatible server (vLLM, SGLang, llama.cpp, a gateway)
through ``api_base``, or any provider LiteLLM knows by its model prefix.

Contracts:

* **Retries are ours.** LiteLLM's and the OpenAI SDK's own retries are switched off
  (``num_retries=0``, ``max_retries=0``). Transient failures (HTTP 408, 429, 5xx, time-outs,
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
  (``tandem.reasoner.models.litellm_errors.MalformedReplyError``). Other failures (400, 401, 403, 404,
  422, context window exceeded) raise ``ModelCallError`` at once. Messages name the model, the
  host, the HTTP status, the provider's words and what to do; they never hold the API key.
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
* **Native tool calls**: with ``tools``, the OpenAI ``tools=`` schemas are sent and the reply's
  ``tool_calls`` (aggregated by index when streamed) become ``NativeToolCall``; so do tool calls
  a Harmony parser (gpt-oss) finds in the text, with generated ids.
* **``tool_calls_in_reasoning=True``** copies every ``<function_call>`` block found in the
  reasoning to the end of the content (the reasoning keeps them), because prompt-mode call
  parsing ignores thinking sections and some models write their calls while thinking.
* **Usage** of each call is in ``ModelMessage.usage`` (``calls=1``); tokens the host did not
  report count 0 (LiteLLM's own estimate for a stream without usage is not used).
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
from tandem.reasoner.errors import ConfigurationError, ModelCallError, TransientModelError
from tandem.reasoner.messages import ModelMessage, NativeToolCall, Usage
from tandem.reasoner.models import direct_http
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
    message_text,
    new_call_id,
    parsed_tool_call,
    raw_message,
    usage_of,
)
from tandem.reasoner.models.litellm_setup import import_litellm, wait_for_warm_up
from tandem.reasoner.models.litellm_stream import PartialStreamError, StreamReader, body_keeper
from tandem.reasoner.models.model_service import BaseModelService
from tandem.reasoner.models.retry_policy import RetryPolicy

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
    ``max_tokens`` are sent only when set. ``timeout`` is seconds per attempt. ``extra_body`` is
    merged into the request body (its ``chat_template_kwargs`` win over those ``thinking``
    sets). ``tool_runner`` runs prompt-mode calls (``call_function``); a default one is made on
    first use. ``no_retry_statuses`` (e.g. ``{429, 503}``) are raised at once as
    ``TransientModelError`` instead of retried here: a fleet-wide limiter handles them (it backs
    the whole fleet off, and the step waits without holding a thread). ``retry_hold`` bounds
    the seconds one call waits between its attempts, in all (``None``: only ``backoff_max``
    bounds each wait); a longer wait is left to the caller (see the module docstring). ``role``
    (``"thinker"``/``"actor"``) only makes error advice name the right
    ``TANDEM_<ROLE>_*`` setting. ``sleep``, ``asleep`` (the back-off wait of ``agenerate``) and
    ``rng`` are injectable for tests.
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
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(
                f"model must be a LiteLLM model string such as 'openai/gpt-4o', not {model!r}"
            )
        if timeout is None or timeout <= 0:
            raise ConfigurationError(f"timeout must be a positive number of seconds, not {timeout!r}")
        super().__init__(tool_runner)
        self.retry = RetryPolicy(
            max_retries, backoff_base, backoff_max, sleep, rng or random.Random(), max_hold=retry_hold
        )
        self.asleep = asleep
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
        self.parser = self._resolve_parser(reasoning_parser)
        self.extra_body = self._merged_extra_body(extra_body, thinking)
        self._unpriced = False
        """True once the cost map gave this model no price: its calls cost 0 without a lookup."""
        self._direct_name = direct_http.direct_model(model, self.api_base, self._api_key)
        """The model's name at its host when non-streamed calls on a loop that allows it may skip
        LiteLLM (``tandem.reasoner.models.direct_http``); ``None``: always through LiteLLM."""

    def __repr__(self) -> str:
        return f"LiteLlmModelService(model={self.model!r}, api_base={self.host!r}, stream={self.stream!r})"

    # -- configuration -----------------------------------------------------------------

    @staticmethod
    def _resolve_parser(parser: str | ReasoningParser | None) -> ReasoningParser:
        from tandem.reasoner.parsing import get_reasoning_parser

        if parser is None:
            return get_reasoning_parser("think")
        if isinstance(parser, str):
            return get_reasoning_parser(parser)
        if not (callable(getattr(parser, "parse", None)) and callable(getattr(parser, "stream", None))):
            raise ConfigurationError(
                "reasoning_parser must be a parser name or an object with parse() and stream(), "
                f"not {parser!r}"
            )
        return parser

    @staticmethod
    def _merged_extra_body(extra_body: Mapping[str, Any] | None, thinking: bool | None) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        if thinking is not None:
            merged["chat_template_kwargs"] = {"enable_thinking": thinking, "thinking": thinking}
        for key, value in (extra_body or {}).items():
            if key == "chat_template_kwargs" and isinstance(value, Mapping):
                merged["chat_template_kwargs"] = {**merged.get("chat_template_kwargs", {}), **value}
            else:
                merged[key] = value
        return merged

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

        The request is the system prompt (when not empty) followed by ``messages`` unchanged.
        Raises ``TransientModelError`` when retries are spent, ``ModelCallError`` otherwise.
        """
        request = self._request(sys_prompt, messages, tools)
        attempt, held = 0, 0.0
        while True:
            try:
                if self.stream:
                    return self._streamed(request, on_delta)
                return self._complete(request, on_delta)
            except Exception as exc:
                wait = self._retry_wait(exc, attempt, held)
            self.retry.sleep(wait)
            attempt, held = attempt + 1, held + wait

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
        attempt, held = 0, 0.0
        while True:
            try:
                if self.stream:
                    return await self._astreamed(request, on_delta)
                return await self._acomplete(request, on_delta)
            except Exception as exc:
                wait = self._retry_wait(exc, attempt, held)
            await self.asleep(wait)
            attempt, held = attempt + 1, held + wait

    def _retry_wait(self, exc: Exception, attempt: int, held: float) -> float:
        """Seconds to wait before retrying after attempt ``attempt`` failed with ``exc``, the call
        having waited ``held`` seconds so far; raises the error to give up with (not a call
        failure, not transient, retries spent, a wait too long for this call to hold, or a stream
        that broke after text reached the listener)."""
        if isinstance(exc, PartialStreamError):
            error = self._translate(exc.cause, attempts=attempt + 1)
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
        if isinstance(error, MalformedReplyError):  # retried here only, a bounded number of times
            return error.next_wait(self.retry, attempt, held)
        if (
            not isinstance(error, TransientModelError)
            or not self.retry.can_retry(attempt)
            or error.status_code in self.no_retry_statuses
        ):
            raise error from exc
        wait = self.retry.delay(attempt, error.retry_after, held)
        if wait is None:
            raise TransientModelError(
                f"{error} {self.retry.refusal(error.retry_after, held)}",
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
            wait,
        )
        tracing.event(
            "gen_ai.retry",
            {
                "tandem.attempt": attempt + 1,
                "tandem.retry_in": wait,
                "error.type": str(error.status_code or failure_kind(exc)),
            },
        )
        return wait

    # -- requests ----------------------------------------------------------------------

    def _request(
        self, sys_prompt: str, messages: Sequence[ChatMessage], tools: Sequence[Tool] | None
    ) -> dict[str, Any]:
        chat: list[ChatMessage] = [{"role": "system", "content": sys_prompt}] if sys_prompt else []
        chat.extend(messages)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": chat,
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
        if self.max_tokens is not None:
            request["max_tokens"] = self.max_tokens
        if tools:
            request["tools"] = [tool.openai_schema() for tool in tools]
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
        data = await direct_http.post_chat(client, self.api_base, self._api_key, body, self.timeout)
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

    def _streamed(self, request: dict[str, Any], on_delta: DeltaListener | None) -> ModelMessage:
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
        return self._message(*reader.finish(stream))

    async def _astreamed(self, request: dict[str, Any], on_delta: DeltaListener | None) -> ModelMessage:
        if self._direct_name is not None and (client := direct_http.session()) is not None:
            return await self._direct_streamed(client, request, on_delta)
        if not wait_for_warm_up(0):  # as ``_streamed``, without holding up the loop's other calls
            await asyncio.to_thread(wait_for_warm_up)
        stream = await import_litellm().acompletion(**request)
        reader = self._reader(on_delta)
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
        reader = self._reader(on_delta)
        async with direct_http.open_stream(
            client, self.api_base, self._api_key, body, self.timeout
        ) as stream:
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

    def _direct_body(self, request: dict[str, Any]) -> dict[str, Any]:
        """The body a direct call posts for ``request`` (what LiteLLM would send the host)."""
        body: dict[str, Any] = {"model": self._direct_name, "messages": request["messages"]}
        for key in ("temperature", "max_tokens", "tools"):
            if key in request:
                body[key] = request[key]
        body.update(request.get("extra_body") or {})
        return body

    def _reader(self, on_delta: DeltaListener | None) -> StreamReader:
        return StreamReader(self.parser, self.thinking, on_delta, self._calls_from_reasoning)

    def _calls_from_reasoning(self, reasoning: str, content: str) -> str:
        """The text to append to ``content``: reasoning's ``<function_call>`` blocks, if enabled."""
        if not self.tool_calls_in_reasoning or "<function_call>" not in reasoning:
            return ""
        from tandem.reasoner.function_calling import parse_function_calls

        # Only blocks that read cleanly: reasoning holds drafts, and a draft's broken block is
        # not a request the model made.
        blocks = [f"<function_call>{c.raw}</function_call>" for c in parse_function_calls(reasoning) if c.ok]
        if not blocks:
            return ""
        separator = "\n" if content and not content.endswith("\n") else ""
        return separator + "\n".join(blocks)

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
