"""Counting a call's tokens when its host reported none.

A host that ignores ``stream_options.include_usage`` (llama-cpp-python's server) answers a streamed
request without usage, and some answer plain ones without it too. Counted as 0, such calls would
slip past token budgets, tokens-per-minute limits, metrics and cost, so tandem counts them itself,
with the first of these that it has:

1. **the model's tokenizer**, where LiteLLM holds it without a download (OpenAI's models:
   ``litellm.token_counter``, tiktoken);
2. **the host's tokenizer**, through its tokenize endpoint: llama-cpp-python's
   ``POST /extras/tokenize/count`` (``{"input": text}``, answering ``{"count": n}``), llama.cpp's
   ``POST /tokenize`` (``{"content": text}``, answering ``{"tokens": [...]}``), vLLM's and
   SGLang's ``POST /tokenize`` (``{"model": name, "prompt": text}``, answering ``{"count": n}``),
   all at the root of the host's address (``API_BASE`` less its ``/v1``). The first that answers
   is kept by the counter (one a model service) for its life; a host where none does is counted by
3. **an estimate**: one token per ``CHARS_PER_TOKEN`` characters, rounded up, which is more than
   tokenizers make of English text or code, so a budget binds early rather than late.

The prompt is counted as its messages' text (role, content, tool calls) and the tool schemas,
plus ``MESSAGE_FRAMING`` tokens a message and ``REPLY_FRAMING`` for the reply (the host's chat
template is not known here: these stand for its markers). A streamed reply counts a token for
each chunk that brought text or tool-call pieces: hosts send a token a chunk (llama.cpp, vLLM,
SGLang, TGI, Ollama), and that is what the model wrote, where its text tokenized anew may differ
(a small model's odd token choices: by a fifth for SmolLM2-135M). A plain reply counts its
reasoning, content and tool calls by the tokenizer. Such a usage is marked:
``Usage.counted_calls`` is 1.

Only a reply its host sent without usage is counted here (``needs_count``); one with usage
(OpenAI, vLLM, the test hosts) never costs a tokenize request. The prompt's tokenize request goes
to the host that read the prompt, with the same key.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tandem.reasoner.messages import NativeToolCall, Usage

__all__ = ["CHARS_PER_TOKEN", "MESSAGE_FRAMING", "REPLY_FRAMING", "TokenCounter", "estimate", "needs_count"]

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3
"""Characters per token of the estimate (tokenizers make about 4 of English text)."""
MESSAGE_FRAMING = 4
"""Tokens counted for each message's markers in the chat template (role, start and end)."""
REPLY_FRAMING = 3
"""Tokens counted for the markers that open the reply."""
TOKENIZE_TIMEOUT = 3.0
"""Seconds one tokenize request may take before the call is estimated instead."""

_Body = Callable[[str, str], dict[str, Any]]
ENDPOINTS: tuple[tuple[str, _Body], ...] = (
    ("/extras/tokenize/count", lambda text, model: {"input": text}),  # llama-cpp-python
    ("/tokenize", lambda text, model: {"content": text}),  # llama.cpp's server
    ("/tokenize", lambda text, model: {"model": model, "prompt": text}),  # vLLM, SGLang
)
"""The tokenize endpoints tried, in order: path under the host's root, and the body for a text."""

_UNKNOWN = -1
_OPENAI_NAMES = re.compile(r"^(?:gpt-|chatgpt-|o\d)")


def needs_count(usage: Usage) -> bool:
    """Whether a reply's ``usage`` is for tandem to count: the host reported no tokens, or a
    stream's reader marked it counted (its chunks only)."""
    return bool(usage.counted_calls) or not (usage.prompt_tokens or usage.completion_tokens)


def estimate(text: str) -> int:
    """The estimated tokens of ``text``: one per ``CHARS_PER_TOKEN`` characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def prompt_text(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> str:
    """The text of a request's messages (role, content, tool calls) and tool schemas."""
    parts = []
    for message in messages:
        parts.append(str(message.get("role") or ""))
        content = message.get("content")
        if content:
            parts.append(content if isinstance(content, str) else json.dumps(content))
        for call in message.get("tool_calls") or ():
            function = (call.get("function") or {}) if isinstance(call, dict) else {}
            parts.append(f"{function.get('name') or ''} {function.get('arguments') or ''}")
    parts.extend(json.dumps(tool) for tool in tools or ())
    return "\n".join(parts)


def reply_text(content: str, reasoning: str, tool_calls: Sequence[NativeToolCall]) -> str:
    """The text of a reply: its reasoning, content and tool calls."""
    calls = [f"{call.name} {call.arguments}" for call in tool_calls]
    return "\n".join(part for part in (reasoning, content, *calls) if part)


def _root(api_base: str) -> str:
    base = api_base.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def _name(model: str) -> str:
    return model.split("/", 1)[1] if "/" in model else model


