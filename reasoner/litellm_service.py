"""``LiteLlmModelService``: a ``ModelService`` over ``litellm.completion`` for any model host.

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
  Other failures (400, 401, 403, 404, 422, context window exceeded) raise ``ModelCallError``
  at once. Messages name the model, the host, the HTTP status, the provider's words and what to
  do; they never hold the API key.
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

LiteLLM is imported on first use, not with this module: workers and the CLI import it cheaply.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tandem.reasoner.errors import ConfigurationError, ModelCallError, TransientModelError
from tandem.reasoner.litellm_errors import (
    TRANSIENT_STATUSES,
    failure_kind,
    parse_retry_after,
    provider_message,
    response_headers,
)
from tandem.reasoner.messages import FunctionCallResult, ModelMessage, NativeToolCall, Usage

if TYPE_CHECKING:  # kept out of the import path: ``toolkit`` pulls in MCP and takes ~1 s to import
    from tandem.reasoner.model_service import ChatMessage, DeltaListener
    from tandem.reasoner.parsing.base import ReasoningParser
    from tandem.reasoner.tool_runner import ToolRunner
    from tandem.toolkit.context import ToolCallContext
    from tandem.toolkit.tool import Tool

__all__ = ["LiteLlmModelService", "parse_retry_after"]

logger = logging.getLogger(__name__)

_litellm: ModuleType | None = None
_litellm_lock = threading.Lock()


def _import_litellm() -> ModuleType:
    """Import LiteLLM once, quietly: no "Give Feedback / Get Help" banner printed per error."""
    global _litellm
    if _litellm is None:
        with _litellm_lock:
            if _litellm is None:
                # LiteLLM fetches its model price list from the internet on import (with retries
                # and sleeps) unless told to use the copy it ships; a worker must not wait on that.
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import litellm

                litellm.suppress_debug_info = True
                _litellm = litellm
    return _litellm


# -- the service --------------------------------------------------------------------------


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _parsed_tool_call(call: Any) -> NativeToolCall:
    """A parser's in-band tool call (an object or a dict with ``name``, ``arguments``, maybe ``id``)."""
    get = call.get if isinstance(call, Mapping) else lambda key, default=None: getattr(call, key, default)
    arguments = get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return NativeToolCall(
        id=get("id", None) or _new_call_id(), name=str(get("name", "")), arguments=arguments
    )