class TokenCounter:
    """Counts the tokens of calls to ``model`` at ``api_base`` whose host reported none (see the
    module docstring); ``api_key`` goes with the tokenize requests, as with the calls."""

    def __init__(self, model: str, api_base: str | None, api_key: str | None = None) -> None:
        self.model = model
        self.name = _name(model)
        self.root = _root(api_base) if api_base else None
        self._api_key = api_key
        self._client: Any = None
        self._lock = threading.Lock()
        self._endpoint: int | None = _UNKNOWN
        """The index in ``ENDPOINTS`` that answers at this host; ``None``: none does."""
        self._openai = bool(_OPENAI_NAMES.match(self.name)) and (not api_base or model.startswith("openai/"))

    def usage(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        content: str,
        reasoning: str,
        tool_calls: Sequence[NativeToolCall],
        streamed: int | None = None,
    ) -> Usage:
        """The counted ``Usage`` of one call: the request's ``messages`` and ``tools`` (as sent),
        the reply's ``content``, ``reasoning`` and ``tool_calls``; for a stream, the chunks that
        brought them (``streamed``: the reply's tokens). Blocks for the tokenize requests (a few
        milliseconds on a local host): await it in a thread from asyncio code."""
        prompt = prompt_text(messages, tools)
        reply = "" if streamed is not None else reply_text(content, reasoning, tool_calls)
        counts = self._tokenized(prompt, reply)
        prompt_tokens, completion_tokens = counts or (estimate(prompt), estimate(reply))
        prompt_tokens += MESSAGE_FRAMING * len(messages) + REPLY_FRAMING
        if streamed is not None:
            completion_tokens = streamed
        return Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            calls=1,
            counted_calls=1,
        )

    def _tokenized(self, prompt: str, reply: str) -> tuple[int, int] | None:
        """Both texts' tokens by the model's or the host's tokenizer; ``None``: estimate them."""
        if self._openai:
            counted = self._by_litellm(prompt, reply)
            if counted is not None:
                return counted
        if self.root is None:
            return None
        try:
            known = self._endpoint
            if known is None:
                return None
            if known == _UNKNOWN:
                probed = self._probe(prompt)
                if probed is None:
                    return None
                known, prompt_tokens = probed
            else:
                prompt_tokens = self._count(known, prompt)
            return prompt_tokens, self._count(known, reply) if reply else 0
        except Exception as exc:  # a host that fails a tokenize request is estimated this time
            logger.debug("tokenize at %s failed (%s): the call's tokens are estimated", self.root, exc)
            return None

    def count_text(self, text: str) -> int | None:
        """``text``'s tokens by the model's tokenizer (LiteLLM's, for the models it holds one
        for) or the host's tokenize endpoint; ``None`` when neither is at hand or it failed (the
        caller estimates). Blocks for the tokenize request."""
        if self._openai:
            counted = self._by_litellm(text, "")
            if counted is not None:
                return counted[0]
        if self.root is None or self._endpoint is None:
            return None
        try:
            if self._endpoint == _UNKNOWN:
                probed = self._probe(text)
                return None if probed is None else probed[1]
            return self._count(self._endpoint, text)
        except Exception as exc:  # a host that fails a tokenize request is estimated this time
            logger.debug("tokenize at %s failed (%s): the text's tokens are estimated", self.root, exc)
            return None

    @property
    def api_key(self) -> str | None:
        """The key sent with the tokenize requests (the model's)."""
        return self._api_key

    @property
    def tokenizer_name(self) -> str:
        """What counts this model's tokens: the model (LiteLLM's tokenizer) or the host's root."""
        return f"{self.name}@{self.root or 'litellm'}"

    def _by_litellm(self, prompt: str, reply: str) -> tuple[int, int] | None:
        from tandem.reasoner.models.litellm_setup import import_litellm

        try:
            counter = import_litellm().token_counter
            return int(counter(model=self.name, text=prompt)), int(counter(model=self.name, text=reply))
        except Exception:  # a LiteLLM without this model's tokenizer: the host's, or an estimate
            return None

    def _probe(self, text: str) -> tuple[int, int] | None:
        """The first tokenize endpoint that counts ``text`` at this host and its count (the
        endpoint kept for the process), or ``None`` when none does (kept too). Connection
        failures raise: nothing is kept."""
        import httpx

        assert self.root is not None
        found: tuple[int, int] | None = None
        for index in range(len(ENDPOINTS)):
            try:
                found = index, self._count(index, text)
                break
            except httpx.HTTPStatusError:
                continue
            except (ValueError, KeyError, TypeError, AttributeError):  # an answer of another shape
                continue
        if found is None:
            logger.info(
                "model host %s offers no tokenize endpoint: replies without usage are estimated", self.root
            )
        self._endpoint = None if found is None else found[0]
        return found

    def _count(self, index: int, text: str) -> int:
        """``text``'s tokens by tokenize endpoint ``index`` (``httpx`` errors, or ``ValueError``
        for an answer without a count)."""
        path, body = ENDPOINTS[index]
        answer = self._http().post(f"{self.root}{path}", json=body(text, self.name))
        answer.raise_for_status()
        data = answer.json()
        if isinstance(data.get("count"), int):
            return int(data["count"])
        if isinstance(data.get("tokens"), list):
            return len(data["tokens"])
        raise ValueError(f"no count in the tokenize answer {answer.text[:200]!r}")

    def _http(self) -> Any:
        with self._lock:  # step threads share the counter: one client for all of them
            if self._client is None:
                import httpx

                headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
                self._client = httpx.Client(timeout=TOKENIZE_TIMEOUT, headers=headers)
            return self._client