class _ToolCallAccumulator:
    """Streamed tool-call deltas joined by ``index`` (id and name from the first delta that has them)."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}
        self._last: int | None = None

    def add(self, delta_calls: Iterable[Any]) -> None:
        for call in delta_calls:
            index = getattr(call, "index", None)
            call_id = getattr(call, "id", None)
            if index is None:  # a host that omits the index: a new id starts a new call
                if self._last is None or (call_id and self._calls[self._last]["id"] not in ("", call_id)):
                    index = len(self._calls)
                else:
                    index = self._last
            entry = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            self._last = index
            function = getattr(call, "function", None)
            if call_id and not entry["id"]:
                entry["id"] = call_id
            name = getattr(function, "name", None)
            if name and not entry["name"]:
                entry["name"] = name
            arguments = getattr(function, "arguments", None)
            if arguments:
                entry["arguments"] += arguments

    def calls(self) -> list[NativeToolCall]:
        return [
            NativeToolCall(id=c["id"] or _new_call_id(), name=c["name"], arguments=c["arguments"] or "{}")
            for _, c in sorted(self._calls.items())
        ]


def _raw_message(body: str) -> tuple[str, str] | None:
    """``(content, reasoning)`` exactly as an OpenAI-compatible host sent them; ``None`` if unsure.

    LiteLLM moves a leading ``<think>…</think>`` of a non-streamed reply's content into
    ``reasoning_content`` itself (it does not for streams, and not under the configured parser's
    rules), so the host's own JSON, which LiteLLM hands to ``logger_fn`` as
    ``original_response``, is read instead. Any other shape falls back to LiteLLM's fields.
    """
    try:
        data = json.loads(body)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return None
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    if not isinstance(reasoning, str):
        return None
    return content or "", reasoning


class _PartialStreamError(Exception):
    """A stream failed after part of the reply reached the listener (not retryable here)."""

    def __init__(self, cause: BaseException, delivered: int) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.delivered = delivered


class LiteLlmModelService:
    """A language model reached through LiteLLM (see the module docstring for the contracts).

    ``model`` is a LiteLLM model string (``"hosted_vllm/Qwen3-32B"``, ``"openai/any"`` with
    ``api_base``); it is also ``name``. ``reasoning_parser`` is a parser name (see
    ``tandem.reasoner.parsing``) or a parser object; ``None`` uses ``"think"``. ``temperature`` and
    ``max_tokens`` are sent only when set. ``timeout`` is seconds per attempt. ``extra_body`` is
    merged into the request body (its ``chat_template_kwargs`` win over those ``thinking``
    sets). ``tool_runner`` runs prompt-mode calls (``call_function``); a default one is made on
    first use. ``role`` (``"thinker"``/``"actor"``) only makes error advice name the right
    ``TANDEM_<ROLE>_*`` setting. ``sleep`` and ``rng`` are injectable for tests.
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
        role: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(
                f"model must be a LiteLLM model string such as 'openai/gpt-4o', not {model!r}"
            )
        if timeout is None or timeout <= 0:
            raise ConfigurationError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if max_retries < 0:
            raise ConfigurationError(f"max_retries must be 0 or more, not {max_retries!r}")
        if backoff_base < 0 or backoff_max < 0:
            raise ConfigurationError(
                f"backoff_base and backoff_max must be 0 or more, not {backoff_base!r} and {backoff_max!r}"
            )
        self.model = model
        self.name = model
        self.api_base = api_base or None
        self._api_key = api_key or None
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.stream = stream
        self.thinking = thinking
        self.tool_calls_in_reasoning = tool_calls_in_reasoning
        self.role = role
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.parser = self._resolve_parser(reasoning_parser)
        self.extra_body = self._merged_extra_body(extra_body, thinking)
        self._tool_runner = tool_runner

    def __repr__(self) -> str:
        host = self.api_base or "provider default"
        return f"LiteLlmModelService(model={self.model!r}, api_base={host!r}, stream={self.stream!r})"

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
    def tool_runner(self) -> ToolRunner:
        """The runner of prompt-mode ``<function_call>`` blocks (made on first use)."""
        if self._tool_runner is None:
            from tandem.reasoner.tool_runner import ToolRunner

            self._tool_runner = ToolRunner()
        return self._tool_runner

    @property
    def host(self) -> str:
        """The host named in errors: ``api_base``, or ``"provider default"``."""
        return self.api_base or "provider default"

    # -- ModelService ------------------------------------------------------------------

    def call_function(
        self,
        tools: Sequence[Tool],
        model_response_text: str,
        tool_call_ctx: ToolCallContext | None = None,
    ) -> list[FunctionCallResult] | None:
        """Run the ``<function_call>`` blocks of a reply (delegated to ``tool_runner``)."""
        return self.tool_runner.call_function(tools, model_response_text, tool_call_ctx)

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
        attempt = 0
        while True:
            try:
                if self.stream:
                    return self._streamed(request, on_delta)
                return self._complete(request, on_delta)
            except _PartialStreamError as partial:
                error = self._translate(partial.cause, attempts=attempt + 1)
                raise TransientModelError(
                    f"{error} The stream broke after {partial.delivered} characters had reached "
                    "on_delta, so it was not retried here.",
                    model=self.model,
                    api_base=self.api_base,
                    status_code=error.status_code,
                ) from partial.cause
            except Exception as exc:
                if not self._is_call_failure(exc):
                    raise
                error = self._translate(exc, attempts=attempt + 1)
                if not isinstance(error, TransientModelError) or attempt >= self.max_retries:
                    raise error from exc
                wait = self._backoff(attempt, error.retry_after)
                if wait is None:
                    raise TransientModelError(
                        f"{error} The host asks to retry after {error.retry_after:g}s, longer than "
                        f"backoff_max ({self.backoff_max:g}s): not waited for here.",
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
                    self.max_retries + 1,
                    error.status_code or failure_kind(exc),
                    wait,
                )
                self.sleep(wait)
                attempt += 1

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

        def keep_raw_body(details: Mapping[str, Any]) -> None:
            body = details.get("original_response")
            if isinstance(body, str) and not raw_bodies:
                raw_bodies.append(body)

        response = _import_litellm().completion(**request, logger_fn=keep_raw_body)
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise ModelCallError(
                f"model {self.model!r} at {self.host} answered without any choice; check the host's logs",
                model=self.model,
                api_base=self.api_base,
            )
        message = choices[0].message
        raw = _raw_message(raw_bodies[0]) if raw_bodies else None
        if raw is not None:
            content, provider_reasoning = raw
        else:
            content = getattr(message, "content", None) or ""
            provider_reasoning = getattr(message, "reasoning_content", None) or ""
        if provider_reasoning:
            reasoning, parsed_calls = provider_reasoning, []
        else:
            split = self.parser.parse(content, thinking=self.thinking)
            reasoning, content, parsed_calls = split.reasoning, split.content, list(split.tool_calls)
        content += self._calls_from_reasoning(reasoning, content)
        tool_calls = [
            NativeToolCall(
                id=getattr(call, "id", None) or _new_call_id(),
                name=getattr(call.function, "name", None) or "",
                arguments=getattr(call.function, "arguments", None) or "{}",
            )
            for call in (getattr(message, "tool_calls", None) or [])
        ]
        tool_calls += [_parsed_tool_call(call) for call in parsed_calls]
        if on_delta is not None:
            on_delta(reasoning, content)
        return self._message(content, reasoning, tool_calls, self._usage(getattr(response, "usage", None)))

    def _streamed(self, request: dict[str, Any], on_delta: DeltaListener | None) -> ModelMessage:
        stream = _import_litellm().completion(**request)
        reasoning_parts: list[str] = []
        content_parts: list[str] = []
        native = _ToolCallAccumulator()
        parsed_calls: list[Any] = []
        parser_stream: Any = None
        provider_reasoning = False
        usage: Any = None
        delivered = 0

        def emit(reasoning: str, content: str) -> None:
            nonlocal delivered
            if reasoning:
                reasoning_parts.append(reasoning)
            if content:
                content_parts.append(content)
            if on_delta is not None and (reasoning or content):
                on_delta(reasoning, content)
                delivered += len(reasoning) + len(content)

        iterator = iter(stream)
        while True:
            try:
                chunk = next(iterator)
            except StopIteration:
                break
            except Exception as exc:
                if delivered and self._is_call_failure(exc):
                    raise _PartialStreamError(exc, delivered) from exc
                raise
            if getattr(chunk, "usage", None):
                usage = chunk.usage
            choices = getattr(chunk, "choices", None) or []
            if not choices:
                continue
            delta = choices[0].delta
            if delta is None:
                continue
            reasoning_piece = getattr(delta, "reasoning_content", None) or ""
            content_piece = getattr(delta, "content", None) or ""
            out_reasoning, out_content = reasoning_piece, ""
            if reasoning_piece:
                provider_reasoning = True
            if content_piece:
                if parser_stream is None and not provider_reasoning:
                    parser_stream = self.parser.stream(self.thinking)
                if parser_stream is None:
                    out_content = content_piece
                else:
                    split = parser_stream.feed(content_piece)
                    out_reasoning += split.reasoning
                    out_content = split.content
                    parsed_calls.extend(getattr(split, "tool_calls", ()) or ())
            if getattr(delta, "tool_calls", None):
                native.add(delta.tool_calls)
            emit(out_reasoning, out_content)
        if parser_stream is not None:
            tail = parser_stream.finish()
            parsed_calls.extend(getattr(tail, "tool_calls", ()) or ())
            emit(tail.reasoning, tail.content)
        reasoning, content = "".join(reasoning_parts), "".join(content_parts)
        emit("", self._calls_from_reasoning(reasoning, content))
        if usage is not None and not self._host_reported_usage(stream):
            usage = None
        tool_calls = native.calls() + [_parsed_tool_call(call) for call in parsed_calls]
        return self._message("".join(content_parts), reasoning, tool_calls, self._usage(usage))

    @staticmethod
    def _host_reported_usage(stream: Any) -> bool:
        """Whether the host sent usage, not LiteLLM's token estimate of the stream.

        LiteLLM ends a stream requested with ``include_usage`` by a chunk carrying usage even
        when the host sent none (it counts tokens itself). The chunks it received from the host
        (``CustomStreamWrapper.chunks``) show whether any carried usage; if that attribute is
        missing (another LiteLLM version) the reported usage is trusted.
        """
        received = getattr(stream, "chunks", None)
        if not isinstance(received, list):
            return True
        return any(getattr(chunk, "usage", None) for chunk in received)

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
        return ModelMessage(
            role="actor",
            content=content,
            reasoning=reasoning,
            tool_calls=tool_calls,
            usage=usage,
            model=self.model,
        )

    @staticmethod
    def _usage(usage: Any) -> Usage:
        def count(name: str) -> int:
            value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
            try:
                return int(value or 0)
            except (TypeError, ValueError):
                return 0

        if usage is None:
            return Usage(calls=1)
        prompt, completion = count("prompt_tokens"), count("completion_tokens")
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=count("total_tokens") or prompt + completion,
            calls=1,
        )

    # -- failures ----------------------------------------------------------------------

    @staticmethod
    def _is_call_failure(exc: BaseException) -> bool:
        """Errors of the call itself (LiteLLM/OpenAI/HTTP), as opposed to bugs or a listener's error."""
        import httpx

        if isinstance(exc, ModelCallError | httpx.HTTPError | ConnectionError | TimeoutError):
            return True
        module = type(exc).__module__
        return module.startswith(("litellm", "openai")) or any(
            cls.__module__.startswith("openai") for cls in type(exc).__mro__
        )

    def _backoff(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry ``attempt + 1``; ``None``: give up (Retry-After too long)."""
        if retry_after is not None:
            return retry_after if retry_after <= self.backoff_max else None
        ceiling = min(self.backoff_max, self.backoff_base * (2**attempt))
        return self.rng.uniform(0.0, ceiling)

    def _advice(self, kind: str, status: int | None, exc: BaseException) -> str:
        setting = f"TANDEM_{self.role.upper()}" if self.role else "TANDEM_<ROLE>"
        if kind == "timeout" or status == 408:
            return (
                f"no answer within {self.timeout:g}s: raise {setting}_TIMEOUT (timeout=) "
                "or check how loaded the host is"
            )
        if kind == "connection":
            return (
                "the connection failed or broke: check that the host is running and reachable and "
                f"that {setting}_API_BASE (api_base=) is right"
            )
        if type(exc).__name__ == "ContextWindowExceededError":
            return (
                "the conversation does not fit the model's context window: shorten the task or its "
                f"context, lower {setting}_MAX_TOKENS, or use a model with a longer context"
            )
        if status == 401:
            return f"the host refused the credentials: check {setting}_API_KEY (api_key=)"
        if status == 403:
            return f"the API key may not use this model: check the key's permissions and {setting}_MODEL"
        if status == 404:
            return (
                f"check the model name ({setting}_MODEL: after the provider prefix comes a model the "
                f"host serves) and {setting}_API_BASE; GET <api_base>/models lists the host's models"
            )
        if status == 429:
            return (
                "the host is rate limiting: lower the number of concurrent workers or raise the host's limits"
            )
        if status in (400, 422):
            return (
                "the host refused the request: check the parameters this model accepts "
                f"({setting}_TEMPERATURE, {setting}_MAX_TOKENS, tools, extra_body)"
            )
        if status == 504:
            return (
                "a gateway in front of the model timed out: check the host's load and the gateway's timeout"
            )
        if status is not None and status >= 500:
            return "the host failed: check its logs and health"
        return "check the model settings and the host"

    def _translate(self, exc: BaseException, *, attempts: int) -> ModelCallError:
        """The ``ModelCallError`` (or ``TransientModelError``) describing ``exc``."""
        if isinstance(exc, ModelCallError):
            return exc
        kind = failure_kind(exc)
        raw_status = getattr(exc, "status_code", None)
        status = raw_status if kind == "http" and isinstance(raw_status, int) else None
        transient = kind != "http" or (status is not None and (status in TRANSIENT_STATUSES or status >= 500))
        if kind == "http" and status is None:
            # no status at all: a LiteLLM-internal failure class; connection-like ones may pass
            transient = type(exc).__name__ in (
                "APIConnectionError",
                "ServiceUnavailableError",
                "InternalServerError",
            )
        what = {
            "timeout": "timed out",
            "connection": "connection failed",
        }.get(kind, f"HTTP {status}" if status is not None else type(exc).__name__)
        said = provider_message(exc).rstrip(". ")
        if len(said) > 600:
            said = said[:600] + "…"
        message = f"model {self.model!r} at {self.host}: {what}: {said or '(no message)'}"
        if transient and attempts > 1:
            message += f" (after {attempts} attempts)"
        advice = self._advice(kind, status, exc)
        message = f"{message}. {advice[0].upper()}{advice[1:]}."
        if self._api_key and len(self._api_key) >= 4:
            message = message.replace(self._api_key, "***")
        if transient:
            headers = response_headers(exc)
            return TransientModelError(
                message,
                retry_after=parse_retry_after(headers) if headers else None,
                model=self.model,
                api_base=self.api_base,
                status_code=status,
            )
        return ModelCallError(message, model=self.model, api_base=self.api_base, status_code=status)
